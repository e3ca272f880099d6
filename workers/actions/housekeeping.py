"""Housekeeping: the reconciler of expired leases (invariant 12) and the retention purge (invariant 11)."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from workers.doorbell import ring_doorbell
from workers.models import FINISHED_STATUSES, Attempt, OperationStatus
from workers.registry import OperatorNeeded, operator_needed

# What operator_needed is told of an operation that became a dead letter here.
NEEDED_COLUMNS = "o.id, o.kind, o.subject_type, o.subject_id, o.arguments, o.status, o.last_error_message"


def _needed(row: tuple[Any, ...]) -> OperatorNeeded:
    arguments = json.loads(row[4]) if isinstance(row[4], str) else row[4] or {}
    return OperatorNeeded(
        operation_id=row[0],
        kind=row[1],
        subject_type=row[2],
        subject_id=row[3],
        arguments=arguments,
        status=row[5],
        message=row[6],
    )


@transaction.atomic(durable=True)
def reconcile_expired_leases() -> dict[str, int]:
    """Make operations whose lease expired claimable again, with a new fencing token.

    The next attempt is ambiguous (the dead worker may have had its effect), so handlers look
    the key up before acting. Operations out of attempts or past their deadline become dead
    letters for an operator instead of waiting forever. A lease that ran out after its attempt
    recorded what it observed (`result`: the target applied it) was no failure: it is counted as
    a wait, so a frozen finalize never spends the budget (claims.CLAIM_SQL does the same).
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH expired AS (
                SELECT id,
                       (result IS NULL AND attempts - waits >= max_attempts
                        OR deadline <= statement_timestamp()) AS spent,
                       (result IS NOT NULL)::int AS observed
                FROM workers_operation
                WHERE status = 'running' AND lease_expires_at < statement_timestamp()
                FOR UPDATE SKIP LOCKED
            )
            UPDATE workers_operation o
            SET status = CASE WHEN expired.spent THEN 'dead' ELSE 'retry_wait' END,
                finished_at = CASE WHEN expired.spent THEN statement_timestamp() END,
                needs_operator = expired.spent,
                waits = o.waits + expired.observed,
                last_error_kind = 'lease_expired',
                last_error_message = 'lease of ' || o.lease_owner || ' expired before an outcome',
                lease_owner = '',
                lease_expires_at = NULL,
                fencing_token = o.fencing_token + 1,
                next_attempt_at = statement_timestamp(),
                updated_at = statement_timestamp()
            FROM expired
            WHERE o.id = expired.id
            RETURNING {NEEDED_COLUMNS}, o.needs_operator
            """  # noqa: S608 -- composed of this module's constants
        )
        rows = cursor.fetchall()
        expired = [row[5] for row in rows]
        # The dead worker's attempt never recorded an outcome; close it for the record.
        Attempt.objects.filter(operation_id__in=[row[0] for row in rows], finished_at__isnull=True).update(
            finished_at=Now(), error_kind="lease_expired", error_message="the worker stopped before an outcome"
        )
        spent = [row for row in rows if row[7]]
        cursor.execute(
            f"""
            UPDATE workers_operation o
            SET status = 'dead',
                finished_at = statement_timestamp(),
                updated_at = statement_timestamp(),
                needs_operator = true,
                last_error_message = CASE
                    WHEN attempts - waits >= max_attempts
                    THEN 'attempts exhausted (' || attempts - waits || ' of ' || max_attempts || '); last: '
                         || last_error_message
                    ELSE 'deadline passed; last: ' || last_error_message END
            WHERE status IN ('pending', 'retry_wait')
              AND (attempts - waits >= max_attempts OR deadline <= statement_timestamp())
            RETURNING {NEEDED_COLUMNS}
            """  # noqa: S608 -- composed of this module's constants
        )
        exhausted = cursor.fetchall()
    for row in [*spent, *exhausted]:
        operator_needed(_needed(row))
    if expired:
        ring_doorbell()
    return {
        "expired_leases": len(expired),
        "dead": len(exhausted) + sum(1 for status in expired if status == OperationStatus.DEAD),
    }


@transaction.atomic(durable=True)
def purge_finished_operations(*, older_than_days: int | None = None) -> int:
    """Delete finished operations, with their attempts and dependency edges, older than the
    retention period (invariant 11).

    Never touches an unfinished operation, one an unfinished operation depends on, or one
    with a key conflict (kept for the operators' record).
    """
    days = settings.GALLEY_RETENTION_DAYS if older_than_days is None else older_than_days
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH purged AS (
                SELECT o.id
                FROM workers_operation o
                WHERE o.status = ANY(%s)
                  AND o.finished_at < statement_timestamp() - make_interval(days => %s)
                  AND NOT EXISTS (SELECT 1 FROM workers_conflict c WHERE c.operation_id = o.id)
                  AND NOT EXISTS (
                      SELECT 1 FROM workers_dependency d JOIN workers_operation u ON u.id = d.operation_id
                      WHERE d.prerequisite_id = o.id AND u.status IN ('pending', 'running', 'retry_wait'))
                FOR UPDATE OF o SKIP LOCKED
            ),
            attempts AS (DELETE FROM workers_attempt a USING purged WHERE a.operation_id = purged.id),
            edges AS (
                DELETE FROM workers_dependency d USING purged
                WHERE d.operation_id = purged.id OR d.prerequisite_id = purged.id
            )
            DELETE FROM workers_operation o USING purged WHERE o.id = purged.id
            """,
            [list(FINISHED_STATUSES), days],
        )
        return cursor.rowcount
