"""The doorbell: after a commit that made work due, wake the workers.

A ring is a PostgreSQL NOTIFY on one channel (workers.sql.CHANNEL), issued inside the transaction
that wrote the work: PostgreSQL delivers it at COMMIT and drops it on rollback, so a ring never
announces work that is not there, and costs no queue row. Every worker process LISTENs (`Listener`)
and claims when woken.

A ring carries no state (the operation rows are the record of intent), so a lost, duplicated or
late ring is harmless: a worker also looks for due work when its idle wait times out, and the
sweep schedule rings again every few seconds (`ring_cluster`, through django-q2, reaches a cluster
process even if its listener is gone).

A LISTEN can also be deaf without an error: through a pooler that hands each transaction to any
server connection (PgBouncer's pool_mode=transaction) it stays behind on a server connection the
listener no longer holds, and rings never reach it. So after each LISTEN the listener rings itself
from another connection (a probe); until the probe arrives, and for good if it does not, the
worker's waits are short polls (workers.drain.Wakeup), and it says so once.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, connections, transaction
from django_q.tasks import async_task

from workers.sql import LISTEN_SQL, PROBE_PAYLOAD_PREFIX, PROBE_SQL, RING_SQL, UNLISTEN_SQL

logger = logging.getLogger(__name__)

DRAIN_TASK = "workers.tasks.drain_operations"
# How long a listener waits for its own probe ring. PostgreSQL delivers a NOTIFY at its COMMIT, in
# milliseconds; the bound is for a loaded machine, and the worker polls meanwhile.
PROBE_SECONDS = 10.0


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
    are lost. After each LISTEN it rings itself from another connection and waits for that ring at
    most `probe_seconds`; `heard(True)` once it arrived, `heard(False)` whenever the connection is
    lost. If the probe does not arrive, the LISTEN is deaf (a transaction-pooling PgBouncer): it
    says so once, at WARNING, UNLISTENs and stops, and `deaf` is set. If the database goes away it
    reconnects with backoff (`reconnect_delay(failures)`), logging the outage once. Stops within
    `check_seconds` of `stop()`.
    """

    def __init__(
        self,
        wake: Callable[[], None],
        *,
        reconnect_delay: Callable[[int], float],
        heard: Callable[[bool], None] = lambda _heard: None,
        check_seconds: float = 0.5,
        probe_seconds: float = PROBE_SECONDS,
        alias: str = "default",
    ) -> None:
        super().__init__(name="galley-doorbell", daemon=True)
        self._wake = wake
        self._heard = heard
        self._reconnect_delay = reconnect_delay
        self._check_seconds = check_seconds
        self._probe_seconds = probe_seconds
        self._alias = alias
        self._stopping = threading.Event()
        self.listening = threading.Event()
        self.deaf = threading.Event()
        self.heard_once = threading.Event()

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
                    if not self._probe(conn):
                        if not self._stopping.is_set():
                            self._give_up(conn)
                        break
                    if not self.heard_once.is_set():
                        self.heard_once.set()
                        logger.info("the doorbell is heard: its probe ring arrived after LISTEN")
                    self._heard(True)
                    while not self._stopping.is_set():
                        self._deliver(conn.notifies(timeout=self._check_seconds))
            except psycopg.Error as problem:
                self.listening.clear()
                self._heard(False)
                failures += 1
                if failures == 1:
                    logger.warning("doorbell listener lost the database: %s", " ".join(str(problem).split()))
                self._stopping.wait(self._reconnect_delay(failures))
        self.listening.clear()

    def _probe(self, conn: psycopg.Connection[Any]) -> bool:
        """Ring this listener alone from another connection; whether the ring reached `conn` within
        the bound (or before a stop). Rings that arrive meanwhile wake as usual."""
        payload = f"{PROBE_PAYLOAD_PREFIX}{secrets.token_hex(8)}"
        with self._connect() as other:
            other.execute(PROBE_SQL, {"payload": payload}, prepare=False)
        deadline = time.monotonic() + self._probe_seconds
        while not self._stopping.is_set() and (remaining := deadline - time.monotonic()) > 0:
            if payload in self._deliver(conn.notifies(timeout=min(remaining, self._check_seconds))):
                return True
        return False

    def _deliver(self, notifies: Iterator[psycopg.Notify]) -> set[str]:
        """Wake for each ring (a probe is not one); returns the payloads received."""
        payloads = set()
        for notify in notifies:
            payloads.add(notify.payload)
            if not notify.payload.startswith(PROBE_PAYLOAD_PREFIX):
                self._wake()
        return payloads

    def _give_up(self, conn: psycopg.Connection[Any]) -> None:
        self.listening.clear()
        self.deaf.set()
        self._heard(False)
        logger.warning(
            "the doorbell is not heard: a NOTIFY sent after this worker's LISTEN did not arrive within %.0f s, "
            "as through a pooler in transaction mode (PgBouncer pool_mode=transaction). This worker looks for "
            "due work every %s s instead. Connect workers directly or through session pooling, or set "
            "GALLEY_WAKEUP=poll to poll without this check (docs/operations.md#pgbouncer).",
            self._probe_seconds,
            f"{settings.GALLEY_WAKEUP_POLL_SECONDS:g}",
        )
        # The LISTEN would stay behind on whichever server connection the pooler gave it. Said and
        # given up already: an error here changes nothing.
        with contextlib.suppress(psycopg.Error):
            conn.execute(UNLISTEN_SQL)

    def _connect(self) -> psycopg.Connection[Any]:
        # Django's connection parameters, but not Django's connection: this one stays in autocommit
        # and outlives every transaction of the thread that would own it.
        params = connections[self._alias].get_connection_params()
        return psycopg.connect(**params, autocommit=True)
