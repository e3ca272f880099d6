"""The doorbell: after a commit that made work due, ask django-q2 to drain operations.

A doorbell carries no state (the operation rows are the record of intent), so a lost,
duplicated or late ring is harmless: the sweep schedule rings again every few seconds.
"""

from __future__ import annotations

import logging

from django.db import connection, transaction
from django_q.tasks import async_task

logger = logging.getLogger(__name__)

DRAIN_TASK = "workers.tasks.drain_operations"


def ring_doorbell() -> None:
    """Ring once when the current transaction commits (at once in autocommit)."""
    # One ring per transaction is enough; run_on_commit holds (savepoint ids, callable, robust).
    if any(entry[1] is _ring for entry in connection.run_on_commit):
        return
    transaction.on_commit(_ring, robust=True)


def _ring() -> None:
    async_task(DRAIN_TASK, task_name="galley-drain", save=False)
