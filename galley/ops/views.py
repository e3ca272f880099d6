"""The operators' page, /ops/: the queue at a glance, what needs a hand, and the last hour in charts.

Operators only (the role that works the admin). Every figure comes from the selectors of
workers (operations, attempts, conflicts) and publishing (approval → published latency), each
one aggregate statement, so the page costs the same number of queries for ten briefs or a
million. The charts are SVG drawn on the server by galley.ops.charts: no script, nothing from another site.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from galley.ops.charts import build_chart, series_total
from publishing.identities import PUBLICATION_KINDS, PUBLISH, VERIFY
from publishing.live import Partial, live_partial
from publishing.roles import Role, require_role
from publishing.selectors.briefs import list_headlines
from publishing.selectors.metrics import ChannelFigures, list_channel_figures, list_publish_latency_per_minute
from publishing.selectors.overdue import (
    OverdueSchedule,
    count_overdue_schedules,
    list_overdue_schedules,
    list_upcoming_schedules,
)
from workers.models import Attempt, Operation, OperationStatus
from workers.selectors import (
    ChannelGateState,
    MinuteCount,
    QueueHealth,
    QueueSummary,
    get_queue_health,
    get_queue_summary,
    list_attempts_per_minute,
    list_channel_gates,
    list_dead_letters,
    list_expired_leases,
    list_needing_operator,
    list_open_conflicts,
    list_queue_depth,
    list_succeeded_per_minute,
)

WINDOW_MINUTES = 60
LISTED = 20  # rows of each list (dead letters, expired leases, conflicts); the admin has the rest
# The throughput chart's series: a publication's two steps (drift checks and republishes are rare).
THROUGHPUT_KINDS = (PUBLISH, VERIFY)

# An attempt's outcome drawn in the colour of what it means (classes in galley.css): success green,
# a retry still on its way amber, an end that needs a look red, an intent that went away grey.
OUTCOME_COLOURS = {
    Attempt.Outcome.SUCCEEDED: "chart-ok",
    Attempt.Outcome.RETRY: "chart-warn",
    Attempt.Outcome.DEAD: "chart-bad",
    Attempt.Outcome.CONFLICT: "chart-conflict",
    Attempt.Outcome.SUPERSEDED: "chart-neutral",
    Attempt.Outcome.LEASE_LOST: "chart-lost",
    "": "chart-info",  # still in flight
}


def duration(delta: datetime.timedelta | None) -> str:
    """A short human duration: "45 s", "3 min 20 s", "2 h 5 min"; "—" for none."""
    if delta is None:
        return "—"
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _per_minute(
    rows: Iterable[MinuteCount], minutes: Sequence[datetime.datetime], *, series: Iterable[str] = ()
) -> dict[str, list[float | None]]:
    """Aggregated rows as one zero-filled list of counts per series, one entry per minute; each of
    `series` is there even with nothing in the window."""
    index = {minute: position for position, minute in enumerate(minutes)}
    table: dict[str, list[float | None]] = {name: [0.0] * len(minutes) for name in series}
    for row in rows:
        if row.minute in index:
            table.setdefault(row.series, [0.0] * len(minutes))[index[row.minute]] = float(row.count)
    return table


@dataclass(frozen=True)
class ProblemRow:
    operation: Operation
    admin_url: str
    age: str = ""
    headline: str = ""  # the current headline of the brief it concerns, if it concerns one


def _admin_url(operation: Operation) -> str:
    # Every kind of a brief's publication is settled on the admin's "Publication problems" pages.
    if operation.kind in PUBLICATION_KINDS:
        return reverse("admin:publishing_publicationproblem_change", args=[operation.id])
    return reverse("admin:workers_operation_change", args=[operation.id])


def _problem_lists() -> dict[str, object]:
    """The lists of operations an operator looks at, each naming the brief it concerns by its current
    headline (one more query, for all of them, when any concerns a brief)."""
    needing = list_needing_operator(limit=LISTED)
    dead = list_dead_letters(limit=LISTED)
    leases = list_expired_leases(limit=LISTED)
    conflicts = list_open_conflicts(limit=LISTED)
    operations = [*needing, *dead, *(lease.operation for lease in leases), *(c.operation for c in conflicts)]
    headlines = list_headlines(op.subject_id for op in operations if op.subject_type == "brief")

    def row(operation: Operation, age: str = "") -> ProblemRow:
        headline = headlines.get(operation.subject_id, "") if operation.subject_type == "brief" else ""
        return ProblemRow(operation, _admin_url(operation), age, headline)

    return {
        "needing_operator": [row(op) for op in needing],
        "dead_letters": [row(op) for op in dead],
        "expired_leases": [row(lease.operation, duration(lease.expired_for)) for lease in leases],
        "conflicts": [(conflict, row(conflict.operation).headline) for conflict in conflicts],
    }


@dataclass(frozen=True)
class OverdueRow:
    schedule: OverdueSchedule
    admin_url: str
    overdue_by: str
    headline: str


def _schedule_context() -> dict[str, object]:
    """The overdue schedules (publishing.selectors.overdue: the rule the alert and /metrics use), longest
    overdue first, and the schedules still to fire per channel. Two statements when none is overdue; the
    total is counted only when the list is cut at LISTED."""
    overdue = list_overdue_schedules(limit=LISTED)
    headlines = list_headlines(schedule.brief_id for schedule in overdue)
    rows = [
        OverdueRow(s, _admin_url(s.operation), duration(s.overdue_by), headlines.get(s.brief_id, "")) for s in overdue
    ]
    return {
        "overdue_schedules": rows,
        "overdue_total": len(rows) if len(rows) < LISTED else count_overdue_schedules(),
        "upcoming_schedules": list_upcoming_schedules(),
        "lateness_seconds": settings.GALLEY_SCHEDULE_LATENESS_SECONDS,
    }


def _health_context(health: QueueHealth) -> dict[str, object]:
    """The queue's health and whether each figure is past its warning threshold (docs/operations.md#queue-health)."""
    return {
        "health": health,
        "long_transaction": health.oldest_transaction_seconds > settings.GALLEY_LONG_TRANSACTION_WARN_SECONDS,
        "oldest_transaction": duration(datetime.timedelta(seconds=health.oldest_transaction_seconds)),
        "long_transaction_limit": duration(datetime.timedelta(seconds=settings.GALLEY_LONG_TRANSACTION_WARN_SECONDS)),
        "many_dead_tuples": health.dead_tuples > settings.GALLEY_DEAD_TUPLES_WARN,
        "dead_tuples_limit": settings.GALLEY_DEAD_TUPLES_WARN,
        "operation_table": Operation._meta.db_table,
    }


def _channel_rows() -> list[tuple[ChannelFigures, str, ChannelGateState | None]]:
    """Each channel's figures, its oldest queued operation's age, and its gate (rate limit, pauses), if any."""
    gates = {gate.channel: gate for gate in list_channel_gates()}
    now = timezone.now()
    return [
        (channel, duration(channel.oldest_queued_age(now)), gates.get(channel.channel))
        for channel in list_channel_figures()
    ]


@require_GET
@never_cache
def ops(request: HttpRequest) -> HttpResponse:
    require_role(request.user, Role.OPERATOR, to="see the operations page")
    now = timezone.now().replace(second=0, microsecond=0)
    minutes = [now - datetime.timedelta(minutes=WINDOW_MINUTES - 1 - offset) for offset in range(WINDOW_MINUTES)]
    since = minutes[0]

    summary = get_queue_summary()
    cells = list_queue_depth()
    statuses = [status for status in OperationStatus if any(cell.status == status for cell in cells)]
    depth: dict[str, dict[str, int]] = defaultdict(dict)
    for cell in cells:
        depth[cell.kind][cell.status] = cell.count
    queue_rows = [(kind, [counts.get(status, 0) for status in statuses]) for kind, counts in sorted(depth.items())]

    attempts = _per_minute(list_attempts_per_minute(since=since), minutes)
    outcome_labels = dict(Attempt.Outcome.choices)
    outcomes = sorted(attempts)
    attempt_series = [
        (outcome_labels.get(outcome, outcome), attempts[outcome], series_total(attempts[outcome]))
        for outcome in outcomes
    ]
    throughput = _per_minute(
        list_succeeded_per_minute(kinds=THROUGHPUT_KINDS, since=since), minutes, series=THROUGHPUT_KINDS
    )
    latency_rows = {row.minute: row for row in list_publish_latency_per_minute(since=since)}
    latency = [latency_rows.get(minute) for minute in minutes]
    published = sum(row.publications for row in latency_rows.values())

    charts = [
        build_chart(
            ident="chart-throughput",
            title="Publish throughput",
            unit="operations succeeded per minute",
            minutes=minutes,
            series=[(kind, throughput[kind], series_total(throughput[kind])) for kind in THROUGHPUT_KINDS],
            describe="{minute}: {value} {series} succeeded",
        ),
        build_chart(
            ident="chart-latency",
            title="Approval → published latency",
            unit="seconds, per minute of publication",
            minutes=minutes,
            series=[
                (
                    "mean",
                    [row.mean.total_seconds() if row else None for row in latency],
                    f"{published} published",
                ),
                ("longest", [row.longest.total_seconds() if row else None for row in latency], ""),
            ],
            describe="{minute}: {series} {value} s",
        ),
        build_chart(
            ident="chart-attempts",
            title="Attempts per minute by outcome",
            unit="attempts finished per minute",
            minutes=minutes,
            series=attempt_series,
            describe="{minute}: {value} {series}",
            colours=[OUTCOME_COLOURS.get(outcome, "chart-neutral") for outcome in outcomes],
        ),
    ]
    context = {
        **_status_context(summary, get_queue_health(), now),
        "statuses": [(status.value, status.label) for status in statuses],
        "queue_rows": queue_rows,
        "attempt_totals": [(label, total) for label, _, total in attempt_series],
        "charts": charts,
        **_problem_lists(),
        **_schedule_context(),
        "channel_rows": _channel_rows(),
        "window_minutes": WINDOW_MINUTES,
    }
    return render(request, "ops/ops.html", context)


def _status_context(summary: QueueSummary, health: QueueHealth, now: datetime.datetime) -> dict[str, object]:
    return {
        "summary": summary,
        "oldest_due_age": duration(summary.oldest_due_age),
        "now": now,
        **_health_context(health),
    }


@live_partial("ops")
def ops_live(request: HttpRequest) -> Partial:
    """The "Now" tiles and the queue-health warnings, polled by the page. Always live: an operator watches
    for work that has not arrived yet, so an empty queue is no reason to stop."""
    require_role(request.user, Role.OPERATOR, to="see the operations page")
    now = timezone.now().replace(second=0, microsecond=0)
    return Partial("ops/_status.html", _status_context(get_queue_summary(), get_queue_health(), now), live=True)
