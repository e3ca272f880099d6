"""Operator actions (Django admin): audited, idempotent, no network call.

Each locks the operation's row, re-checks, and moves it along OPERATION_TRANSITIONS (the
database refuses any other move); a no-op writes nothing and returns False.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from workers.audit import record_audit_event
from workers.doorbell import ring_doorbell
from workers.errors import RECONCILE_REQUESTED
from workers.models import OPERATION_TRANSITIONS, WAITING_STATUSES, Conflict, Operation, OperationStatus

S = OperationStatus


def _lock(operation: Operation) -> Operation:
    return Operation.objects.select_for_update(of=("self",)).get(id=operation.id)


def _operator_transition(
    locked: Operation, *, to: str, acting_user: User | None, event_type: str, detail: str, **fields: Any
) -> bool:
    """Move the operation, whose row the caller locked, to `to`; a move the table does not allow
    writes nothing. Rescheduling an operation already waiting to retry is not a move."""
    rescheduling = locked.status == to == S.RETRY_WAIT
    if not rescheduling and to not in OPERATION_TRANSITIONS[locked.status]:
        return False
    old = {"status": locked.status, "attempts": locked.attempts, "max_attempts": locked.max_attempts}
    locked.status = to
    for name, value in fields.items():
        setattr(locked, name, value)
    locked.updated_at = timezone.now()
    locked.save(update_fields=["status", "updated_at", *fields])
    record_audit_event(
        acting_user=acting_user,
        event_type=event_type,
        subject_type="operation",
        subject_id=locked.key,
        old_state=old,
        new_state={"status": to, "detail": detail, "max_attempts": locked.max_attempts},
    )
    return True


@transaction.atomic(savepoint=False)
def do_retry_operation_now(operation: Operation, *, acting_user: User, reconcile: bool = False) -> bool:
    """Make a waiting, dead or conflicted operation due now, with one more attempt allowed.

    With `reconcile`, the next attempt looks the key up at the target and adopts what exists
    before sending anything. Returns False (and writes nothing) when the operation is running
    or finished for good.
    """
    locked = _lock(operation)
    # running -> retry_wait is the worker's own move (a failed attempt); an operator taking it
    # would strip a live lease without a new fencing token.
    if locked.status not in (S.PENDING, S.RETRY_WAIT, S.DEAD, S.CONFLICT):
        return False
    now = timezone.now()
    already_due = (
        locked.status in WAITING_STATUSES
        and locked.next_attempt_at <= now
        and locked.attempts - locked.waits < locked.max_attempts
        and (not reconcile or locked.last_error_kind == RECONCILE_REQUESTED)
    )
    if already_due:
        return False
    changed = _operator_transition(
        locked,
        to=S.RETRY_WAIT,
        acting_user=acting_user,
        event_type="operation.reconcile_requested" if reconcile else "operation.retry_now",
        detail="look the key up, adopt what exists" if reconcile else "retry now",
        next_attempt_at=Now(),
        max_attempts=max(locked.max_attempts, locked.attempts - locked.waits + 1),
        deadline=max(locked.deadline, now + datetime.timedelta(seconds=settings.GALLEY_OPERATION_DEADLINE_SECONDS)),
        finished_at=None,
        needs_operator=False,
        last_error_kind=RECONCILE_REQUESTED if reconcile else locked.last_error_kind,
    )
    if changed:
        resolution = "looked up at the target again" if reconcile else "retried after a fix"
        _resolve_open_conflicts(locked, resolution=resolution, acting_user=acting_user)
        ring_doorbell()
    return changed


@transaction.atomic(savepoint=False)
def do_cancel_operation(operation: Operation, *, reason: str, acting_user: User | None) -> bool:
    """Cancel an operation that is not running, settling its conflicts; returns False (nothing
    written) otherwise. `acting_user` None is Galley itself ending an intent a newer one replaced."""
    locked = _lock(operation)
    changed = _operator_transition(
        locked,
        to=S.CANCELLED,
        acting_user=acting_user,
        event_type="operation.cancelled",
        detail=reason,
        finished_at=timezone.now(),
        last_error_kind="cancelled",
        last_error_message=reason[:2000],
        needs_operator=False,
    )
    if changed:
        _resolve_open_conflicts(locked, resolution=f"cancelled: {reason}", acting_user=acting_user)
    return changed


def _resolve(locked: Conflict, *, resolution: str, acting_user: User | None) -> None:
    locked.resolved_at = timezone.now()
    locked.resolved_by = acting_user
    locked.resolution = resolution
    locked.save(update_fields=["resolved_at", "resolved_by", "resolution"])
    record_audit_event(
        acting_user=acting_user,
        event_type="operation.conflict_resolved",
        subject_type="operation",
        subject_id=locked.operation.key,
        old_state={"resolved": False, "kind": locked.kind},
        new_state={"resolved": True, "resolution": resolution},
    )


def _resolve_open_conflicts(locked: Operation, *, resolution: str, acting_user: User | None) -> None:
    """An action that ends or retries the operation settles the conflicts it had: a retry that
    meets the same disagreement records a new one."""
    for conflict in locked.conflicts.select_for_update(of=("self",)).filter(resolved_at__isnull=True).order_by("id"):
        _resolve(conflict, resolution=resolution, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_resolve_conflict(conflict: Conflict, *, resolution: str, acting_user: User) -> bool:
    """Note a resolution on the conflict alone; the operation stays as it is."""
    locked = Conflict.objects.select_for_update(of=("self",)).select_related("operation").get(id=conflict.id)
    if locked.resolved_at is not None:
        return False
    _resolve(locked, resolution=resolution, acting_user=acting_user)
    return True
