"""What every client of an outside service shares: its errors classified by what the caller must
do next (docs/invariants.md#i9), Retry-After parsing, and one client per process per configuration.

    ServiceError(Exception)          .status: int | None, .usage: dict[str, int]
    ├── ServiceTimeout               ambiguous: no answer in time, the request may have been applied
    ├── ServiceConnectionError       ambiguous: could not connect, or the connection dropped
    ├── ServiceThrottled             429/503: wait .retry_after seconds (None if not given)
    ├── ServiceServerError           other 5xx: back off with jitter
    ├── ServiceRejected              the request itself is wrong: terminal
    ├── ServiceAuthError             401/403: terminal, an operator must fix credentials
    └── ServiceInvalidResponse       a body or status the protocol does not allow

Each client subclasses these with its own names (TargetTimeout, AIThrottled, …), so that worker
handlers map every client's failures to failure kinds in one place.

No call leaves with a database transaction open on its thread (docs/invariants.md#i8): every client's httpx
requests pass `refuse_request_in_transaction` (an event hook), and the offline AI provider's
completions `refuse_in_transaction`, which raises TransactionOpen before anything is sent. It is no
ServiceError: it is Galley's own bug, not the service's answer.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Generic, Protocol, TypeVar

import httpx
import psycopg
from django.db import connections


class ServiceError(Exception):
    def __init__(self, message: str, *, status: int | None = None, usage: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.usage = usage or {}

    def __str__(self) -> str:
        return self.message if self.status is None else f"{self.message} (HTTP {self.status})"


class ServiceTimeout(ServiceError):
    pass


class ServiceConnectionError(ServiceError):
    pass


class ServiceThrottled(ServiceError):
    def __init__(self, message: str, *, status: int, retry_after: float | None) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class ServiceServerError(ServiceError):
    pass


class ServiceRejected(ServiceError):
    pass


class ServiceAuthError(ServiceError):
    pass


class ServiceInvalidResponse(ServiceError):
    pass


class TransactionOpen(RuntimeError):
    """A call to an outside service was about to start with a database transaction open on this
    thread; it was refused and nothing was sent."""


# What psycopg reports of a connection inside a transaction (idle in it, or in a failed one).
_IN_TRANSACTION = {psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR}


def open_transactions() -> list[str]:
    """The aliases of this thread's database connections that have a transaction open: inside
    Django's atomic (even before its first query), or by the driver's account (a transaction
    begun behind Django's back, or autocommit switched off)."""
    found = []
    for connection in connections.all(initialized_only=True):
        raw = connection.connection
        status = raw.info.transaction_status if isinstance(raw, psycopg.Connection) else None
        if connection.in_atomic_block or status in _IN_TRANSACTION:
            found.append(connection.alias)
    return found


def refuse_in_transaction(call: str) -> None:
    """Raise TransactionOpen if a database transaction is open on this thread (docs/invariants.md#i8).

    A refusal, in production too: nothing has left the process, so the attempt fails cleanly, as
    `unexpected` (the worker logs it with its traceback at ERROR, galley_attempts counts it, the
    retry policy bounds it and an operator sees the dead letter), whereas a call let through would
    hold the transaction's row locks for as long as the service takes to answer, up to its timeout,
    stalling every writer of the brief, and its effect could outlive a rollback of the transaction
    meant to record it.
    """
    held = open_transactions()
    if held:
        raise TransactionOpen(f"{call} refused: a database transaction is open on {', '.join(held)}; nothing was sent")


def refuse_request_in_transaction(request: httpx.Request) -> None:
    """httpx's request event hook: every request, each redirect too, checked as it is about to leave.
    The call is named without the URL's user information, which may hold a secret."""
    refuse_in_transaction(f"{request.method} {request.url.copy_with(userinfo=b'')}")


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait, from Retry-After as delta-seconds or HTTP-date; None if absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class SharedPerProcess(Generic[C]):
    """One client per process for the current configuration, shared by every worker thread.

    httpx clients are thread-safe, and building one costs 40-55 ms (it loads the CA bundle, even
    for http://), more than a publish itself. A changed configuration closes and replaces it.
    """

    def __init__(self, build: Callable[..., C]) -> None:
        self._build = build
        self._current: tuple[Hashable, C] | None = None
        self._lock = threading.Lock()

    def get(self, **config: object) -> C:
        key = tuple(sorted(config.items()))
        with self._lock:
            if self._current is None or self._current[0] != key:
                if self._current is not None:
                    self._current[1].close()
                self._current = (key, self._build(**config))
            return self._current[1]
