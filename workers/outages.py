"""The database out of reach (a restart, a failover, a dropped connection): what it looks like to a
thread, what the thread does about it, and how long a worker waits before it tries again."""

from __future__ import annotations

import logging
import random

import psycopg
from django.db import InterfaceError, OperationalError, connections

logger = logging.getLogger(__name__)

# The database is out of reach for now (a restart, a failover, a dropped connection). Django wraps
# psycopg's errors in its own; psycopg's may still surface unwrapped from outside a Django cursor.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, psycopg.OperationalError)
RECONNECT_BASE_SECONDS = 0.2
RECONNECT_MAX_SECONDS = 5.0


def session_ended(problem: Exception) -> bool:
    """PostgreSQL itself ended the session, which sat idle in a transaction past its bound
    (GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS: a process starved of CPU, or stopped, mid-write). Django
    raises it as an InternalError at the next query; the connection is gone as after a restart, and what
    the transaction wrote rolled back with it."""
    return isinstance(problem.__cause__, psycopg.errors.IdleInTransactionSessionTimeout)


def drop_broken_connections(problem: Exception, doing: str, *, extra: dict[str, object] | None = None) -> None:
    """The database went away while this thread was `doing` something: close the thread's
    connections, so that its next query opens a new one, and log it in one line."""
    connections.close_all()
    logger.warning("database unavailable while %s: %s", doing, " ".join(str(problem).split()), extra=extra)


def reconnect_delay(failures: int) -> float:
    """Seconds to wait after `failures` database outages in a row: exponential with jitter, capped."""
    ceiling = min(RECONNECT_MAX_SECONDS, RECONNECT_BASE_SECONDS * 2 ** (failures - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 -- jitter, not security
