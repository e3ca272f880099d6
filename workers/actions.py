"""The durable machinery's writes: enqueue, claim, fenced transitions, reconcile, purge, operator actions.

Every transition a worker makes after its claim is a guarded update naming operation id,
lease owner and fencing token (STYLE.md 7): zero rows updated means the lease was lost, and
the worker raises LeaseLost and writes nothing else. No function here makes a network call.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now
from django.utils import timezone

from workers.audit import record_audit_event
from workers.doorbell import ring_doorbell
from workers.errors import AMBIGUOUS_KINDS, LeaseLost, OperationFailed
from workers.models import (
    FINISHED_STATUSES,
    Attempt,
    Dependency,
    KeyConflict,
    Operation,
    OperationStatus,
)
from workers.policy import Decision, Disposition, decide
from workers.registry import Done, Job

logger = logging.getLogger(__name__)

User = AbstractBaseUser | AnonymousUser

S = OperationStatus
# The operation's allowed moves, in one place (the claim and the reconciler move
# pending/retry_wait/running in SQL and follow the same table).
OPERATION_TRANSITIONS: dict[str, set[str]] = {
    S.PENDING: {S.RUNNING, S.SUPERSEDED, S.CANCELLED, S.DEAD},
    S.RETRY_WAIT: {S.RUNNING, S.SUPERSEDED, S.CANCELLED, S.DEAD, S.RETRY_WAIT},
    S.RUNNING: {S.SUCCEEDED, S.RETRY_WAIT, S.DEAD, S.CONFLICT, S.SUPERSEDED},
    S.DEAD: {S.RETRY_WAIT, S.CANCELLED},
    S.CONFLICT: {S.RETRY_WAIT, S.CANCELLED},
    S.SUCCEEDED: set(),
    S.SUPERSEDED: set(),
    S.CANCELLED: set(),
}


def db_now_plus(seconds: float) -> ExpressionWrapper:
    """statement_timestamp() + seconds, on the database clock."""
    return ExpressionWrapper(Now() + Value(datetime.timedelta(seconds=seconds)), output_field=DateTimeField())


# ---------------------------------------------------------------------------------------------
# Enqueue and dependencies


@dataclass(frozen=True)
class Enqueued:
    operation: Operation
    created: bool
    conflict: KeyConflict | None = None


@transaction.atomic(savepoint=False)
def enqueue_operation(
    *,
    key: str,
    kind: str,
    payload_hash: str,
    subject_type: str,
    subject_id: str,
    arguments: dict[str, Any] | None = None,
    after: Iterable[tuple[Operation, str]] = (),
    max_attempts: int | None = None,
) -> Enqueued:
    """Record the intent `key` in the caller's transaction, idempotently (invariants 1, 2, 5).

    Canonical-first: insert, or read the operation that already holds the key. The same key
    with the same payload hash returns the existing operation (created False). With another
    hash nothing is enqueued: a KeyConflict is recorded and audited, in the caller's
    transaction, and returned for the caller to report — never as a success. `after` adds
    durable prerequisites as (operation, Dependency.Requires). Rings the doorbell on commit.
    """
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO workers_operation
                (key, kind, payload_hash, subject_type, subject_id, arguments, status, attempts,
                 max_attempts, next_attempt_at, deadline, lease_owner, fencing_token, last_error_kind,
                 last_error_message, needs_operator, created_at, updated_at)
            VALUES (%s, %s, %s, %s, %s, %s::jsonb, 'pending', 0, %s, statement_timestamp(),
                    statement_timestamp() + make_interval(secs => %s), '', 0, '', '', false, %s, %s)
            ON CONFLICT (key) DO NOTHING
            RETURNING id
            """,
            [
                key,
                kind,
                payload_hash,
                subject_type,
                subject_id,
                json.dumps(arguments or {}, sort_keys=True),
                max_attempts or settings.GALLEY_MAX_ATTEMPTS,
                settings.GALLEY_OPERATION_DEADLINE_SECONDS,
                now,
                now,
            ],
        )
        inserted = cursor.fetchone() is not None
    operation = Operation.objects.get(key=key)
    if not inserted:
        if operation.payload_hash == payload_hash:
            return Enqueued(operation, created=False)
        conflict = KeyConflict.objects.create(
            operation=operation,
            source=KeyConflict.Source.ENQUEUE,
            existing_payload_hash=operation.payload_hash,
            conflicting_payload_hash=payload_hash,
            detail=f"{key} was enqueued again with another payload; the new intent was not recorded",
        )
        record_audit_event(
            acting_user=None,
            event_type="operation.key_conflict",
            subject_type="operation",
            subject_id=key,
            old_state={"payload_hash": operation.payload_hash},
            new_state={"payload_hash": payload_hash, "refused": True},
        )
        logger.warning("key conflict on enqueue", extra={"operation_key": key})
        return Enqueued(operation, created=False, conflict=conflict)
    for prerequisite, requires in after:
        add_dependency(operation, prerequisite=prerequisite, requires=requires)
    ring_doorbell()
    return Enqueued(operation, created=True)


def add_dependency(operation: Operation, *, prerequisite: Operation, requires: str) -> None:
    """A durable happens-before edge (invariant 7); idempotent."""
    Dependency.objects.get_or_create(operation=operation, prerequisite=prerequisite, defaults={"requires": requires})


# ---------------------------------------------------------------------------------------------
# Claim

CLAIM_SQL = """
WITH due AS (
    SELECT o.id
    FROM workers_operation o
    WHERE ((o.status IN ('pending', 'retry_wait') AND o.next_attempt_at <= statement_timestamp())
           OR (o.status = 'running' AND o.lease_expires_at < statement_timestamp()))
      AND o.attempts < o.max_attempts
      AND o.deadline > statement_timestamp()
      AND (%(kinds)s::text[] IS NULL OR o.kind = ANY(%(kinds)s::text[]))
      AND NOT EXISTS (
          SELECT 1
          FROM workers_dependency d
          JOIN workers_operation p ON p.id = d.prerequisite_id
          WHERE d.operation_id = o.id
            AND CASE d.requires
                    WHEN 'success' THEN p.status <> 'succeeded'
                    ELSE p.status IN ('pending', 'running', 'retry_wait')
                END)
    ORDER BY o.next_attempt_at, o.id
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE workers_operation o
SET status = 'running',
    lease_owner = %(owner)s,
    lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s),
    fencing_token = o.fencing_token + 1,
    attempts = o.attempts + 1,
    last_error_kind = CASE WHEN o.status = 'running' THEN 'lease_expired' ELSE o.last_error_kind END,
    updated_at = statement_timestamp()
FROM due
WHERE o.id = due.id
RETURNING o.id, o.key, o.kind, o.payload_hash, o.subject_type, o.subject_id, o.arguments,
          o.attempts, o.fencing_token, o.deadline, o.last_error_kind
"""


@transaction.atomic(durable=True)
def claim_operations(*, worker_id: str, limit: int, kinds: list[str] | None = None) -> list[Job]:
    """Claim up to `limit` due operations whose prerequisites are met, in one statement.

    FOR UPDATE SKIP LOCKED lets concurrent workers claim disjoint rows; a running operation
    whose lease expired (database clock) is taken over. Each claim increments the fencing
    token and the attempt count and opens an Attempt row, all in this short transaction.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIM_SQL,
            {"kinds": kinds, "limit": limit, "owner": worker_id, "lease": settings.GALLEY_LEASE_SECONDS},
        )
        rows = cursor.fetchall()
    if not rows:
        return []
    ids = [row[0] for row in rows]
    unfinished_previous = set(
        Attempt.objects.filter(operation_id__in=ids, finished_at__isnull=True).values_list("operation_id", flat=True)
    )
    jobs: list[Job] = []
    attempts: list[Attempt] = []
    for (
        op_id,
        key,
        kind,
        payload_hash,
        subject_type,
        subject_id,
        arguments,
        number,
        token,
        deadline,
        last,
    ) in rows:
        attempt = Attempt(
            operation_id=op_id,
            number=number,
            worker_id=worker_id,
            fencing_token=token,
            ambiguous=op_id in unfinished_previous or last in AMBIGUOUS_KINDS,
        )
        attempts.append(attempt)
        jobs.append(
            Job(
                operation_id=op_id,
                key=key,
                kind=kind,
                payload_hash=payload_hash,
                subject_type=subject_type,
                subject_id=subject_id,
                # Django loads jsonb as text and decodes it in the field; a raw cursor must too.
                arguments=json.loads(arguments) if isinstance(arguments, str) else arguments or {},
                attempt_id=str(attempt.id),
                attempt_number=number,
                fencing_token=token,
                worker_id=worker_id,
                deadline=deadline,
                ambiguous=attempt.ambiguous,
            )
        )
    # An abandoned attempt (its worker died) is closed here, so that only the new one is open.
    Attempt.objects.filter(operation_id__in=ids, finished_at__isnull=True).update(
        finished_at=Now(), error_kind="lease_expired", error_message="the worker stopped before an outcome"
    )
    Attempt.objects.bulk_create(attempts)
    return jobs


# ---------------------------------------------------------------------------------------------
# Fenced transitions of a claimed operation


def _fenced(job: Job):  # type: ignore[no-untyped-def]
    return Operation.objects.filter(
        id=job.operation_id, lease_owner=job.worker_id, fencing_token=job.fencing_token, status=S.RUNNING
    )


def _close_attempt(
    job: Job,
    *,
    outcome: str,
    started: float,
    failure: OperationFailed | None = None,
    usage: dict[str, int] | None = None,
) -> None:
    Attempt.objects.filter(id=job.attempt_id).update(
        usage=usage or (failure.usage if failure else {}),
        finished_at=Now(),
        outcome=outcome,
        error_kind=str(failure.kind) if failure else "",
        error_message=failure.message[:2000] if failure else "",
        http_status=failure.http_status if failure else None,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def renew_lease(job: Job) -> None:
    """Extend the lease before a step that could outlive it; raises LeaseLost if it is gone."""
    renewed = _fenced(job).update(lease_expires_at=db_now_plus(settings.GALLEY_LEASE_SECONDS), updated_at=Now())
    if renewed == 0:
        raise LeaseLost(job.key)


def complete_operation(job: Job, done: Done, *, started: float) -> None:
    """Mark the operation succeeded and run the domain's commit, in one transaction, fenced."""
    with transaction.atomic(durable=True):
        updated = _fenced(job).update(
            status=S.SUCCEEDED,
            result=done.result,
            finished_at=Now(),
            updated_at=Now(),
            lease_owner="",
            lease_expires_at=None,
            last_error_kind="",
            last_error_message="",
            needs_operator=False,
        )
        if updated == 0:
            raise LeaseLost(job.key)
        if done.commit is not None:
            done.commit()
        _close_attempt(job, outcome=Attempt.Outcome.SUCCEEDED, started=started, usage=done.usage)
        # Dependents may be claimable now.
        ring_doorbell()


def fail_operation(job: Job, failure: OperationFailed, *, started: float) -> Decision:
    """Apply the retry policy to a failed attempt, fenced. Returns what was decided."""
    decision = decide(failure.kind, attempt=job.attempt_number, retry_after=failure.retry_after)
    with transaction.atomic(durable=True):
        operation = Operation.objects.only("attempts", "max_attempts", "deadline").get(id=job.operation_id)
        message = failure.message[:2000]
        if decision.disposition == Disposition.RETRY:
            retry_at = timezone.now() + datetime.timedelta(seconds=decision.delay_seconds)
            if operation.attempts >= operation.max_attempts:
                decision = Decision(Disposition.DEAD, needs_operator=True)
                message = f"attempts exhausted ({operation.attempts} of {operation.max_attempts}); last: {message}"
            elif retry_at >= operation.deadline:
                decision = Decision(Disposition.DEAD, needs_operator=True)
                message = f"deadline {operation.deadline:%Y-%m-%d %H:%M:%S} would pass; last: {message}"
        fields: dict[str, Any] = {
            "last_error_kind": str(failure.kind),
            "last_error_message": message,
            "updated_at": Now(),
            "lease_owner": "",
            "lease_expires_at": None,
            "needs_operator": decision.needs_operator,
        }
        if decision.disposition == Disposition.RETRY:
            fields.update(status=S.RETRY_WAIT, next_attempt_at=db_now_plus(decision.delay_seconds))
            outcome = Attempt.Outcome.RETRY
        elif decision.disposition == Disposition.CONFLICT:
            fields.update(status=S.CONFLICT, finished_at=Now())
            outcome = Attempt.Outcome.CONFLICT
        else:
            fields.update(status=S.DEAD, finished_at=Now())
            outcome = Attempt.Outcome.DEAD
        if _fenced(job).update(**fields) == 0:
            raise LeaseLost(job.key)
        if decision.disposition == Disposition.CONFLICT:
            KeyConflict.objects.create(
                operation_id=job.operation_id,
                source=KeyConflict.Source.TARGET,
                existing_payload_hash=job.payload_hash,
                conflicting_payload_hash=failure.conflicting_payload_hash,
                detail=message,
            )
            record_audit_event(
                acting_user=None,
                event_type="operation.key_conflict",
                subject_type="operation",
                subject_id=job.key,
                old_state={"status": S.RUNNING},
                new_state={"status": S.CONFLICT, "detail": message},
            )
        _close_attempt(job, outcome=outcome, started=started, failure=failure)
        if decision.disposition == Disposition.RETRY:
            ring_doorbell()
    return decision


def supersede_running_operation(job: Job, reason: str, *, started: float) -> None:
    with transaction.atomic(durable=True):
        updated = _fenced(job).update(
            status=S.SUPERSEDED,
            finished_at=Now(),
            updated_at=Now(),
            lease_owner="",
            lease_expires_at=None,
            last_error_kind="superseded",
            last_error_message=reason[:2000],
        )
        if updated == 0:
            raise LeaseLost(job.key)
        _close_attempt(job, outcome=Attempt.Outcome.SUPERSEDED, started=started)
        ring_doorbell()


def record_lease_lost(job: Job, *, started: float) -> None:
    """The worker's only write after losing its lease: its own attempt row, for diagnosis."""
    Attempt.objects.filter(id=job.attempt_id).update(
        finished_at=Now(),
        outcome=Attempt.Outcome.LEASE_LOST,
        error_kind="lease_lost",
        error_message="another worker took the operation over; this worker wrote nothing",
        duration_ms=int((time.monotonic() - started) * 1000),
    )


@transaction.atomic(savepoint=False)
def supersede_waiting_operation(operation: Operation, *, reason: str) -> bool:
    """Supersede an operation that has not been claimed yet (no attempt can have had an effect).

    Guarded on status pending with zero attempts, so it never races a worker. Returns whether
    it was superseded.
    """
    updated = Operation.objects.filter(id=operation.id, status=S.PENDING, attempts=0).update(
        status=S.SUPERSEDED,
        finished_at=Now(),
        updated_at=Now(),
        last_error_kind="superseded",
        last_error_message=reason[:2000],
    )
    return updated == 1


# ---------------------------------------------------------------------------------------------
# Reconciler and retention


@transaction.atomic(durable=True)
def reconcile_expired_leases() -> dict[str, int]:
    """Make operations whose lease expired claimable again, with a new fencing token.

    The next attempt is ambiguous (the dead worker may have had its effect), so handlers look
    the key up before acting. Operations out of attempts or past their deadline become dead
    letters for an operator instead of waiting forever.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH expired AS (
                SELECT id, (attempts >= max_attempts OR deadline <= statement_timestamp()) AS spent
                FROM workers_operation
                WHERE status = 'running' AND lease_expires_at < statement_timestamp()
                FOR UPDATE SKIP LOCKED
            )
            UPDATE workers_operation o
            SET status = CASE WHEN expired.spent THEN 'dead' ELSE 'retry_wait' END,
                finished_at = CASE WHEN expired.spent THEN statement_timestamp() END,
                needs_operator = expired.spent,
                last_error_kind = 'lease_expired',
                last_error_message = 'lease of ' || o.lease_owner || ' expired before an outcome',
                lease_owner = '',
                lease_expires_at = NULL,
                fencing_token = o.fencing_token + 1,
                next_attempt_at = statement_timestamp(),
                updated_at = statement_timestamp()
            FROM expired
            WHERE o.id = expired.id
            RETURNING o.id, o.status
            """
        )
        rows = cursor.fetchall()
        expired = [status for _id, status in rows]
        # The dead worker's attempt never recorded an outcome; close it for the record.
        Attempt.objects.filter(operation_id__in=[op_id for op_id, _status in rows], finished_at__isnull=True).update(
            finished_at=Now(), error_kind="lease_expired", error_message="the worker stopped before an outcome"
        )
        cursor.execute(
            """
            UPDATE workers_operation
            SET status = 'dead',
                finished_at = statement_timestamp(),
                updated_at = statement_timestamp(),
                needs_operator = true,
                last_error_message = CASE
                    WHEN attempts >= max_attempts
                    THEN 'attempts exhausted (' || attempts || ' of ' || max_attempts || '); last: '
                         || last_error_message
                    ELSE 'deadline passed; last: ' || last_error_message END
            WHERE status IN ('pending', 'retry_wait')
              AND (attempts >= max_attempts OR deadline <= statement_timestamp())
            """
        )
        exhausted = cursor.rowcount
    if expired:
        ring_doorbell()
    return {
        "expired_leases": len(expired),
        "dead": exhausted + sum(1 for status in expired if status == S.DEAD),
    }


@transaction.atomic(durable=True)
def purge_finished_operations(*, older_than_days: int | None = None) -> int:
    """Delete finished operations (and their attempts) older than the retention period (invariant 11).

    Never touches an unfinished operation, one an unfinished operation depends on, or one
    with a key conflict (kept for the operators' record).
    """
    days = settings.GALLEY_RETENTION_DAYS if older_than_days is None else older_than_days
    with connection.cursor() as cursor:
        cursor.execute(
            """
            DELETE FROM workers_operation o
            WHERE o.status = ANY(%s)
              AND o.finished_at < statement_timestamp() - make_interval(days => %s)
              AND NOT EXISTS (SELECT 1 FROM workers_keyconflict c WHERE c.operation_id = o.id)
              AND NOT EXISTS (
                  SELECT 1 FROM workers_dependency d JOIN workers_operation u ON u.id = d.operation_id
                  WHERE d.prerequisite_id = o.id AND u.status IN ('pending', 'running', 'retry_wait'))
            """,
            [list(FINISHED_STATUSES), days],
        )
        return cursor.rowcount


# ---------------------------------------------------------------------------------------------
# Operator actions (Django admin): audited, idempotent, no network call


def _operator_transition(
    operation: Operation, *, to: str, acting_user: User, event_type: str, detail: str, **fields: Any
) -> bool:
    """Lock the row, re-check, move it; a no-op (already there, or not allowed) writes nothing."""
    locked = Operation.objects.select_for_update(of=("self",)).get(id=operation.id)
    if to not in OPERATION_TRANSITIONS[locked.status] or (locked.status == to and not fields):
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
    locked = Operation.objects.select_for_update(of=("self",)).get(id=operation.id)
    # running -> retry_wait is the worker's own move (a failed attempt); an operator taking it
    # would strip a live lease without a new fencing token.
    if locked.status not in (S.PENDING, S.RETRY_WAIT, S.DEAD, S.CONFLICT):
        return False
    now = timezone.now()
    already_due = (
        locked.status in (S.PENDING, S.RETRY_WAIT)
        and locked.next_attempt_at <= now
        and locked.attempts < locked.max_attempts
        and (not reconcile or locked.last_error_kind == "reconcile_requested")
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
        max_attempts=max(locked.max_attempts, locked.attempts + 1),
        deadline=max(locked.deadline, now + datetime.timedelta(seconds=settings.GALLEY_OPERATION_DEADLINE_SECONDS)),
        finished_at=None,
        needs_operator=False,
        last_error_kind="reconcile_requested" if reconcile else locked.last_error_kind,
    )
    if changed:
        ring_doorbell()
    return changed


@transaction.atomic(savepoint=False)
def do_cancel_operation(operation: Operation, *, reason: str, acting_user: User) -> bool:
    """Cancel an operation that is not running; returns False (nothing written) otherwise."""
    return _operator_transition(
        operation,
        to=S.CANCELLED,
        acting_user=acting_user,
        event_type="operation.cancelled",
        detail=reason,
        finished_at=timezone.now(),
        last_error_kind="cancelled",
        last_error_message=reason[:2000],
        needs_operator=False,
    )


@transaction.atomic(savepoint=False)
def do_resolve_conflict(conflict: KeyConflict, *, resolution: str, acting_user: User) -> bool:
    locked = KeyConflict.objects.select_for_update(of=("self",)).get(id=conflict.id)
    if locked.resolved_at is not None:
        return False
    locked.resolved_at = timezone.now()
    locked.resolved_by = acting_user  # type: ignore[assignment]
    locked.resolution = resolution
    locked.save(update_fields=["resolved_at", "resolved_by", "resolution"])
    record_audit_event(
        acting_user=acting_user,
        event_type="operation.conflict_resolved",
        subject_type="operation",
        subject_id=locked.operation.key,
        old_state={"resolved": False},
        new_state={"resolved": True, "resolution": resolution},
    )
    return True
