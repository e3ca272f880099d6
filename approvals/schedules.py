"""Schedules and embargoes (docs/schedules.md): the time T an approval publishes its revision at, how an
approver's "at" is read (date, time, IANA zone), and moving or cancelling T while nothing has fired.

T lives on the publish operations (workers.Operation.scheduled_for), which the claim compares with the
database clock (docs/invariants.md#i15); PublicationSchedule keeps what the approver asked for and the zone
it is shown in. A reschedule or a cancel moves every channel's operation or none: it locks the brief, then
the revision's publish operations, and changes them with one guarded UPDATE that only an unclaimed
operation (pending, no attempt) matches; once a worker has claimed any channel's, it is refused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import DateTimeField, Value
from django.db.models.functions import Greatest, Now

from approvals.errors import DecisionAlreadyMade, ScheduleFired, SelfApproval
from approvals.models import ApprovalCompletion, PublicationSchedule
from publishing.actions.revisions import do_change_brief_status
from publishing.errors import InvalidInput
from publishing.identities import PUBLISH, revision_subject_id
from publishing.models import Brief, Revision
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.revisions import get_revision
from publishing.validation import clean_number, clean_text
from workers.audit import record_audit_event
from workers.models import Attempt, Operation, OperationStatus

# Longest text accepted for a time or a zone: anything longer is no time and no zone.
_MAX_FIELD_CHARS = 64
CANCEL_REASON_MAX_CHARS = 2000
EXAMPLE = "e.g. 2027-03-28T10:00 with a zone, or 2027-03-28T10:00+02:00"


@dataclass(frozen=True)
class ScheduleRequest:
    """A checked "publish at": T in UTC, the zone it was given in, and whether T had already passed when it
    was checked (it then publishes at once, T kept so that its lateness shows)."""

    at: datetime
    zone: str
    passed: bool

    def local(self) -> datetime:
        return self.at.astimezone(ZoneInfo(self.zone))


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones())


def clean_zone(zone: Any) -> str:
    """An IANA zone name, or InvalidInput; empty means the site's zone (settings.TIME_ZONE)."""
    if zone in (None, ""):
        return str(settings.TIME_ZONE)
    if not isinstance(zone, str) or len(zone) > _MAX_FIELD_CHARS or zone not in _zones():
        shown = str(zone)[:_MAX_FIELD_CHARS]
        raise InvalidInput(f"“{shown}” is not a time zone Galley knows: choose one such as Europe/Amsterdam or UTC.")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):  # listed, yet its data file is missing
        raise InvalidInput(f"The time zone {zone} has no data on this server; choose another.") from None
    return zone


def _aware(value: str, zone: str) -> datetime:
    """`value` (ISO 8601) as an aware datetime: its own offset, else read as a wall-clock time in `zone`.

    A wall-clock time the zone skips (a spring-forward gap) or shows twice (an autumn fold) is refused: an
    embargo must not move by an hour on a guess. An explicit offset says which of the two is meant."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"The publish time “{value}” is not a date and time ({EXAMPLE}).") from None
    if parsed.tzinfo is not None:
        return parsed
    tz = ZoneInfo(zone)
    first, second = parsed.replace(tzinfo=tz, fold=0), parsed.replace(tzinfo=tz, fold=1)
    wall = f"{parsed:%Y-%m-%d %H:%M}"
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != parsed:
        raise InvalidInput(
            f"{wall} does not exist in {zone}: the clocks skip it (a change to summer time). Choose a time "
            "outside the skipped hour."
        )
    if first.utcoffset() != second.utcoffset():
        raise InvalidInput(
            f"{wall} happens twice in {zone} (the clocks go back): at {first:%z} and at {second:%z}. Choose "
            "another time, or give the offset (e.g. through the API, " + f"{parsed:%Y-%m-%dT%H:%M}{first:%z})."
        )
    return first


def database_now() -> datetime:
    """PostgreSQL's clock, which the claim compares T with (docs/invariants.md#i15)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def clean_schedule(publish_at: Any, zone: Any) -> ScheduleRequest | None:
    """The approver's "publish at" checked against the database clock, or None for "publish now".

    Refused with InvalidInput: an unknown zone, a malformed time, a wall-clock time the zone skips or shows
    twice, a time more than GALLEY_SCHEDULE_PAST_GRACE_SECONDS ago (likely a slip of the date) or more than
    GALLEY_SCHEDULE_MAX_DAYS ahead. A time in the past within the grace publishes now (`passed`)."""
    if publish_at in (None, ""):
        return None
    if not isinstance(publish_at, str) or len(publish_at) > _MAX_FIELD_CHARS:
        raise InvalidInput(f"The publish time is not a date and time ({EXAMPLE}).")
    zone = clean_zone(zone)
    at = _aware(publish_at.strip(), zone).astimezone(UTC)
    now = database_now()
    shown = at.astimezone(ZoneInfo(zone))
    if at < now - timedelta(seconds=settings.GALLEY_SCHEDULE_PAST_GRACE_SECONDS):
        raise InvalidInput(f"{shown:%Y-%m-%d %H:%M} {zone} has passed. Choose a later time, or publish now.")
    if at > now + timedelta(days=settings.GALLEY_SCHEDULE_MAX_DAYS):
        raise InvalidInput(
            f"{shown:%Y-%m-%d %H:%M} {zone} is more than {settings.GALLEY_SCHEDULE_MAX_DAYS} days ahead; "
            "choose an earlier time."
        )
    return ScheduleRequest(at=at, zone=zone, passed=at <= now)


def schedule_state(request: ScheduleRequest) -> dict[str, Any]:
    """The audit record's words for a schedule."""
    return {"publish_at": request.at.isoformat(), "zone": request.zone, "due_now": request.passed}


# --- Reschedule and cancel ------------------------------------------------------------------------------


def _when(moment: datetime, zone: str) -> str:
    return f"{moment.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M:%S %Z}"


def _locked_publishes(revision: Revision) -> list[Operation]:
    """The revision's publish operations, one per channel, locked in id order after the brief
    (docs/architecture.md#lock-order)."""
    return list(
        Operation.objects.select_for_update(of=("self",))
        .for_subject("brief", revision.brief.public_id)
        .filter(kind=PUBLISH, subject_version=revision.number)
        .order_by("id")
    )


# Ended without being sent (superseded by a newer revision's approval, cancelled by an operator, past its deadline
# unclaimed): nothing to move on that channel, and nothing fired there.
ENDED_UNSENT = (OperationStatus.SUPERSEDED, OperationStatus.CANCELLED, OperationStatus.DEAD)


def unclaimed_publishes(
    revision: Revision, schedule: PublicationSchedule, operations: list[Operation]
) -> list[Operation]:
    """The publishes a change moves: every channel's that is still unclaimed (pending, no attempt). Raises
    unless there is one and no channel's has fired: a change moves all of them or none."""
    what = f"Revision {revision.number}'s schedule"
    if schedule.cancelled_at is not None:
        raise DecisionAlreadyMade(f"{what} was cancelled; approve a new revision to publish it.")
    fired = [op for op in operations if op.attempts > 0 or op.status not in (OperationStatus.PENDING, *ENDED_UNSENT)]
    if fired:
        first = (
            Attempt.objects.filter(operation__in=fired, number=1)
            .order_by("started_at")
            .values_list("operation__channel", "started_at")
            .first()
        )
        where = f"{first[0]} at {_when(first[1], schedule.zone)}" if first else fired[0].channel
        raise ScheduleFired(f"{what} already fired on {where}: it can no longer be moved or cancelled on any channel.")
    waiting = [op for op in operations if op.status == OperationStatus.PENDING]
    if not waiting:
        ended = operations[0].last_error_message if operations else "it has no publish left"
        raise DecisionAlreadyMade(f"{what} no longer applies: no channel is waiting for it ({ended}).")
    return waiting


def _schedule_for(revision: Revision) -> PublicationSchedule:
    schedule = PublicationSchedule.objects.filter(completion__revision=revision).first()
    if schedule is None:
        completed = ApprovalCompletion.objects.filter(revision=revision).exists()
        raise InvalidInput(
            f"Revision {revision.number} "
            + ("was approved to publish now: it has no schedule to change." if completed else "is not approved yet.")
        )
    return schedule


def _locked_schedule(
    public_id: str, revision_number: Any, *, acting_user: User
) -> tuple[Revision, PublicationSchedule]:
    number = clean_number(
        revision_number, minimum=1, message="The revision number is missing or not a number; reload the page."
    )
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    revision = get_revision(brief, number)
    schedule = _schedule_for(revision)
    return revision, PublicationSchedule.objects.select_for_update(of=("self",)).get(pk=schedule.pk)


def check_reschedule_publication(
    public_id: str, *, revision_number: Any, publish_at: Any, zone: Any, acting_user: AnyUser
) -> tuple[PublicationSchedule, bool]:
    """Move scheduled revision `revision_number` to a new time T on every channel of its approval, audited.

    Approvers only, never the revision's author (who may not send it: moving an embargo earlier is sending
    it). Locks the brief, the schedule, then the publish operations in id order; refused (ScheduleFired)
    when a worker already claimed any channel's, so a publish never happens at both times nor at neither.
    Returns the schedule and whether it changed (the same T and zone again writes nothing).
    Raises InvalidInput, NotFound, PermissionRefused, SelfApproval, DecisionAlreadyMade, ScheduleFired."""
    acting_user = require_role(acting_user, Role.APPROVER, to="reschedule a publication")
    request = clean_schedule(publish_at, zone)
    if request is None:
        raise InvalidInput(f"Choose the new publish time ({EXAMPLE}).")
    revision, schedule = _locked_schedule(public_id, revision_number, acting_user=acting_user)
    if revision.author_id == acting_user.pk:
        raise SelfApproval(f"You wrote revision {revision.number}, so you cannot reschedule it; another approver must.")
    operations = unclaimed_publishes(revision, schedule, _locked_publishes(revision))
    if (schedule.publish_at, schedule.zone) == (request.at, request.zone):
        return schedule, False
    return do_reschedule_publication(
        revision, schedule=schedule, operations=operations, request=request, acting_user=acting_user
    ), True


def _moved(count: int, operations: list[Operation]) -> None:
    # The rows are locked and were checked under the lock: a shortfall is a broken invariant, never a race.
    if count != len(operations):
        raise RuntimeError(f"moved {count} of {len(operations)} locked unclaimed publish operations")


@transaction.atomic(savepoint=False)
def do_reschedule_publication(
    revision: Revision,
    *,
    schedule: PublicationSchedule,
    operations: list[Operation],
    request: ScheduleRequest,
    acting_user: User,
) -> PublicationSchedule:
    """Caller holds the brief's, the schedule's and the operations' locks; `operations` are the unclaimed ones.

    One guarded UPDATE (status pending, no attempt) moves T, the due time and the deadline (which runs from T)
    of every channel's publish, on the database clock."""
    at = Value(request.at, output_field=DateTimeField())
    moved = Operation.objects.filter(
        id__in=[op.id for op in operations], status=OperationStatus.PENDING, attempts=0
    ).update(
        scheduled_for=at,
        next_attempt_at=Greatest(at, Now()),
        deadline=Greatest(at, Now()) + Value(timedelta(seconds=settings.GALLEY_OPERATION_DEADLINE_SECONDS)),
        updated_at=Now(),
    )
    _moved(moved, operations)
    old = {"publish_at": schedule.publish_at.isoformat(), "zone": schedule.zone}
    schedule.publish_at, schedule.zone = request.at, request.zone
    schedule.updated_at = database_now()
    schedule.save(update_fields=["publish_at", "zone", "updated_at"])
    record_audit_event(
        acting_user=acting_user,
        event_type="revision.rescheduled",
        subject_type="revision",
        subject_id=revision_subject_id(revision.brief.public_id, revision.number),
        old_state=old,
        new_state={**schedule_state(request), "channels": sorted(op.channel for op in operations)},
    )
    return schedule


def check_cancel_schedule(
    public_id: str, *, revision_number: Any, reason: Any, acting_user: AnyUser
) -> tuple[PublicationSchedule, bool]:
    """Cancel scheduled revision `revision_number` on every channel, with a reason, audited: its unclaimed
    publish operations are cancelled (pending → cancelled) and it will not be published.

    Approvers only (the revision's author included: holding an embargoed story back sends nothing). Locks
    as check_reschedule_publication does, and is refused the same way once any channel's publish was
    claimed. A cancelled schedule is final; returns it and whether this call cancelled it (False: it was
    cancelled already). Raises InvalidInput, NotFound, PermissionRefused, DecisionAlreadyMade, ScheduleFired."""
    acting_user = require_role(acting_user, Role.APPROVER, to="cancel a scheduled publication")
    reason = clean_text(reason, field="Reason", max_chars=CANCEL_REASON_MAX_CHARS, required=True)
    revision, schedule = _locked_schedule(public_id, revision_number, acting_user=acting_user)
    if schedule.cancelled_at is not None:
        return schedule, False
    operations = unclaimed_publishes(revision, schedule, _locked_publishes(revision))
    return do_cancel_schedule(
        revision, schedule=schedule, operations=operations, reason=reason, acting_user=acting_user
    ), True


@transaction.atomic(savepoint=False)
def do_cancel_schedule(
    revision: Revision,
    *,
    schedule: PublicationSchedule,
    operations: list[Operation],
    reason: str,
    acting_user: User,
) -> PublicationSchedule:
    """Caller holds the locks of check_cancel_schedule; `operations` are the unclaimed ones.

    The brief, when this revision is its latest and was waiting as approved, goes to "changes requested":
    the revision will not be published, and a new revision (approved again) is how it is published after
    all (docs/schedules.md#cancel)."""
    cancelled = Operation.objects.filter(
        id__in=[op.id for op in operations], status=OperationStatus.PENDING, attempts=0
    ).update(
        status=OperationStatus.CANCELLED,
        finished_at=Now(),
        updated_at=Now(),
        last_error_kind="cancelled",
        last_error_message=f"schedule cancelled by {acting_user.get_username()}: {reason}"[:2000],
    )
    _moved(cancelled, operations)
    brief = revision.brief
    old_status = brief.status
    if brief.status == Brief.Status.APPROVED and not brief.revisions.filter(number__gt=revision.number).exists():
        do_change_brief_status(brief, Brief.Status.CHANGES_REQUESTED)
    schedule.cancelled_at = database_now()
    schedule.cancelled_by = acting_user
    schedule.cancel_reason = reason
    schedule.save(update_fields=["cancelled_at", "cancelled_by", "cancel_reason"])
    record_audit_event(
        acting_user=acting_user,
        event_type="revision.schedule_cancelled",
        subject_type="revision",
        subject_id=revision_subject_id(brief.public_id, revision.number),
        old_state={"publish_at": schedule.publish_at.isoformat(), "zone": schedule.zone, "status": old_status},
        new_state={
            "cancelled": True,
            "reason": reason,
            "status": brief.status,
            "channels": sorted(op.channel for op in operations),
        },
    )
    return schedule
