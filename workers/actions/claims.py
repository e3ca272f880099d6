"""Claims and the fenced transitions of a claimed operation (docs/invariants.md#i8).

A claim is one statement (`FOR UPDATE SKIP LOCKED` + `UPDATE … RETURNING`, with the attempt row).
Every write a worker makes after it names operation id, lease owner and fencing token
(workers.sql.FENCE_SQL, `fenced_update`; docs/architecture.md#fencing): zero rows updated means the lease was lost,
and the worker raises LeaseLost and writes nothing else but its own attempt row
(`record_lease_lost`). The hot path is raw SQL (workers.sql) in as few round trips as the
invariants allow: the claim one statement, a success one statement after the domain's finalize,
in one transaction with it.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Value
from django.db.models.functions import Now
from psycopg.rows import dict_row

from workers.actions.gates import pause_channel
from workers.audit import record_audit_event
from workers.crashpoints import crash_point
from workers.doorbell import ring_doorbell
from workers.errors import AMBIGUOUS_KINDS, FailureKind, LeaseLost, OperationFailed, is_lock_timeout
from workers.models import Attempt, Conflict, Operation, OperationStatus
from workers.policy import WAIT_KINDS, Decision, Disposition, decide
from workers.prepared import execute_prepared, json_value
from workers.registry import ClaimedOperation, OperatorNeeded, Success, operator_needed
from workers.sql import (
    CLAIM_SQL,
    FENCE_STATUS,
    RECORD_RESULT_SQL,
    RELEASED_LEASE,
    RENEW_SQL,
    SUCCEED_SQL,
)

S = OperationStatus
logger = logging.getLogger(__name__)


def db_now_plus(seconds: float) -> ExpressionWrapper:
    """statement_timestamp() + seconds, on the database clock."""
    return ExpressionWrapper(Now() + Value(datetime.timedelta(seconds=seconds)), output_field=DateTimeField())


@dataclass(frozen=True)
class Claims:
    """What one claim statement took, and whether another operation was claimable at that moment."""

    operations: list[ClaimedOperation]
    more_due: bool


def claim_operations(*, worker_id: str, limit: int, kinds: list[str] | None = None) -> list[ClaimedOperation]:
    """Claim up to `limit` due operations whose prerequisites are met, in one statement.

    See claim_due; this returns the claimed operations only."""
    return claim_due(worker_id=worker_id, limit=limit, kinds=kinds).operations


def claim_due(
    *, worker_id: str, limit: int, kinds: list[str] | None = None, busy_channels: Collection[str] = ()
) -> Claims:
    """Claim up to `limit` due operations whose prerequisites are met, none of `busy_channels`, in one
    statement.

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
        "busy_channels": sorted(busy_channels),
    }
    with execute_prepared(CLAIM_SQL, params, row_factory=dict_row) as cursor:
        rows = cursor.fetchall()
    if not rows:
        return Claims([], more_due=False)
    return Claims([_claimed(row, worker_id=worker_id) for row in rows], more_due=rows[0]["more_due"])


def _claimed(row: dict[str, Any], *, worker_id: str) -> ClaimedOperation:
    """A row of CLAIM_SQL, whose columns are named after ClaimedOperation's fields."""
    return ClaimedOperation(
        operation_id=row["operation_id"],
        key=row["key"],
        kind=row["kind"],
        payload_hash=row["payload_hash"],
        subject_type=row["subject_type"],
        subject_id=row["subject_id"],
        subject_version=row["subject_version"],
        channel=row["channel"],
        arguments=json_value(row["arguments"]) or {},
        attempt_number=row["attempt_number"],
        fencing_token=row["fencing_token"],
        deadline=row["deadline"],
        attempt_id=str(row["attempt_id"]),
        ambiguous=row["ambiguous"],
        worker_id=worker_id,
    )


def _fence(claimed: ClaimedOperation) -> dict[str, Any]:
    """The claim's values of FENCE_COLUMNS: FENCE_SQL's parameters, and the ORM's fence with FENCE_STATUS."""
    return {"id": claimed.operation_id, "lease_owner": claimed.worker_id, "fencing_token": claimed.fencing_token}


def fenced_update(claimed: ClaimedOperation, **fields: Any) -> None:
    """The one write a worker makes to its operation after the claim: guarded by FENCE_SQL's rule (id,
    lease owner, fencing token, status running). Raises LeaseLost (nothing written) when no row matched."""
    if Operation.objects.filter(**_fence(claimed), status=FENCE_STATUS).update(updated_at=Now(), **fields) == 0:
        raise LeaseLost(claimed.key)


def renew_lease(claimed: ClaimedOperation) -> None:
    """Extend the lease before a step that could outlive it; raises LeaseLost if it is gone."""
    with execute_prepared(RENEW_SQL, {**_fence(claimed), "lease": settings.GALLEY_LEASE_SECONDS}) as cursor:
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
    fenced_update(claimed, status=status, **RELEASED_LEASE, **fields)
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
    params = {**_fence(claimed), "result": json.dumps(success.result)}
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

    Lock order (docs/architecture.md#lock-order): the finalize takes the domain's locks first (a publish or
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
            **_fence(claimed),
            "result": json.dumps(success.result),
            "usage": json.dumps(success.usage),
            "attempt_id": claimed.attempt_id,
            "duration_ms": int((time.monotonic() - started) * 1000),
        }
        with execute_prepared(SUCCEED_SQL, params, row_factory=dict_row) as cursor:
            finished = cursor.fetchone()
        if finished is None or not finished["succeeded"]:
            raise LeaseLost(claimed.key)
        if finished["has_dependents"]:
            # They may be claimable now (a ring the finalize already made covers them).
            ring_doorbell()


def fail_operation(claimed: ClaimedOperation, failure: OperationFailed, *, started: float) -> Decision:
    """Apply the retry policy to a failed attempt, fenced. Returns what was decided.

    A throttled answer with Retry-After on a channel pauses the channel for every worker, in the same
    transaction (workers.actions.gates.pause_channel). A wait (WAIT_KINDS) is never counted."""
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
        if failure.kind == FailureKind.THROTTLED and claimed.channel and failure.retry_after is not None:
            # The channel asked for a pause: every worker honours it (the claim skips the channel's
            # operations until then), rather than each operation discovering it with a request.
            pause_channel(claimed.channel, seconds=failure.retry_after, reason=message)
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
                    subject_version=claimed.subject_version,
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
