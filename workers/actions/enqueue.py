"""Recording intents: operations, their durable prerequisites, and superseding one not yet claimed."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone
from psycopg.rows import dict_row

from workers.audit import record_audit_event
from workers.doorbell import rang_in_statement, rings
from workers.models import Conflict, Operation, OperationStatus
from workers.prepared import execute_prepared, inserted
from workers.sql import ADD_DEPENDENCY_SQL, ENQUEUE_SQL

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
    subject_version: int | None = None,
    channel: str = "",
    arguments: dict[str, Any] | None = None,
    after: Iterable[tuple[Operation | int, str]] = (),
    max_attempts: int | None = None,
    scheduled_for: datetime | None = None,
) -> Enqueued:
    """Record the intent `key` in the caller's transaction, idempotently (docs/invariants.md#i1, #i2, #i5).

    Canonical-first: insert, or read the operation that already holds the key. The same key
    with the same payload hash returns the existing operation (created False). With another
    hash nothing is enqueued: a Conflict is recorded and audited, in the caller's
    transaction, and returned for the caller to report — never as a success. `subject_version`
    is the version of the subject acted on (a brief's revision number), which the readers of a
    subject's older or newer operations compare; `channel` the destination it acts on. `after`
    adds durable prerequisites as (operation or its id, Dependency.Requires). `scheduled_for` (aware) is the
    time T before which no worker claims it, by the database clock (docs/invariants.md#i15); its deadline
    runs from T. Rings the doorbell on commit.
    """
    now = timezone.now()
    edges = list(after)
    fields: dict[str, Any] = {
        "key": key,
        "kind": kind,
        "payload_hash": payload_hash,
        "subject_type": subject_type,
        "subject_id": subject_id,
        "subject_version": subject_version,
        "channel": channel,
        "arguments": arguments or {},
        "max_attempts": max_attempts or settings.GALLEY_MAX_ATTEMPTS,
        "scheduled_for": scheduled_for,
    }
    params = {
        **fields,
        "arguments": json.dumps(fields["arguments"], sort_keys=True),
        "deadline_seconds": settings.GALLEY_OPERATION_DEADLINE_SECONDS,
        "now": now,
        "ring": rings(),
        "prerequisites": [
            prerequisite if isinstance(prerequisite, int) else prerequisite.id for prerequisite, _ in edges
        ],
        "requires": [str(requires) for _prerequisite, requires in edges],
    }
    with execute_prepared(ENQUEUE_SQL, params, row_factory=dict_row) as cursor:
        row = cursor.fetchone()
    if row is not None:
        if rings():
            rang_in_statement()
        # Everything else is what was just inserted, or the model's default as ENQUEUE_SQL wrote it.
        operation = Operation(
            id=row["id"],
            **fields,
            next_attempt_at=row["next_attempt_at"],
            deadline=row["deadline"],
            created_at=now,
            updated_at=now,
        )
        return Enqueued(inserted(operation), created=True)
    operation = Operation.objects.get(key=key)
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


def add_dependency(operation: Operation, *, prerequisite: Operation, requires: str) -> None:
    """A durable happens-before edge (docs/invariants.md#i7); idempotent."""
    params = {"operation_id": operation.id, "prerequisite_id": prerequisite.id, "requires": str(requires)}
    execute_prepared(ADD_DEPENDENCY_SQL, params).close()


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
