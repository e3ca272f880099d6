"""Schedules that missed their time (docs/operations.md#overdue-schedules, docs/invariants.md#i15): the one
rule of "overdue" (`overdue_schedules`), and what operators, the brief page and /metrics read from it.

A schedule is an operation written for a time T (Operation.scheduled_for): the publish an approval wrote,
or the retraction an approver asked for at T (docs/retractions.md). It is overdue when
GALLEY_SCHEDULE_LATENESS_SECONDS have passed since T by the database clock and it has not done what it
was for on its channel, and it did not end on purpose (superseded or cancelled):

- a publish: not published and verified there — neither this revision nor a newer one (a newer
  verified revision ends the older's wait: docs/invariants.md#i4) — and its verification not ended
  on purpose either;
- a retraction: the publication it takes down not observed retracted there (read-back retracted,
  permalink gone: Publication.retracted_at, docs/invariants.md#i16).

Every reader (the alert sweep, /ops, the receipts, the dashboard filter, the gauge) composes this
queryset; none spells the rule again.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from django.conf import settings
from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import Now

from publishing.identities import PUBLISH, RETRACT, VERIFY
from publishing.models import Publication
from workers.models import Attempt, ChannelGate, Operation, OperationStatus
from workers.selectors import DurationHistogram, histograms_of

S = OperationStatus
ENDED_ON_PURPOSE = (S.SUPERSEDED, S.CANCELLED)
# The operations a person schedules for a time T: a publication (docs/schedules.md), a retraction (docs/retractions.md).
SCHEDULED_KINDS = (PUBLISH, RETRACT)


def overdue_schedules() -> QuerySet[Operation]:
    """THE rule: the scheduled publish and retract operations that are overdue now (database clock),
    annotated with `overdue_by` (now - T) and the `database_now` it was judged at. Starts from the
    scheduled operations whose T + lateness has passed; a publish costs an index probe of its brief's
    verified publications on its channel and one of its verification, a retraction one probe of the
    brief's retracted publications there."""
    lateness = datetime.timedelta(seconds=settings.GALLEY_SCHEDULE_LATENESS_SECONDS)
    cutoff = ExpressionWrapper(Now() - Value(lateness, output_field=DurationField()), output_field=DateTimeField())
    on_its_channel = Publication.objects.filter(
        brief__public_id=OuterRef("subject_id"), channel__slug=OuterRef("channel")
    )
    verified_there = on_its_channel.filter(revision__number__gte=OuterRef("subject_version"), verified_at__isnull=False)
    retracted_there = on_its_channel.filter(revision__number=OuterRef("subject_version"), retracted_at__isnull=False)
    verification_ended = Operation.objects.filter(
        kind=VERIFY,
        subject_type="brief",
        subject_id=OuterRef("subject_id"),
        subject_version=OuterRef("subject_version"),
        channel=OuterRef("channel"),
        status__in=ENDED_ON_PURPOSE,
    )
    publish_waits = Q(kind=PUBLISH) & ~Q(Exists(verified_there)) & ~Q(Exists(verification_ended))
    retraction_waits = Q(kind=RETRACT) & ~Q(Exists(retracted_there))
    return (
        Operation.objects.filter(kind__in=SCHEDULED_KINDS, subject_type="brief", scheduled_for__isnull=False)
        .filter(scheduled_for__lte=cutoff)
        .exclude(status__in=ENDED_ON_PURPOSE)
        .filter(publish_waits | retraction_waits)
        .annotate(
            database_now=Now(),
            overdue_by=ExpressionWrapper(Now() - F("scheduled_for"), output_field=DurationField()),
        )
    )


def count_overdue_schedules() -> int:
    """How many schedules are overdue now (the /metrics gauge and the ops page's tile)."""
    return overdue_schedules().count()


@dataclass(frozen=True)
class OverdueSchedule:
    """One overdue schedule as operators read it: where it should be, since when, and why it waits."""

    operation: Operation  # the publish or retract operation
    brief_id: str  # the brief's public id
    revision: int
    channel: str
    scheduled_for: datetime.datetime
    overdue_by: datetime.timedelta
    why: str  # in plain words: the channel's pause, the last error, or what is under way
    until: datetime.datetime | None = None  # when the wait it is in ends (a pause, the next try), if known


def _clock(moment: datetime.datetime) -> str:
    return f"{moment.astimezone(datetime.UTC):%H:%M:%S} UTC"


def _why(
    publish: Operation, verify: Operation | None, gate: ChannelGate | None, now: datetime.datetime
) -> tuple[str, datetime.datetime | None]:
    """Why a schedule still waits, most telling first: its channel paused (a 429/503's Retry-After holds
    every worker off it), a stop for an operator, the last error before the next try, or what is under way."""
    if gate is not None and gate.paused_until is not None and gate.paused_until > now:
        reason = gate.pause_reason or "paused"
        return f"{publish.channel} waiting: {reason} until {_clock(gate.paused_until)}", gate.paused_until
    current = verify if publish.status == S.SUCCEEDED and verify is not None else publish
    step = "the read-back" if current is verify else ("the retraction" if publish.kind == RETRACT else "the publish")
    if current.status in (S.DEAD, S.CONFLICT):
        return f"{step} needs an operator ({current.status}): {current.last_error_message or current.status}", None
    if current.status == S.RETRY_WAIT:
        error = current.last_error_message or current.last_error_kind or "it failed"
        return f"{step} failed: {error}; next try at {_clock(current.next_attempt_at)}", current.next_attempt_at
    if current.status == S.RUNNING:
        return f"{step} is being attempted now (attempt {current.attempts})", None
    if current.next_attempt_at > now:
        return f"{step} is due at {_clock(current.next_attempt_at)}", current.next_attempt_at
    return f"{step} is due and no worker has claimed it (are the workers running?)", None


def describe_overdue(operations: Sequence[Operation]) -> list[OverdueSchedule]:
    """`operations` (rows of overdue_schedules, with `overdue_by`) with why each waits: two more
    queries (their verifications; their channels' gates) for any number."""
    if not operations:
        return []
    verifies: dict[tuple[str, int | None, str], Operation] = {}
    verify_rows = Operation.objects.filter(
        kind=VERIFY,
        subject_type="brief",
        subject_id__in={op.subject_id for op in operations},
        channel__in={op.channel for op in operations},
    ).order_by("id")
    for verify in verify_rows:
        verifies[(verify.subject_id, verify.subject_version, verify.channel)] = verify
    gates = {gate.channel: gate for gate in ChannelGate.objects.filter(channel__in={op.channel for op in operations})}
    schedules = []
    for publish in operations:
        # A retraction's own handler reads back: the revision's verification belongs to its publish.
        verify = None
        if publish.kind == PUBLISH:
            verify = verifies.get((publish.subject_id, publish.subject_version, publish.channel))
        # Annotations of the rule's queryset.
        now, overdue_by = getattr(publish, "database_now"), getattr(publish, "overdue_by")  # noqa: B009
        why, until = _why(publish, verify, gates.get(publish.channel), now)
        schedules.append(
            OverdueSchedule(
                operation=publish,
                brief_id=publish.subject_id,
                revision=publish.subject_version or 0,
                channel=publish.channel,
                scheduled_for=cast(datetime.datetime, publish.scheduled_for),  # never None: the rule's filter
                overdue_by=overdue_by,
                why=why,
                until=until,
            )
        )
    return schedules


def list_overdue_schedules(*, limit: int) -> list[OverdueSchedule]:
    """The overdue schedules, longest overdue first, at most `limit`, each with why it waits."""
    return describe_overdue(list(overdue_schedules().order_by("scheduled_for", "id")[:limit]))


def get_overdue_by_key(keys: Iterable[str]) -> dict[str, OverdueSchedule]:
    """Which of these publish or retract operations (by key) are overdue, with why: the brief page's receipts."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    return {s.operation.key: s for s in describe_overdue(list(overdue_schedules().filter(key__in=wanted)))}


@dataclass(frozen=True)
class UpcomingSchedules:
    """A channel's schedules still to fire (their publish not claimed yet) and the next one's time."""

    channel: str
    count: int
    next_at: datetime.datetime
    within_hour: int


def list_upcoming_schedules() -> list[UpcomingSchedules]:
    """Per channel, the scheduled publishes and retractions not yet due (T still ahead by the database clock): one
    statement on the partial index of unfinished schedules (operation_scheduled_idx)."""
    hour = ExpressionWrapper(
        Now() + Value(datetime.timedelta(hours=1), output_field=DurationField()), output_field=DateTimeField()
    )
    rows = (
        Operation.objects.filter(
            kind__in=SCHEDULED_KINDS, status=S.PENDING, scheduled_for__isnull=False, scheduled_for__gt=Now()
        )
        .order_by()
        .values("channel")
        .annotate(
            count=Count("id"), next_at=Min("scheduled_for"), within_hour=Count("id", filter=Q(scheduled_for__lte=hour))
        )
        .order_by("channel")
    )
    return [UpcomingSchedules(row["channel"], row["count"], row["next_at"], row["within_hour"]) for row in rows]


def unfired_schedules() -> QuerySet[Operation]:
    """Scheduled publishes and retractions no worker has claimed yet (pending: a claim moves them to running): the
    dashboard's "scheduled" filter. An unfired schedule past its T is still unfired, and may be overdue."""
    return Operation.objects.filter(
        kind__in=SCHEDULED_KINDS, subject_type="brief", scheduled_for__isnull=False, status=S.PENDING
    )


def list_schedule_lateness_histograms(*, bounds: Sequence[float]) -> list[DurationHistogram]:
    """Per channel (the histogram's label), each kept scheduled publish's lateness: its first attempt's
    start minus T, both on the database clock. Attempt number 1 is one row per operation
    (attempt_number_unique), so an operation counts once however often it is retried or reclaimed.
    One statement."""
    late = ExpressionWrapper(F("started_at") - F("operation__scheduled_for"), output_field=DurationField())
    first_attempts = Attempt.objects.filter(number=1, operation__kind=PUBLISH, operation__scheduled_for__isnull=False)
    return histograms_of(first_attempts, duration=late, by="operation__channel", bounds=bounds)
