"""Run calls at the same moment on separate database connections; hold a row lock from another session."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.db import connection, transaction


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


@contextlib.contextmanager
def brief_locked(brief: Any, *, at_most: float) -> Iterator[threading.Event]:
    """Hold `brief`'s row lock (FOR UPDATE) from a session of its own, as `psql` would (none of Galley's
    lock or idle bounds), until the block ends or `at_most` seconds have passed, whichever is first.
    Yields the event set when the lock is released (a wait that outlived the lock's holding sees it set)."""
    params = {**connection.get_connection_params(), "options": "-c idle_in_transaction_session_timeout=0"}
    params.pop("prepare_threshold", None)
    holder = psycopg.connect(**params)
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
