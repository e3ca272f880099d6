"""Run calls at the same moment on separate database connections, or one per thread (Session) to interleave
them by hand; hold a row lock from another session."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.db import connection, transaction

from tests.benchmarks.bulk import insert_pending_operations
from workers.selectors import get_queue_health

# How long a Session waits for a lock, or a test for a Session, before the test fails instead of hanging.
WAIT_SECONDS = 10


def run_together(*calls: Callable[[], Any]) -> list[tuple[str, Any]]:
    """Run each call on its own thread (so its own database connection) in a durable transaction.

    Every thread connects and starts its transaction first, then all wait at a barrier and go at
    once. Returns ("ok", result) or ("error", exception) per call, in order.
    """
    barrier = threading.Barrier(len(calls))
    outcomes: list[tuple[str, Any]] = [("error", RuntimeError("thread did not finish"))] * len(calls)

    def work(index: int, call: Callable[[], Any]) -> None:
        try:
            with transaction.atomic(durable=True):
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")  # connected and inside the transaction
                barrier.wait(timeout=10)
                outcomes[index] = ("ok", call())
        except Exception as exc:
            outcomes[index] = ("error", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a concurrent call hung"
    return outcomes


def raw_connection(**overrides: Any) -> psycopg.Connection[Any]:
    """A psycopg connection to the test database of its own, outside Django (no Galley helper on it), in
    a transaction from its first statement until commit(); `overrides` replace connection parameters."""
    params = {**connection.get_connection_params(), **overrides}
    params.pop("prepare_threshold", None)
    return psycopg.connect(**params)


@contextlib.contextmanager
def brief_locked(brief: Any, *, at_most: float) -> Iterator[threading.Event]:
    """Hold `brief`'s row lock (FOR UPDATE) from a session of its own, as `psql` would (none of Galley's
    lock or idle bounds), until the block ends or `at_most` seconds have passed, whichever is first.
    Yields the event set when the lock is released (a wait that outlived the lock's holding sees it set)."""
    holder = raw_connection(options="-c idle_in_transaction_session_timeout=0")
    holder.execute("SELECT id FROM publishing_brief WHERE id = %s FOR UPDATE", [brief.id])
    released = threading.Event()
    release_lock = threading.Lock()

    def release() -> None:
        with release_lock:
            if not released.is_set():
                holder.close()  # ends its transaction: the lock is free
                released.set()

    timer = threading.Timer(at_most, release)
    timer.start()
    try:
        yield released
    finally:
        timer.cancel()
        release()


class Session(threading.Thread):
    """One call on its own thread, hence on its own database connection."""

    def __init__(self, name: str, call: Callable[[], Any]) -> None:
        super().__init__(name=name)
        self.call = call
        self.pid = 0
        self.connected = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                # A wait that is not a deadlock fails the test instead of hanging it.
                cursor.execute(f"SET lock_timeout = '{WAIT_SECONDS}s'")
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.connected.set()
            self.call()
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()

    def begin(self) -> Session:
        self.start()
        assert self.connected.wait(WAIT_SECONDS), f"{self.name} did not connect"
        return self

    def finish(self) -> None:
        self.join(timeout=3 * WAIT_SECONDS)
        assert not self.is_alive(), f"{self.name} hung"


def wait_until_blocked_or_done(session: Session) -> None:
    """Return once `session` waits for a lock another transaction holds, or has ended."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if not session.is_alive():
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [session.pid])
            if cursor.fetchone()[0]:
                return
        time.sleep(0.01)
    raise AssertionError(f"{session.name} neither waited for a lock nor finished")


@contextlib.contextmanager
def transaction_held_open() -> Iterator[psycopg.Connection[Any]]:
    """A transaction with an id of its own, open on a session of its own (none of Galley's idle bound: as a
    forgotten `psql` or report would hold it) until the block ends. It pins the database's MVCC horizon: no
    row version changed after it began can be removed (docs/operations.md#queue-health)."""
    holder = raw_connection(options="-c idle_in_transaction_session_timeout=0")
    try:
        holder.execute("SELECT pg_current_xact_id()")
        yield holder
    finally:
        holder.close()


def make_dead_operation_tuples(count: int) -> None:
    """`count` dead row versions in the operation table, and nothing else left behind: pending operations
    inserted on a session of its own in a transaction rolled back (an aborted insert's tuples are dead).
    Returns once PostgreSQL's statistics count them, as the next statement of this connection reads them."""
    before = get_queue_health().dead_tuples
    with raw_connection() as inserter:
        inserter.execute("SELECT 1")  # a transaction, so that the insert's own block is a savepoint in it
        insert_pending_operations(inserter, kind="dead-tuples", count=count)
        inserter.rollback()
        inserter.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        clear_statistics_snapshot()
        # Counted: the figure moved and holds them (an autovacuum in between may have removed the earlier ones).
        dead = get_queue_health().dead_tuples
        if dead != before and dead >= count:
            return
        assert time.monotonic() < deadline, "the statistics did not count the dead tuples"
        time.sleep(0.05)


def clear_statistics_snapshot() -> None:
    """Drop what this transaction cached of PostgreSQL's statistics and sessions (pg_stat_*, pg_stat_activity:
    read once per transaction), so that its next read sees them now: a test runs in one transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
