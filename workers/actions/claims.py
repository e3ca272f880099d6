"""Claims and the fenced transitions of a claimed operation (invariant 8).

A claim is one statement (`FOR UPDATE SKIP LOCKED` + `UPDATE … RETURNING`). Every write a
worker makes after it goes through `fenced_update`, which names operation id, lease owner and
fencing token (STYLE.md 7): zero rows updated means the lease was lost, and the worker raises
LeaseLost and writes nothing else but its own attempt row (`record_lease_lost`).
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, QuerySet, Value
from django.db.models.functions import Now
from django.utils import timezone

from workers.audit import record_audit_event
from workers.doorbell import ring_doorbell
from workers.errors import AMBIGUOUS_KINDS, LeaseLost, OperationFailed
from workers.models import Attempt, Conflict, Operation, OperationStatus
from workers.policy import WAIT_KINDS, Decision, Disposition, decide
from workers.registry import ClaimedOperation, Success

S = OperationStatus


def db_now_plus(seconds: float) -> ExpressionWrapper:
    """statement_timestamp() + seconds, on the database clock."""
    return ExpressionWrapper(Now() + Value(datetime.timedelta(seconds=seconds)), output_field=DateTimeField())


CLAIM_SQL = """
WITH due AS (
    SELECT o.id
    FROM workers_operation o
    WHERE ((o.status IN ('pending', 'retry_wait') AND o.next_attempt_at <= statement_timestamp())
           OR (o.status = 'running' AND o.lease_expires_at < statement_timestamp()))
      AND o.attempts - o.waits < o.max_attempts
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
def claim_operations(*, worker_id: str, limit: int, kinds: list[str] | None = None) -> list[ClaimedOperation]:
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
        columns = [column.name for column in cursor.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    if not rows:
        return []
    ids = [row["id"] for row in rows]
    abandoned = set(
        Attempt.objects.filter(operation_id__in=ids, finished_at__isnull=True).values_list("operation_id", flat=True)
    )
    attempts = [
        Attempt(
            operation_id=row["id"],
            number=row["attempts"],
            worker_id=worker_id,
            fencing_token=row["fencing_token"],
            ambiguous=row["id"] in abandoned or row["last_error_kind"] in AMBIGUOUS_KINDS,
        )
        for row in rows
    ]
    claimed = [
        ClaimedOperation(
            operation_id=row["id"],
            key=row["key"],
            kind=row["kind"],
            payload_hash=row["payload_hash"],
            subject_type=row["subject_type"],
            subject_id=row["subject_id"],
            # Django loads jsonb as text and decodes it in the field; a raw cursor must too.
            arguments=json.loads(row["arguments"]) if isinstance(row["arguments"], str) else row["arguments"] or {},
            attempt_id=str(attempt.id),
            attempt_number=row["attempts"],
            fencing_token=row["fencing_token"],
            worker_id=worker_id,
            deadline=row["deadline"],
            ambiguous=attempt.ambiguous,
        )
        for row, attempt in zip(rows, attempts, strict=True)
    ]
    # An abandoned attempt (its worker died) is closed here, so that only the new one is open.
    Attempt.objects.filter(operation_id__in=abandoned, finished_at__isnull=True).update(
        finished_at=Now(), error_kind="lease_expired", error_message="the worker stopped before an outcome"
    )
    Attempt.objects.bulk_create(attempts)
    return claimed


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


def renew_lease(claimed: ClaimedOperation) -> None:
    """Extend the lease before a step that could outlive it; raises LeaseLost if it is gone."""
    fenced_update(claimed, lease_expires_at=db_now_plus(settings.GALLEY_LEASE_SECONDS))


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
    """Run the domain's finalize write and mark the operation succeeded, in one transaction, fenced.

    Lock order (README, "Lock order"): the finalize takes the domain's locks first (a publish or
    verify locks its brief), and the fenced update locks this operation's row last, so a worker
    never holds its operation while it waits for a brief. The fence is read before the finalize,
    so a worker that already lost its lease runs none of it; one that loses it meanwhile fails
    the fenced update, which rolls the finalize back. Raises LeaseLost.
    """
    with transaction.atomic(durable=True):
        if not _fenced(claimed).exists():
            raise LeaseLost(claimed.key)
        if success.finalize is not None:
            success.finalize()
        _end_attempt(
            claimed,
            status=S.SUCCEEDED,
            outcome=Attempt.Outcome.SUCCEEDED,
            started=started,
            usage=success.usage,
            result=success.result,
            finished_at=Now(),
            last_error_kind="",
            last_error_message="",
            needs_operator=False,
        )
        # Dependents may be claimable now.
        ring_doorbell()


def fail_operation(claimed: ClaimedOperation, failure: OperationFailed, *, started: float) -> Decision:
    """Apply the retry policy to a failed attempt, fenced. Returns what was decided."""
    decision = decide(failure.kind, attempt=claimed.attempt_number, retry_after=failure.retry_after)
    with transaction.atomic(durable=True):
        operation = Operation.objects.only("attempts", "waits", "max_attempts", "deadline").get(id=claimed.operation_id)
        # A wait is not counted; this attempt, if it failed, is (attempts includes it, waits not yet).
        waiting = failure.kind in WAIT_KINDS
        counted = operation.attempts - operation.waits
        message = failure.message[:2000]
        if decision.disposition == Disposition.RETRY:
            retry_at = timezone.now() + datetime.timedelta(seconds=decision.delay_seconds)
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
        if decision.disposition == Disposition.RETRY:
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
