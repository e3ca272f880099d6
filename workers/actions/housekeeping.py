"""Housekeeping: the reconciler of expired leases (docs/invariants.md#i12) and the retention purge
(docs/invariants.md#i11)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from psycopg.rows import dict_row

from workers.doorbell import ring_doorbell
from workers.models import OperationStatus
from workers.prepared import execute_prepared, json_value, the_row
from workers.registry import OperatorNeeded, operator_needed
from workers.sql import EXHAUSTED_SQL, PURGE_SQL, RECONCILE_EXPIRED_SQL


def _needed(row: dict[str, Any]) -> OperatorNeeded:
    """A row of RECONCILE_EXPIRED_SQL or EXHAUSTED_SQL: what operator_needed is told."""
    return OperatorNeeded(
        operation_id=row["id"],
        kind=row["kind"],
        subject_type=row["subject_type"],
        subject_id=row["subject_id"],
        subject_version=row["subject_version"],
        arguments=json_value(row["arguments"]) or {},
        status=row["status"],
        message=row["last_error_message"],
    )


@transaction.atomic(durable=True)
def reconcile_expired_leases() -> dict[str, int]:
    """Make operations whose lease expired claimable again, with a new fencing token.

    The next attempt is ambiguous (the dead worker may have had its effect), so handlers look
    the key up before acting; the dead worker's attempt, which never recorded an outcome, is closed
    for the record. Operations out of attempts or past their deadline become dead letters for an
    operator instead of waiting forever. A lease that ran out after its attempt recorded what it
    observed (`result`: the target applied it) was no failure: it is counted as a wait, so a frozen
    finalize never spends the budget (the claim does the same).
    """
    with execute_prepared(RECONCILE_EXPIRED_SQL, {}, row_factory=dict_row) as cursor:
        expired = cursor.fetchall()
    with execute_prepared(EXHAUSTED_SQL, {}, row_factory=dict_row) as cursor:
        exhausted = cursor.fetchall()
    for row in [*(row for row in expired if row["needs_operator"]), *exhausted]:
        operator_needed(_needed(row))
    if expired:
        ring_doorbell()
    return {
        "expired_leases": len(expired),
        "dead": len(exhausted) + sum(1 for row in expired if row["status"] == OperationStatus.DEAD),
    }


# Finished operations per purge transaction: a backlog of a million (the first purge after a long
# retention, or after a burst) goes in short transactions, none of which holds the MVCC horizon back
# for long (docs/operations.md#queue-health).
PURGE_BATCH = 1000


def purge_finished_operations(*, older_than_days: int | None = None, batch: int = PURGE_BATCH) -> int:
    """Delete finished operations, with their attempts and dependency edges, older than the
    retention period (docs/invariants.md#i11); returns how many went.

    Never touches an unfinished operation, one an unfinished operation depends on, or one
    with a key conflict (kept for the operators' record). Batches of `batch` operations, each
    its own durable transaction: never call it inside one. An operation locked by someone else
    is skipped (the next hourly purge takes it).
    """
    days = settings.GALLEY_RETENTION_DAYS if older_than_days is None else older_than_days
    purged, after = 0, 0
    while True:
        count, after = _purge_batch(days=days, after=after, batch=batch)
        purged += count
        if count < batch:
            return purged


@transaction.atomic(durable=True)
def _purge_batch(*, days: int, after: int, batch: int) -> tuple[int, int]:
    """One batch of the purge: how many went, and the last id purged (the next batch reads on from it)."""
    with execute_prepared(PURGE_SQL, {"days": days, "after": after, "batch": batch}, row_factory=dict_row) as cursor:
        row = the_row(cursor)
    return row["purged"], row["last_id"] if row["last_id"] is not None else after
