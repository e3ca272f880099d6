"""The doorbell: after a commit that made work due, wake the workers.

A ring is a PostgreSQL NOTIFY on one channel (workers.sql.CHANNEL), issued inside the transaction
that wrote the work: PostgreSQL delivers it at COMMIT and drops it on rollback, so a ring never
announces work that is not there, and costs no queue row. Every worker process LISTENs (`Listener`)
and claims when woken.

A ring carries no state (the operation rows are the record of intent), so a lost, duplicated or
late ring is harmless: a worker also looks for due work when its idle wait times out, and the
sweep schedule rings again every few seconds (`ring_cluster`, through django-q2, reaches a cluster
process even if its listener is gone).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.db import connection, connections, transaction
from django_q.tasks import async_task

from workers.sql import LISTEN_SQL, RING_SQL

logger = logging.getLogger(__name__)

DRAIN_TASK = "workers.tasks.drain_operations"


_thread = threading.local()


@contextlib.contextmanager
def claiming_next() -> Iterator[None]:
    """While a worker thread runs an operation after which it claims again at once: rings are left
    out, since that claim takes the continuation the operation writes (continuations come first in
    the claim order, and a retry is due later). Waking every other worker for it would only have
    them claim nothing. If the thread stops instead, its poll or the sweep finds the work."""
    _thread.claiming_next = True
    try:
        yield
    finally:
        _thread.claiming_next = False


def rings() -> bool:
    """Whether a write that makes work due should ring now (see claiming_next)."""
    return not getattr(_thread, "claiming_next", False)


def ring_doorbell() -> None:
    """Ring when the current transaction commits (at once in autocommit); once per transaction."""
    if not rings() or _rung_in_this_transaction():
        return
    with connection.cursor() as cursor:
        cursor.execute(RING_SQL)
    rang_in_statement()


def rang_in_statement() -> None:
    """The statement just executed selected workers.sql.NOTIFY_SQL: later rings in this transaction
    are no-ops.

    The mark is an on-commit callback that does nothing, so it goes with a rolled-back savepoint,
    as the NOTIFY does."""
    if connection.in_atomic_block and not _rung_in_this_transaction():
        transaction.on_commit(_rung, robust=True)


def ring_cluster() -> None:
    """Ask django-q2 for a drain task when the current transaction commits: the sweep's safety net,
    which reaches a cluster process even when its listener is gone (a drain task restarts it)."""
    transaction.on_commit(_enqueue_drain, robust=True)


def _rung() -> None:
    """The mark of a transaction that has rung (see rang_in_statement)."""


def _rung_in_this_transaction() -> bool:
    # run_on_commit holds (savepoint ids, callable, robust).
    return connection.in_atomic_block and any(entry[1] is _rung for entry in connection.run_on_commit)


def _enqueue_drain() -> None:
    async_task(DRAIN_TASK, task_name="galley-drain", save=False)


class Listener(threading.Thread):
    """LISTENs on the doorbell's channel on a connection of its own, and calls `wake` for each ring.

    It also calls `wake` after every (re)connection, since rings sent while it was not listening
    are lost. If the database goes away it reconnects with backoff (`reconnect_delay(failures)`),
    logging the outage once. Stops within `check_seconds` of `stop()`.
    """

    def __init__(
        self,
        wake: Callable[[], None],
        *,
        reconnect_delay: Callable[[int], float],
        check_seconds: float = 0.5,
        alias: str = "default",
    ) -> None:
        super().__init__(name="galley-doorbell", daemon=True)
        self._wake = wake
        self._reconnect_delay = reconnect_delay
        self._check_seconds = check_seconds
        self._alias = alias
        self._stopping = threading.Event()
        self.listening = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(LISTEN_SQL)
                    failures = 0
                    self.listening.set()
                    self._wake()
                    while not self._stopping.is_set():
                        for _notify in conn.notifies(timeout=self._check_seconds):
                            self._wake()
            except psycopg.Error as problem:
                self.listening.clear()
                failures += 1
                if failures == 1:
                    logger.warning("doorbell listener lost the database: %s", " ".join(str(problem).split()))
                self._stopping.wait(self._reconnect_delay(failures))
        self.listening.clear()

    def _connect(self) -> psycopg.Connection[Any]:
        # Django's connection parameters, but not Django's connection: this one stays in autocommit
        # and outlives every transaction of the thread that would own it.
        params = connections[self._alias].get_connection_params()
        return psycopg.connect(**params, autocommit=True)
