"""What every client of an outside service shares: its errors classified by what the caller must
do next (invariant 9), Retry-After parsing, and one client per process per configuration.

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
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Generic, Protocol, TypeVar


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
