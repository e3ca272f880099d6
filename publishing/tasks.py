"""django-q2 tasks of the publishing app, named by dotted path in workers.schedules (which may
not import a domain app). Each is a thin call of an action, safe to run twice or concurrently."""

from __future__ import annotations

from publishing.actions.idempotency import purge_idempotency_records
from workers.runner import DATABASE_UNAVAILABLE, drop_broken_connections


def purge_idempotency_keys() -> int:
    """Retention of the API's Idempotency-Key records (GALLEY_RETENTION_DAYS); returns how many went.

    As workers.tasks.purge does, a database outage is logged and the task returns: nothing is
    lost, the next hour's run deletes what this one did not.
    """
    try:
        return purge_idempotency_records()
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, "purging idempotency records")
        return 0
