"""The machinery's reads for operators: queue, attempt and conflict statistics.

Every figure is aggregated by PostgreSQL (GROUP BY, filtered aggregates) in a fixed number of
statements, however many operations there are; ages and lease expiry are judged on the database
clock, as the claim and the reconciler judge them. The ops page and the /metrics collector share
these selectors, so both always say the same.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Q, QuerySet, Sum
from django.db.models.functions import Now, TruncMinute

from workers.models import NEEDS_OPERATOR, WAITING_STATUSES, Attempt, ChannelGate, Conflict, Operation, OperationStatus
from workers.sql import QUEUE_HEALTH_SQL

S = OperationStatus


@dataclass(frozen=True)
class QueueSummary:
    """Headline figures of the queue. `oldest_due_age` is how long the operation due longest has
    waited past its `next_attempt_at` without being claimed (None when nothing is due)."""

    due: int
    waiting: int
    running: int
    expired_leases: int
    dead: int
    conflict: int
    needs_operator: int
    open_conflicts: int
    oldest_due_age: datetime.timedelta | None


def _age(field: str) -> ExpressionWrapper:
    return ExpressionWrapper(Now() - F(field), output_field=DurationField())


def get_queue_summary() -> QueueSummary:
    """Two statements: one over the operations, one counting the unresolved conflicts."""
    due = Q(status__in=WAITING_STATUSES, next_attempt_at__lte=Now())
    figures = Operation.objects.aggregate(
        due=Count("id", filter=due),
        waiting=Count("id", filter=Q(status__in=WAITING_STATUSES)),
        running=Count("id", filter=Q(status=S.RUNNING)),
        expired_leases=Count("id", filter=Q(status=S.RUNNING, lease_expires_at__lt=Now())),
        dead=Count("id", filter=Q(status=S.DEAD)),
        conflict=Count("id", filter=Q(status=S.CONFLICT)),
        needs_operator=Count("id", filter=NEEDS_OPERATOR),
        oldest_due_age=Max(_age("next_attempt_at"), filter=due),
    )
    figures["open_conflicts"] = Conflict.objects.filter(resolved_at__isnull=True).count()
    return QueueSummary(**figures)


@dataclass(frozen=True)
class QueueHealth:
    """What keeps the claim fast (docs/operations.md#queue-health): how long the oldest open transaction of
    the database has been open (0 when none; a transaction open that long keeps every row version since
    its start), and the operation table's dead and live tuples as PostgreSQL's statistics last counted."""

    oldest_transaction_seconds: float
    dead_tuples: int
    live_tuples: int


def get_queue_health() -> QueueHealth:
    """One statement over pg_stat_activity and pg_stat_user_tables. A database role that does not own the
    other sessions sees their transactions only with pg_read_all_stats (docs/operations.md#queue-health)."""
    with connection.cursor() as cursor:
        cursor.execute(QUEUE_HEALTH_SQL)
        columns = [column.name for column in cursor.description]
        row = dict(zip(columns, cursor.fetchone(), strict=True))
    return QueueHealth(**row)


@dataclass(frozen=True)
class QueueCell:
    kind: str
    status: str
    count: int


def list_queue_depth() -> list[QueueCell]:
    """Operations counted by kind and status (every status, finished ones included), kind then status."""
    rows = Operation.objects.order_by().values("kind", "status").annotate(count=Count("id")).order_by("kind", "status")
    return [QueueCell(kind=row["kind"], status=row["status"], count=row["count"]) for row in rows]


@dataclass(frozen=True)
class MinuteCount:
    minute: datetime.datetime
    series: str
    count: int


def list_attempts_per_minute(*, since: datetime.datetime) -> list[MinuteCount]:
    """Attempts finished since `since`, counted per minute and outcome (series = outcome)."""
    rows = (
        Attempt.objects.filter(finished_at__gte=since)
        .order_by()
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute", "outcome")
        .annotate(count=Count("id"))
        .order_by("minute", "outcome")
    )
    return [MinuteCount(minute=row["minute"], series=row["outcome"], count=row["count"]) for row in rows]


def list_succeeded_per_minute(*, kinds: Sequence[str], since: datetime.datetime) -> list[MinuteCount]:
    """Operations of `kinds` that succeeded since `since`, counted per minute (series = kind)."""
    rows = (
        Operation.objects.filter(kind__in=kinds, status=S.SUCCEEDED, finished_at__gte=since)
        .order_by()
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute", "kind")
        .annotate(count=Count("id"))
        .order_by("minute", "kind")
    )
    return [MinuteCount(minute=row["minute"], series=row["kind"], count=row["count"]) for row in rows]


@dataclass(frozen=True)
class AttemptTally:
    outcome: str
    error_kind: str
    count: int


def list_attempt_totals() -> list[AttemptTally]:
    """Every attempt still kept (retention purges finished operations' attempts), by outcome and
    failure kind; an attempt still in flight has the outcome ""."""
    rows = (
        Attempt.objects.order_by()
        .values("outcome", "error_kind")
        .annotate(count=Count("id"))
        .order_by("outcome", "error_kind")
    )
    return [AttemptTally(outcome=row["outcome"], error_kind=row["error_kind"], count=row["count"]) for row in rows]


@dataclass(frozen=True)
class DurationHistogram:
    """Cumulative counts of durations, as Prometheus reads a histogram: `buckets` pairs each upper bound
    (seconds) with the number of rows that took at most that long; `label` is the group's value (a kind,
    a channel)."""

    label: str
    buckets: list[tuple[float, int]]
    count: int
    sum_seconds: float


def histograms_of(
    attempts: QuerySet[Attempt], *, duration: ExpressionWrapper, by: str, bounds: Sequence[float]
) -> list[DurationHistogram]:
    """`duration` (an expression over each attempt row) bucketed by `bounds` (seconds, ascending), per
    value of the column `by`, in one statement; the histograms of /metrics share it."""
    rows = (
        attempts.order_by()
        .alias(measured=duration)
        .values(by)
        .annotate(
            count=Count("id"),
            total=Sum("measured"),
            **{
                f"le_{index}": Count("id", filter=Q(measured__lte=datetime.timedelta(seconds=bound)))
                for index, bound in enumerate(bounds)
            },
        )
        .order_by(by)
    )
    return [
        DurationHistogram(
            label=row[by],
            buckets=[(bound, row[f"le_{index}"]) for index, bound in enumerate(bounds)],
            count=row["count"],
            sum_seconds=row["total"].total_seconds() if row["total"] is not None else 0.0,
        )
        for row in rows
    ]


def list_queue_time_histograms(*, bounds: Sequence[float]) -> list[DurationHistogram]:
    """How long each kept attempt's operation waited between becoming claimable (due, or its lease
    expired) and the claim that opened the attempt, bucketed by `bounds` (seconds, ascending), per
    kind (the histogram's label); one statement. Both times are the database's, so a worker's clock
    plays no part."""
    queued = ExpressionWrapper(F("started_at") - F("due_at"), output_field=DurationField())
    return histograms_of(
        Attempt.objects.filter(due_at__isnull=False), duration=queued, by="operation__kind", bounds=bounds
    )


def list_dead_letters(*, limit: int) -> QuerySet[Operation]:
    """The newest dead operations first, with the reason the last attempt gave; `needs_an_operator`
    tells those an operator must settle from those left to the editors."""
    return Operation.objects.filter(status=S.DEAD).order_by("-updated_at", "-id")[:limit]


def list_needing_operator(*, limit: int) -> QuerySet[Operation]:
    """The operations that need an operator (NEEDS_OPERATOR: the tile's and the metric's count), newest first."""
    return Operation.objects.needing_operator().order_by("-updated_at", "-id")[:limit]


@dataclass(frozen=True)
class ExpiredLease:
    operation: Operation
    expired_for: datetime.timedelta


def list_expired_leases(*, limit: int) -> list[ExpiredLease]:
    """Running operations whose lease ran out (database clock), longest expired first: the
    reconciler will take them back."""
    rows = (
        Operation.objects.filter(status=S.RUNNING, lease_expires_at__lt=Now())
        .annotate(expired_for=_age("lease_expires_at"))
        .order_by("lease_expires_at", "id")[:limit]
    )
    return [ExpiredLease(operation=row, expired_for=row.expired_for) for row in rows]


def list_open_conflicts(*, limit: int) -> QuerySet[Conflict]:
    """Unresolved conflicts, newest first, with their operation."""
    return (
        Conflict.objects.filter(resolved_at__isnull=True)
        .select_related("operation")
        .order_by("-created_at", "-id")[:limit]
    )


@dataclass(frozen=True)
class ChannelGateState:
    """A channel's gate for operators: its rate (None: no limit), the sends it held back and the pauses
    it took (counted since the gate was made), and how much of a pause is left (0 when not paused)."""

    channel: str
    rate_per_second: int | None
    waits: int
    pauses: int
    paused_for: datetime.timedelta
    pause_reason: str


def list_channel_gates() -> list[ChannelGateState]:
    """Every channel's gate, by channel; the pause left is judged on the database clock, as the claim does."""
    gates = ChannelGate.objects.annotate(database_now=Now()).order_by("channel")
    return [
        ChannelGateState(
            channel=gate.channel,
            rate_per_second=gate.rate_per_second,
            waits=gate.waits,
            pauses=gate.pauses,
            paused_for=max(datetime.timedelta(0), gate.paused_until - gate.database_now)
            if gate.paused_until is not None
            else datetime.timedelta(0),
            pause_reason=gate.pause_reason if gate.paused_until and gate.paused_until > gate.database_now else "",
        )
        for gate in gates
    ]
