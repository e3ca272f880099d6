"""Figures for the ops page and /metrics: approval → published latency, AI tokens used, each
channel's queue and trouble. Reads the
approvals (a revision's first approval): publishing.actions never imports this module."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Max, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce, TruncMinute
from psycopg.rows import dict_row

from approvals.models import Approval
from publishing.identities import PUBLISH, SUMMARY_STEP
from publishing.models import Channel, Publication
from publishing.sql import AI_TOKENS_SQL
from workers.models import WAITING_STATUSES, Operation, OperationStatus
from workers.prepared import execute_prepared

# --- approval → published latency (the ops page and /metrics) -----------------------------------


def _approval_to_published() -> ExpressionWrapper:
    """From the revision's first approval (the one that wrote the publish intent) to the read-back
    that showed it published (`verified_at`, docs/invariants.md#i10)."""
    first_approval = (
        Approval.objects.filter(revision=OuterRef("revision"), decision=Approval.Decision.APPROVED)
        .order_by("created_at", "id")
        .values("created_at")[:1]
    )
    return ExpressionWrapper(F("verified_at") - Subquery(first_approval), output_field=DurationField())


@dataclass(frozen=True)
class LatencyMinute:
    minute: datetime.datetime
    publications: int
    mean: datetime.timedelta
    longest: datetime.timedelta


def list_publish_latency_per_minute(*, since: datetime.datetime) -> list[LatencyMinute]:
    """Publications verified since `since`, per minute of verification: how many, and their mean
    and longest approval → published latency. One statement."""
    rows = (
        Publication.objects.filter(verified_at__gte=since)
        .order_by()
        .alias(latency=_approval_to_published())
        .annotate(minute=TruncMinute("verified_at"))
        .values("minute")
        .annotate(publications=Count("id"), mean=Avg("latency"), longest=Max("latency"))
        .order_by("minute")
    )
    return [LatencyMinute(**row) for row in rows]


@dataclass(frozen=True)
class LatencyHistogram:
    """Cumulative counts, as Prometheus reads a histogram: `buckets` pairs each upper bound (seconds)
    with the number of publications at most that slow."""

    buckets: list[tuple[float, int]]
    count: int
    sum_seconds: float


def get_publish_latency_histogram(*, bounds: Sequence[float]) -> LatencyHistogram:
    """Every verified publication's approval → published latency, bucketed by `bounds` (seconds,
    ascending) in one statement."""
    measured = Q(latency__isnull=False)
    figures = (
        Publication.objects.filter(verified_at__isnull=False)
        .annotate(latency=_approval_to_published())
        .aggregate(
            count=Count("id", filter=measured),
            total=Sum("latency", filter=measured),
            **{
                f"le_{index}": Count("id", filter=Q(latency__lte=datetime.timedelta(seconds=bound)))
                for index, bound in enumerate(bounds)
            },
        )
    )
    total = figures["total"] or datetime.timedelta()
    return LatencyHistogram(
        buckets=[(bound, figures[f"le_{index}"]) for index, bound in enumerate(bounds)],
        count=figures["count"],
        sum_seconds=total.total_seconds(),
    )


@dataclass(frozen=True)
class TokenTotal:
    step: str
    model: str  # "" when the step stored no artifact (its attempts failed)
    kind: str  # "prompt", "completion": the usage counter's name without "_tokens"
    tokens: int


def list_ai_token_totals() -> list[TokenTotal]:
    """AI tokens used, summed over the attempts kept (retention purges finished operations' attempts)."""
    with execute_prepared(AI_TOKENS_SQL, {"kind": SUMMARY_STEP}, row_factory=dict_row) as cursor:
        return [TokenTotal(r["step"], r["model"], r["kind"], int(r["tokens"])) for r in cursor.fetchall()]


# --- per channel (the ops page and /metrics) ------------------------------------------------------


@dataclass(frozen=True)
class ChannelFigures:
    channel: str  # the slug
    name: str
    queued: int  # pending or waiting to retry
    oldest_queued_at: datetime.datetime | None  # when the oldest of those was written
    sends: int  # publish attempts (waits included), on operations kept
    waits: int  # tries the channel answered "wait" (throttled, in progress), every kind
    dead: int  # dead letters
    conflicts: int  # operations stopped on a conflict

    def oldest_queued_age(self, now: datetime.datetime) -> datetime.timedelta | None:
        return now - self.oldest_queued_at if self.oldest_queued_at is not None else None


def list_channel_figures() -> list[ChannelFigures]:
    """Each channel's figures, over the operations kept (finished ones until purged), in one
    statement grouped by channel (the scan list_queue_depth makes too), by slug. A channel no
    operation names yet is not listed."""
    waiting = Q(status__in=WAITING_STATUSES)
    name = Channel.objects.filter(slug=OuterRef("channel")).values("name")[:1]
    rows = (
        Operation.objects.exclude(channel="")
        .order_by()
        .values("channel")
        .annotate(
            name=Coalesce(Subquery(name), F("channel")),
            queued=Count("id", filter=waiting),
            oldest_queued_at=Min("created_at", filter=waiting),
            sends=Coalesce(Sum("attempts", filter=Q(kind=PUBLISH)), 0),
            waits=Coalesce(Sum("waits"), 0),
            dead=Count("id", filter=Q(status=OperationStatus.DEAD)),
            conflicts=Count("id", filter=Q(status=OperationStatus.CONFLICT)),
        )
        .order_by("channel")
    )
    return [ChannelFigures(**row) for row in rows]
