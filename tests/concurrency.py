"""Run calls at the same moment on separate database connections."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

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
