"""Telling operators, once, that a schedule missed its time (docs/operations.md#overdue-schedules,
docs/invariants.md#i15: "lateness past a configured bound tells operators").

Two steps, as every side effect leaves a transaction (docs/invariants.md#i5): the sweep writes, per
newly overdue schedule, the alert operation `schedule-overdue:<publish key>` and an audit record; a
worker then runs it (publishing.handlers.overdue), whose finalize tells the operators through the
operator-needed hooks (the in-app notification with its email intent, the webhook "problem" event).
The alert's key is unique: of any number of sweeps, on any number of hosts, at the same moment, one
inserts it and the others find it written (they wait on the unique index until the first commits),
so each schedule is told once, however often it is swept.
"""

from __future__ import annotations

import hashlib

from django.db import transaction
from django.db.models import Exists, OuterRef, Value
from django.db.models.functions import Concat

from publishing.identities import RETRACT, SCHEDULE_OVERDUE, schedule_overdue_key
from publishing.selectors.overdue import OverdueSchedule, describe_overdue, overdue_schedules
from workers.actions.enqueue import enqueue_operation
from workers.audit import record_audit_event
from workers.models import Operation
from workers.registry import OperatorNeeded, operator_needed

OVERDUE_STATUS = "overdue"  # the status the operator-needed hooks are told (the operation's own is unchanged)


def _hash(publish_key: str) -> str:
    # The alert's payload is its schedule: the same key always carries the same hash, so a sweep that
    # finds the alert written is a replay, never a key conflict.
    return hashlib.sha256(publish_key.encode()).hexdigest()


@transaction.atomic(savepoint=False)
def do_alert_overdue_schedules(*, limit: int) -> int:
    """Write the alert of each overdue schedule that has none yet (at most `limit`, oldest T first),
    with an audit record; returns how many this call wrote. Idempotent and safe to run concurrently:
    the alerts are inserted in publish operation id order, so two sweeps that meet on several keys
    wait for each other in one order and never deadlock; the one that finds a key written writes
    nothing for it."""
    alert_written = Operation.objects.filter(key=Concat(Value(schedule_overdue_key("")), OuterRef("key")))
    candidates = list(overdue_schedules().exclude(Exists(alert_written)).order_by("scheduled_for", "id")[:limit])
    written = 0
    for schedule in sorted(describe_overdue(candidates), key=lambda s: s.operation.id):
        publish = schedule.operation
        enqueued = enqueue_operation(
            key=schedule_overdue_key(publish.key),
            kind=SCHEDULE_OVERDUE,
            payload_hash=_hash(publish.key),
            subject_type="brief",
            subject_id=publish.subject_id,
            subject_version=publish.subject_version,
            # No channel: the channel's pause, which may be why the schedule is late, must not hold its alert.
            arguments={"publish_operation_id": publish.id},
        )
        if not enqueued.created:
            continue
        written += 1
        record_audit_event(
            acting_user=None,
            event_type="schedule.overdue",
            subject_type="operation",
            subject_id=publish.key,
            old_state={"scheduled_for": schedule.scheduled_for.isoformat(), "status": publish.status},
            new_state={
                "overdue_by_seconds": round(schedule.overdue_by.total_seconds(), 3),
                "why": schedule.why,
                "alert": enqueued.operation.key,
            },
        )
    return written


def overdue_message(schedule: OverdueSchedule) -> str:
    """The alert in plain words, e.g. "scheduled for 14:00:00 UTC on partner-feed, overdue by 2 min 5 s:
    partner-feed waiting: 429 … until 14:03:00 UTC"."""
    seconds = int(schedule.overdue_by.total_seconds())
    late = f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"
    when = f"{schedule.scheduled_for:%Y-%m-%d %H:%M:%S} UTC"
    what = "the retraction " if schedule.operation.kind == RETRACT else ""
    return f"{what}scheduled for {when} on {schedule.channel}, overdue by {late}: {schedule.why}"


@transaction.atomic(savepoint=False)
def do_tell_overdue_schedule(schedule: OverdueSchedule) -> None:
    """In the alert operation's fenced finalize: tell every operator-needed hook (approvals' notification
    and email, the webhook event), so that the telling commits with the alert's success or not at all."""
    publish = schedule.operation
    operator_needed(
        OperatorNeeded(
            operation_id=publish.id,
            kind=publish.kind,
            subject_type=publish.subject_type,
            subject_id=publish.subject_id,
            subject_version=publish.subject_version,
            arguments=publish.arguments,
            status=OVERDUE_STATUS,
            message=overdue_message(schedule),
        )
    )
