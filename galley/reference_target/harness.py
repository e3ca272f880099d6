"""The reference target as an object (``ReferenceTarget``): what tests start, stop and steer, and
``serve``, which runs it until a signal (the program, ``__main__``)."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from galley.reference_target.faults import Draw, Faults, draw_faults
from galley.reference_target.http import TargetServer
from galley.reference_target.store import Store


class ReferenceTarget:
    """The target as an object: bound on construction, served from a thread by start().

    For unit tests: ``with ReferenceTarget(db_path=..., token=...) as target: target.url``.
    Port 0 picks a free port; ``url`` has the real one.
    """

    def __init__(
        self,
        *,
        db_path: str | Path,
        token: str,
        faults: Faults | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not token:
            raise ValueError("the reference target needs a bearer token (--token or GALLEY_TARGET_TOKEN)")
        self.token = token
        self.faults = faults or Faults()
        self.store = Store(Path(db_path))
        self.store.initialise()
        self._random = random.Random(self.faults.seed)  # noqa: S311 -- fault injection, not security
        self._random_lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._in_flight_lock = threading.Lock()
        # Every publication POST's arrival, in memory (GET /_arrivals): what tests of Galley's rate
        # limits count. Kept for the target's lifetime, bounded by the test that runs it.
        self._arrivals: list[dict[str, Any]] = []
        self._arrivals_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._server = TargetServer((host, port), self)
        self.host = host
        self.port: int = self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def public_url(self) -> str:
        """The base of permalinks: a wildcard bind address is not somewhere a browser can go."""
        host = "127.0.0.1" if self.host in {"", "0.0.0.0"} else self.host  # noqa: S104 -- compared, not bound
        return f"http://{host}:{self.port}"

    def draw(self) -> Draw:
        with self._random_lock:
            return draw_faults(self._random, self.faults)

    # The in-flight set lives in memory on purpose: a crash loses it together with the request,
    # and the store's transaction re-checks everything anyway, so it can never cause a duplicate.
    def claim(self, operation_key: str) -> bool:
        with self._in_flight_lock:
            if operation_key in self._in_flight:
                return False
            self._in_flight.add(operation_key)
            return True

    def release(self, operation_key: str) -> None:
        with self._in_flight_lock:
            self._in_flight.discard(operation_key)

    def record_arrival(self, *, arrived_at: float, operation_key: str, status: int) -> None:
        with self._arrivals_lock:
            self._arrivals.append({"arrived_at": arrived_at, "operation_key": operation_key, "status": status})

    def arrivals(self) -> list[dict[str, Any]]:
        """Every POST /v1/publications with a valid body, by arrival time (Unix seconds): its key and
        the status it was answered."""
        with self._arrivals_lock:
            return sorted(self._arrivals, key=lambda arrival: arrival["arrived_at"])

    def pause(self, seconds: float) -> None:
        """Sleep, but wake at once when the target stops, so stop() never waits out a hang."""
        self._stopping.wait(seconds)

    def ledger(self) -> list[dict[str, Any]]:
        with self.store.connect() as conn:
            return self.store.ledger(conn)

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="reference-target", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self._server.close_open_connections()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(
    *,
    host: str,
    port: int,
    db_path: str | Path,
    token: str,
    faults: Faults,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Run the target until SIGTERM or SIGINT (when called from the main thread); then stop cleanly.

    ``on_listening`` is called with the base URL once the socket accepts connections.
    """
    target = ReferenceTarget(db_path=db_path, token=token, faults=faults, host=host, port=port)
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, request_stop)
    try:
        target.start()
        if on_listening is not None:
            on_listening(target.url)
        # A flag and a short sleep, not an Event: a signal handler must not take a lock the
        # interrupted main thread might hold.
        while not stopping:
            time.sleep(0.1)
    finally:
        target.stop()
        for number, handler in previous.items():
            signal.signal(number, handler)
