"""Recording intents: operations, their durable prerequisites, and superseding one not yet claimed."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from workers.audit import record_audit_event
from workers.doorbell import ring_doorbell
from workers.models import Conflict, Dependency, Operation, OperationStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Enqueued:
    operation: Operation
    created: bool
    conflict: Conflict | None = None


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
    hash nothing is enqueued: a Conflict is recorded and audited, in the caller's
    transaction, and returned for the caller to report — never as a success. `after` adds
    durable prerequisites as (operation, Dependency.Requires). Rings the doorbell on commit.
    """
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO workers_operation
                (key, kind, payload_hash, subject_type, subject_id, arguments, status, attempts, waits,
                 max_attempts, next_attempt_at, deadline, lease_owner, fencing_token, last_error_kind,
                 last_error_message, needs_operator, created_at, updated_at)
            VALUES (%s, %s, %s, %s, %s, %s::jsonb, 'pending', 0, 0, %s, statement_timestamp(),
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
        conflict = Conflict.objects.create(
            operation=operation,
            source=Conflict.Source.ENQUEUE,
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


@transaction.atomic(savepoint=False)
def supersede_waiting_operation(operation: Operation, *, reason: str) -> bool:
    """Supersede an operation that has not been claimed yet (no attempt can have had an effect).

    Guarded on status pending with zero attempts, so it never races a worker. Returns whether
    it was superseded.
    """
    updated = Operation.objects.filter(id=operation.id, status=OperationStatus.PENDING, attempts=0).update(
        status=OperationStatus.SUPERSEDED,
        finished_at=Now(),
        updated_at=Now(),
        last_error_kind="superseded",
        last_error_message=reason[:2000],
    )
    return updated == 1
