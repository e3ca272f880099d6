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
from workers.doorbell import NOTIFY_SQL, rang_in_statement, rings
from workers.models import Conflict, Operation, OperationStatus
from workers.prepared import execute_prepared

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Enqueued:
    operation: Operation
    created: bool
    conflict: Conflict | None = None


# The intent, its durable prerequisites and the doorbell's ring, in one statement. A continuation
# takes its prerequisites' place in the queue (the earliest time one of them was due; database
# clock), so that the next steps of jobs under way are claimed before a backlog of newer first
# steps: a verification never waits behind every publish approved after its own.
ENQUEUE_SQL = f"""
WITH inserted AS (
    INSERT INTO workers_operation
        (key, kind, payload_hash, subject_type, subject_id, subject_version, arguments, status, attempts, waits,
         max_attempts, next_attempt_at, deadline, lease_owner, fencing_token, last_error_kind,
         last_error_message, needs_operator, created_at, updated_at)
    VALUES (%(key)s, %(kind)s, %(payload_hash)s, %(subject_type)s, %(subject_id)s, %(subject_version)s::integer,
            %(arguments)s::jsonb,
            'pending', 0, 0, %(max_attempts)s,
            LEAST(statement_timestamp(),
                  (SELECT min(p.next_attempt_at) FROM workers_operation p
                   WHERE p.id = ANY(%(prerequisites)s::bigint[]))),
            statement_timestamp() + make_interval(secs => %(deadline_seconds)s), '', 0, '', '', false,
            %(now)s, %(now)s)
    ON CONFLICT (key) DO NOTHING
    RETURNING id, next_attempt_at, deadline
),
edges AS (
    INSERT INTO workers_dependency (operation_id, prerequisite_id, requires)
    SELECT inserted.id, edge.prerequisite_id, edge.requires
    FROM inserted, unnest(%(prerequisites)s::bigint[], %(requires)s::text[]) AS edge(prerequisite_id, requires)
)
SELECT id, next_attempt_at, deadline, {NOTIFY_SQL} FROM inserted
"""  # noqa: S608 -- composed of constants; every value is a parameter


@transaction.atomic(savepoint=False)
def enqueue_operation(
    *,
    key: str,
    kind: str,
    payload_hash: str,
    subject_type: str,
    subject_id: str,
    subject_version: int | None = None,
    arguments: dict[str, Any] | None = None,
    after: Iterable[tuple[Operation | int, str]] = (),
    max_attempts: int | None = None,
) -> Enqueued:
    """Record the intent `key` in the caller's transaction, idempotently (invariants 1, 2, 5).

    Canonical-first: insert, or read the operation that already holds the key. The same key
    with the same payload hash returns the existing operation (created False). With another
    hash nothing is enqueued: a Conflict is recorded and audited, in the caller's
    transaction, and returned for the caller to report — never as a success. `subject_version`
    is the version of the subject acted on (a brief's revision number), which the readers of a
    subject's older or newer operations compare. `after` adds durable prerequisites as
    (operation or its id, Dependency.Requires). Rings the doorbell on commit.
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
        "arguments": arguments or {},
        "max_attempts": max_attempts or settings.GALLEY_MAX_ATTEMPTS,
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
    with execute_prepared(ENQUEUE_SQL, params) as cursor:
        row = cursor.fetchone()
    if row is not None:
        if rings():
            rang_in_statement()
        operation_id, next_attempt_at, deadline = row[:3]
        # Everything else is what was just inserted: no second round trip to read it back.
        operation = Operation(
            id=operation_id,
            **fields,
            status=OperationStatus.PENDING,
            next_attempt_at=next_attempt_at,
            deadline=deadline,
            created_at=now,
            updated_at=now,
        )
        operation._state.adding = False
        operation._state.db = connection.alias
        return Enqueued(operation, created=True)
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
    """A durable happens-before edge (invariant 7); idempotent."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workers_dependency (operation_id, prerequisite_id, requires) VALUES (%s, %s, %s)"
            " ON CONFLICT (operation_id, prerequisite_id) DO NOTHING",
            [operation.id, prerequisite.id, str(requires)],
        )


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
