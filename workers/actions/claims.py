"""Claims and the fenced transitions of a claimed operation (invariant 8).

A claim is one statement (`FOR UPDATE SKIP LOCKED` + `UPDATE … RETURNING`, with the attempt row).
Every write a worker makes after it names operation id, lease owner and fencing token (FENCE_SQL,
`fenced_update`; STYLE.md 7): zero rows updated means the lease was lost, and the worker raises
LeaseLost and writes nothing else but its own attempt row (`record_lease_lost`). The hot path is
raw SQL in as few round trips as the invariants allow: the claim one statement, a success one
statement after the domain's finalize, in one transaction with it.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, QuerySet, Value
from django.db.models.functions import Now

from workers.audit import record_audit_event
from workers.crashpoints import crash_point
from workers.doorbell import ring_doorbell
from workers.errors import AMBIGUOUS_KINDS, LeaseLost, OperationFailed, is_lock_timeout
from workers.models import Attempt, Conflict, Operation, OperationStatus
from workers.policy import WAIT_KINDS, Decision, Disposition, decide
from workers.prepared import execute_prepared
from workers.registry import ClaimedOperation, OperatorNeeded, Success, operator_needed

S = OperationStatus
logger = logging.getLogger(__name__)


def db_now_plus(seconds: float) -> ExpressionWrapper:
    """statement_timestamp() + seconds, on the database clock."""
    return ExpressionWrapper(Now() + Value(datetime.timedelta(seconds=seconds)), output_field=DateTimeField())


# An operation a claim may take (invariant 7 and the bounds): deadline left, of the asked kinds,
# every prerequisite met, and attempts left (below). Due is one of two cases, each matching one
# partial index (so that a claim reads a few index entries in order, however long the queue):
# waiting and due, or running with a lease expired (database clock).
_CLAIMABLE_SQL = """
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
"""
WAITING_DUE_SQL = (
    "o.status IN ('pending', 'retry_wait') AND o.next_attempt_at <= statement_timestamp()"
    " AND o.attempts - o.waits < o.max_attempts" + _CLAIMABLE_SQL
)
# A lease that ran out after its attempt observed the effect (`result` recorded before the finalize:
# `complete_operation`) was no failure: that attempt is not counted (the takeover adds a wait for
# it), so it may be taken over even when it was the last attempt the budget allowed.
LEASE_EXPIRED_SQL = (
    "o.status = 'running' AND o.lease_expires_at < statement_timestamp()"
    " AND (o.attempts - o.waits < o.max_attempts OR o.result IS NOT NULL)" + _CLAIMABLE_SQL
)

# The claim, in one statement (invariant 8): lock due rows (SKIP LOCKED), take the lease with a new
# fencing token, close the attempt a dead worker left open, and open this attempt. The attempt is
# ambiguous when the previous one may have had its effect: it never recorded an outcome (its
# worker died: an open attempt row, seen in the statement's snapshot, before `abandoned` closes it),
# it ended in a kind that may have reached the target, or an attempt observed the effect (`result`).
# The attempt keeps when the operation became claimable (its due time, or its lease's expiry for a
# takeover), for the queue time of /metrics. `more_due` says whether another operation was claimable
# (one more row is locked to know it, free again when the statement ends), so that a worker lets one
# more thread claim only when there is work for it.
CLAIM_SQL = f"""
WITH waiting AS (
    SELECT o.id, o.next_attempt_at, o.next_attempt_at AS due_at
    FROM workers_operation o
    WHERE {WAITING_DUE_SQL}
    ORDER BY o.next_attempt_at, o.id
    LIMIT %(limit)s + 1
    FOR UPDATE OF o SKIP LOCKED
),
expired AS (
    SELECT o.id, o.next_attempt_at, o.lease_expires_at AS due_at
    FROM workers_operation o
    WHERE {LEASE_EXPIRED_SQL}
    ORDER BY o.lease_expires_at, o.id
    LIMIT %(limit)s + 1
    FOR UPDATE OF o SKIP LOCKED
),
candidates AS (SELECT * FROM waiting UNION ALL SELECT * FROM expired),
due AS (
    SELECT id FROM candidates
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE workers_operation o
    SET status = 'running',
        lease_owner = %(owner)s,
        lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s),
        fencing_token = o.fencing_token + 1,
        attempts = o.attempts + 1,
        waits = o.waits + (o.status = 'running' AND o.result IS NOT NULL)::int,
        last_error_kind = CASE WHEN o.status = 'running' THEN 'lease_expired' ELSE o.last_error_kind END,
        updated_at = statement_timestamp()
    FROM due
    WHERE o.id = due.id
    RETURNING o.id, o.key, o.kind, o.payload_hash, o.subject_type, o.subject_id, o.subject_version, o.arguments,
              o.attempts, o.fencing_token, o.deadline, o.last_error_kind, o.next_attempt_at,
              o.result IS NOT NULL AS observed
),
abandoned AS (
    UPDATE workers_attempt a
    SET finished_at = statement_timestamp(),
        error_kind = 'lease_expired',
        error_message = 'the worker stopped before an outcome'
    FROM claimed
    WHERE a.operation_id = claimed.id AND a.finished_at IS NULL
),
opened AS (
    INSERT INTO workers_attempt
        (id, operation_id, number, worker_id, fencing_token, ambiguous, due_at, started_at,
         outcome, error_kind, error_message, usage)
    SELECT gen_random_uuid(), c.id, c.attempts, %(owner)s, c.fencing_token,
           c.last_error_kind = ANY(%(ambiguous_kinds)s::text[]) OR c.observed
               OR EXISTS (SELECT 1 FROM workers_attempt a WHERE a.operation_id = c.id AND a.finished_at IS NULL),
           candidates.due_at, statement_timestamp(), '', '', '', '{{}}'::jsonb
    FROM claimed c
    JOIN candidates ON candidates.id = c.id
    RETURNING id, operation_id, ambiguous
)
SELECT c.id, c.key, c.kind, c.payload_hash, c.subject_type, c.subject_id, c.arguments, c.attempts,
       c.fencing_token, c.deadline, opened.id AS attempt_id, opened.ambiguous,
       (SELECT count(*) FROM candidates) > %(limit)s AS more_due, c.subject_version
FROM claimed c
JOIN opened ON opened.operation_id = c.id
ORDER BY c.next_attempt_at, c.id
"""  # noqa: S608 -- composed of this module's constants; every value is a parameter


@dataclass(frozen=True)
class Claims:
    """What one claim statement took, and whether another operation was claimable at that moment."""

    operations: list[ClaimedOperation]
    more_due: bool


def claim_operations(*, worker_id: str, limit: int, kinds: list[str] | None = None) -> list[ClaimedOperation]:
    """Claim up to `limit` due operations whose prerequisites are met, in one statement.

    See claim_due; this returns the claimed operations only."""
    return claim_due(worker_id=worker_id, limit=limit, kinds=kinds).operations


def claim_due(*, worker_id: str, limit: int, kinds: list[str] | None = None) -> Claims:
    """Claim up to `limit` due operations whose prerequisites are met, in one statement.

    FOR UPDATE SKIP LOCKED lets concurrent workers claim disjoint rows; a running operation
    whose lease expired (database clock) is taken over. Each claim increments the fencing token
    and the attempt count and opens an Attempt row, all in that one statement, which commits on
    its own (autocommit): a claim is never part of a caller's transaction but a test's.
    """
    params = {
        "kinds": kinds,
        "limit": limit,
        "owner": worker_id,
        "lease": settings.GALLEY_LEASE_SECONDS,
        "ambiguous_kinds": sorted(AMBIGUOUS_KINDS),
    }
    with execute_prepared(CLAIM_SQL, params) as cursor:
        rows = cursor.fetchall()
    if not rows:
        return Claims([], more_due=False)
    claimed = [
        ClaimedOperation(
            operation_id=row[0],
            key=row[1],
            kind=row[2],
            payload_hash=row[3],
            subject_type=row[4],
            subject_id=row[5],
            subject_version=row[13],
            # Django loads jsonb as text and decodes it in the field; a raw cursor must too.
            arguments=json.loads(row[6]) if isinstance(row[6], str) else row[6] or {},
            attempt_number=row[7],
            fencing_token=row[8],
            deadline=row[9],
            attempt_id=str(row[10]),
            ambiguous=row[11],
            worker_id=worker_id,
        )
        for row in rows
    ]
    return Claims(claimed, more_due=rows[0][12])


def _fenced(claimed: ClaimedOperation) -> QuerySet[Operation]:
    """The claimed operation, as long as this worker still holds its lease."""
    return Operation.objects.filter(
        id=claimed.operation_id,
        lease_owner=claimed.worker_id,
        fencing_token=claimed.fencing_token,
        status=S.RUNNING,
    )


def fenced_update(claimed: ClaimedOperation, **fields: Any) -> None:
    """The one write a worker makes to its operation after the claim: guarded by id, lease owner,
    fencing token and status running. Raises LeaseLost (nothing written) when no row matched."""
    if _fenced(claimed).update(updated_at=Now(), **fields) == 0:
        raise LeaseLost(claimed.key)


# The fence of every write after the claim (STYLE.md 7): id, lease owner, fencing token, running.
FENCE_SQL = "id = %(id)s AND lease_owner = %(owner)s AND fencing_token = %(token)s AND status = 'running'"

RENEW_SQL = f"""
UPDATE workers_operation
SET lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s), updated_at = statement_timestamp()
WHERE {FENCE_SQL}
"""  # noqa: S608 -- composed of this module's constants


# What the handler observed (for a publish: the target's receipt), recorded before the finalize and
# committed on its own: should the finalize wait or this worker stop, the effect is on record, and a
# takeover does not count the lost lease as a failed attempt (CLAIM_SQL). It leaves the lease alone:
# a change of the indexed lease_expires_at makes the update non-HOT, which cost a third of the
# throughput in make bench; complete_operation renews the lease separately when it is half spent.
RECORD_RESULT_SQL = f"""
UPDATE workers_operation
SET result = %(result)s::jsonb
WHERE {FENCE_SQL}
"""  # noqa: S608 -- composed of this module's constants

# A success in one statement: the fenced update (which locks the operation row, last in the
# finalize's lock order), this attempt's row only if the fence held, and whether dependents wait.
SUCCEED_SQL = f"""
WITH finished AS (
    UPDATE workers_operation
    SET status = 'succeeded', lease_owner = '', lease_expires_at = NULL, result = %(result)s::jsonb,
        finished_at = statement_timestamp(), updated_at = statement_timestamp(),
        last_error_kind = '', last_error_message = '', needs_operator = false
    WHERE {FENCE_SQL}
    RETURNING id
),
closed AS (
    UPDATE workers_attempt
    SET usage = %(usage)s::jsonb, finished_at = statement_timestamp(), outcome = 'succeeded',
        error_kind = '', error_message = '', http_status = NULL, duration_ms = %(duration_ms)s
    WHERE id = %(attempt_id)s AND EXISTS (SELECT 1 FROM finished)
)
SELECT EXISTS (SELECT 1 FROM finished),
       EXISTS (SELECT 1 FROM workers_dependency d JOIN finished ON d.prerequisite_id = finished.id)
"""  # noqa: S608 -- composed of this module's constants


def _fence_params(claimed: ClaimedOperation) -> dict[str, Any]:
    return {"id": claimed.operation_id, "owner": claimed.worker_id, "token": claimed.fencing_token}


def renew_lease(claimed: ClaimedOperation) -> None:
    """Extend the lease before a step that could outlive it; raises LeaseLost if it is gone."""
    with execute_prepared(RENEW_SQL, {**_fence_params(claimed), "lease": settings.GALLEY_LEASE_SECONDS}) as cursor:
        if cursor.rowcount == 0:
            raise LeaseLost(claimed.key)


def _end_attempt(
    claimed: ClaimedOperation,
    *,
    status: str,
    outcome: str,
    started: float,
    failure: OperationFailed | None = None,
    usage: dict[str, int] | None = None,
    **fields: Any,
) -> None:
    """Move the operation out of running (fenced, releasing the lease) and close this attempt's row."""
    fenced_update(claimed, status=status, lease_owner="", lease_expires_at=None, **fields)
    Attempt.objects.filter(id=claimed.attempt_id).update(
        usage=usage or (failure.usage if failure else {}),
        finished_at=Now(),
        outcome=outcome,
        error_kind=str(failure.kind) if failure else "",
        error_message=failure.message[:2000] if failure else "",
        http_status=failure.http_status if failure else None,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def complete_operation(claimed: ClaimedOperation, success: Success, *, started: float) -> None:
    """Record what the handler observed, then run the domain's finalize write and mark the
    operation succeeded, in one transaction, fenced.

    The observed result commits first, on its own and fenced (RECORD_RESULT_SQL), so a worker
    that already lost its lease runs none of the finalize. A lock held longer than the lock bound
    (GALLEY_LOCK_TIMEOUT_SECONDS: a brief another session holds) rolls the finalize back; the worker
    renews its lease and runs it again: a wait, never a failed attempt, for as long as the lease
    is still its own. Raises LeaseLost.
    """
    params = {**_fence_params(claimed), "result": json.dumps(success.result)}
    recorded = False
    waiting_since = time.monotonic()
    while True:
        try:
            if not recorded:
                with execute_prepared(RECORD_RESULT_SQL, params) as cursor:
                    if cursor.rowcount == 0:
                        raise LeaseLost(claimed.key)
                recorded = True
                # A handler that used half the lease (slow calls) renews it before the finalize may
                # wait up to the lock bound for its first lock.
                if time.monotonic() - started > settings.GALLEY_LEASE_SECONDS / 2:
                    renew_lease(claimed)
            _finalize(claimed, success, started=started)
            return
        except OperationalError as error:
            if not is_lock_timeout(error):
                raise
        logger.warning(
            "finalize waited %.1f s for a lock another session holds; waiting again",
            time.monotonic() - waiting_since,
            extra=claimed.log_extra(),
        )
        try:
            renew_lease(claimed)
        except OperationalError as error:
            if not is_lock_timeout(error):
                raise


def _finalize(claimed: ClaimedOperation, success: Success, *, started: float) -> None:
    """The domain's finalize and the fenced success, in one transaction.

    Lock order (README, "Lock order"): the finalize takes the domain's locks first (a publish or
    verify locks its brief), and the fenced update locks this operation's row last, so a worker
    never holds its operation while it waits for a brief. A worker that loses its lease meanwhile
    fails the fenced update, which rolls the finalize back.
    """
    with transaction.atomic(durable=True):
        if success.finalize is not None:
            success.finalize()
        # The domain's locks (a publish's brief) are held here: tests freeze or kill a worker at this line.
        crash_point("in_finalize", kind=claimed.kind)
        params = {
            **_fence_params(claimed),
            "result": json.dumps(success.result),
            "usage": json.dumps(success.usage),
            "attempt_id": claimed.attempt_id,
            "duration_ms": int((time.monotonic() - started) * 1000),
        }
        with execute_prepared(SUCCEED_SQL, params) as cursor:
            succeeded, has_dependents = cursor.fetchone()  # type: ignore[misc]
        if not succeeded:
            raise LeaseLost(claimed.key)
        if has_dependents:
            # They may be claimable now (a ring the finalize already made covers them).
            ring_doorbell()


def fail_operation(claimed: ClaimedOperation, failure: OperationFailed, *, started: float) -> Decision:
    """Apply the retry policy to a failed attempt, fenced. Returns what was decided."""
    decision = decide(failure.kind, attempt=claimed.attempt_number, retry_after=failure.retry_after)
    with transaction.atomic(durable=True):
        # The retry's time is compared with the deadline on the database clock, as both are set.
        operation = (
            Operation.objects.only("attempts", "waits", "max_attempts", "deadline")
            .annotate(database_now=Now())
            .get(id=claimed.operation_id)
        )
        # A wait is not counted; this attempt, if it failed, is (attempts includes it, waits not yet).
        waiting = failure.kind in WAIT_KINDS
        counted = operation.attempts - operation.waits
        message = failure.message[:2000]
        if decision.disposition == Disposition.RETRY:
            retry_at = operation.database_now + datetime.timedelta(seconds=decision.delay_seconds)
            if not waiting and counted >= operation.max_attempts:
                decision = Decision(Disposition.DEAD, needs_operator=True)
                message = f"attempts exhausted ({counted} of {operation.max_attempts}); last: {message}"
            elif retry_at >= operation.deadline:
                decision = Decision(Disposition.DEAD, needs_operator=True)
                message = f"deadline {operation.deadline:%Y-%m-%d %H:%M:%S} would pass; last: {message}"
        fields: dict[str, Any] = {
            "last_error_kind": str(failure.kind),
            "last_error_message": message,
            "needs_operator": decision.needs_operator,
        }
        if waiting:
            fields["waits"] = F("waits") + 1
        if decision.disposition == Disposition.RETRY:
            fields.update(status=S.RETRY_WAIT, outcome=Attempt.Outcome.RETRY)
            fields.update(next_attempt_at=db_now_plus(decision.delay_seconds))
        elif decision.disposition == Disposition.CONFLICT:
            fields.update(status=S.CONFLICT, outcome=Attempt.Outcome.CONFLICT, finished_at=Now())
        else:
            fields.update(status=S.DEAD, outcome=Attempt.Outcome.DEAD, finished_at=Now())
        _end_attempt(claimed, started=started, failure=failure, **fields)
        if decision.disposition == Disposition.CONFLICT:
            Conflict.objects.create(
                operation_id=claimed.operation_id,
                source=Conflict.Source.TARGET,
                kind=str(failure.kind),
                existing_payload_hash=claimed.payload_hash,
                conflicting_payload_hash=failure.conflicting_payload_hash,
                target_state=failure.target_state,
                detail=message,
            )
            record_audit_event(
                acting_user=None,
                event_type=f"operation.{failure.kind}",
                subject_type="operation",
                subject_id=claimed.key,
                old_state={"status": S.RUNNING},
                new_state={"status": S.CONFLICT, "detail": message, "target_state": failure.target_state},
            )
        if decision.needs_operator:
            operator_needed(
                OperatorNeeded(
                    operation_id=claimed.operation_id,
                    kind=claimed.kind,
                    subject_type=claimed.subject_type,
                    subject_id=claimed.subject_id,
                    arguments=claimed.arguments,
                    status=str(fields["status"]),
                    message=message,
                )
            )
        # A retry is due later (a waiting worker reads when); an operation that ended for good may
        # release dependents that only needed it finished.
        ring_doorbell()
    return decision


def supersede_running_operation(claimed: ClaimedOperation, reason: str, *, started: float) -> None:
    """The handler found its intent obsolete before any effect: finish as superseded, fenced."""
    with transaction.atomic(durable=True):
        _end_attempt(
            claimed,
            status=S.SUPERSEDED,
            outcome=Attempt.Outcome.SUPERSEDED,
            started=started,
            finished_at=Now(),
            last_error_kind="superseded",
            last_error_message=reason[:2000],
        )
        ring_doorbell()


def record_lease_lost(claimed: ClaimedOperation, *, started: float) -> None:
    """The worker's only write after losing its lease: its own attempt row, for diagnosis."""
    Attempt.objects.filter(id=claimed.attempt_id).update(
        finished_at=Now(),
        outcome=Attempt.Outcome.LEASE_LOST,
        error_kind="lease_lost",
        error_message="another worker took the operation over; this worker wrote nothing",
        duration_ms=int((time.monotonic() - started) * 1000),
    )
