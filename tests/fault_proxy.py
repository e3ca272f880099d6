"""A fault-injecting HTTP proxy for tests: it stands between Galley and a real target (WordPress) and
loses, delays or refuses chosen requests, so that retry-safety is proven against the real thing.

    with FaultProxy(wordpress.url) as proxy:
        settings.GALLEY_WORDPRESS_URL = proxy.url
        proxy.inject("drop_after_forward", times=1)

Every request is forwarded (method, path and query, headers, body) with httpx, and the answer is
relayed, except that the first `times` requests on the faulted route (POST /wp-json/galley/v1/publications)
get the current `mode`:

    "pass"                 forwarded and answered as usual
    "drop_after_forward"   forwarded; the target's whole answer is read (so it has applied the request),
                           then the client's connection is closed without an answer
    "hang_after_forward"   forwarded; the answer is held back (until `release()` or `hold_seconds`),
                           longer than any client timeout a test sets
    "unavailable"          not forwarded: 503 with Retry-After: 0

    "throttled"            not forwarded: 429 with Retry-After: 1
    "failing"              not forwarded: 500

Once the counter runs out the mode goes back to "pass". Or, for the chaos test (tests/chaos.py), a
random mix: `randomize({"unavailable": 0.05, ...}, seed=7)` gives each request on the faulted route
one mode drawn with those probabilities (the rest pass), for as long as the proxy runs. Each request is
recorded as an Exchange (`proxy.exchanges`), after the target answered, so a test can wait for a forwarded
request to have been applied (`wait_for`) without sleeping.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

import httpx

PASS = "pass"
DROP_AFTER_FORWARD = "drop_after_forward"
HANG_AFTER_FORWARD = "hang_after_forward"
UNAVAILABLE = "unavailable"
THROTTLED = "throttled"
FAILING = "failing"
MODES = frozenset({PASS, DROP_AFTER_FORWARD, HANG_AFTER_FORWARD, UNAVAILABLE, THROTTLED, FAILING})
# The answers of the modes that never reach the target.
_REFUSALS = {
    UNAVAILABLE: (503, [("Retry-After", "0")], b'{"error":"unavailable","detail":"injected by the test proxy"}'),
    THROTTLED: (429, [("Retry-After", "1")], b'{"error":"rate_limited","detail":"injected by the test proxy"}'),
    FAILING: (500, [], b'{"error":"internal","detail":"injected by the test proxy"}'),
}

FAULTED_ROUTE = ("POST", "/wp-json/galley/v1/publications")

# Hop-by-hop headers (RFC 9110 §7.6.1) and those the proxy sets itself. Accept-Encoding is not
# forwarded, so the answer arrives unencoded and is relayed byte for byte.
_NOT_FORWARDED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
    }
)
_NOT_RELAYED = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "date",
        "server",
    }
)


@dataclass(frozen=True)
class Exchange:
    """One request the proxy received: what it was, which fault it got, and what the target answered."""

    method: str
    path: str  # with the query string
    headers: dict[str, str]
    body: bytes
    fault: str  # the mode applied to it ("pass" when none)
    forwarded: bool
    upstream_status: int | None  # the target's status, None when not forwarded (or unreachable)

    @property
    def route(self) -> tuple[str, str]:
        return self.method, urlsplit(self.path).path


class FaultProxy:
    """A ThreadingHTTPServer on 127.0.0.1 (a free port) in a daemon thread, relaying to `upstream`."""

    def __init__(self, upstream: str, *, hold_seconds: float = 60.0, upstream_timeout: float = 60.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.hold_seconds = hold_seconds
        self.mode = PASS
        self.times = 0
        self._mix: list[tuple[str, float]] = []
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._recorded = threading.Condition(self._lock)
        self._exchanges: list[Exchange] = []
        self._released = threading.Event()
        self._client = httpx.Client(timeout=upstream_timeout, follow_redirects=False)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._client.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- faults ----------------------------------------------------------------------------

    def inject(self, mode: str, *, times: int = 1) -> None:
        """Apply `mode` to the next `times` requests on the faulted route, then pass."""
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r}; use one of {sorted(MODES)}")
        with self._lock:
            self.mode, self.times = mode, times
            self._released.clear()

    def randomize(self, rates: dict[str, float], *, seed: int) -> None:
        """From now on, each request on the faulted route gets mode m with probability rates[m] (the
        rest pass), drawn from a generator seeded with `seed`; inject() counters are not used meanwhile."""
        if unknown := set(rates) - MODES:
            raise ValueError(f"unknown fault modes {sorted(unknown)}; use some of {sorted(MODES)}")
        if sum(rates.values()) > 1:
            raise ValueError(f"the fault rates {rates} add up to more than 1")
        with self._lock:
            self._mix = list(rates.items())
            self._rng = random.Random(seed)

    def release(self) -> None:
        """Let every answer held by hang_after_forward go (to a client that has most likely gone)."""
        self._released.set()

    def _take_fault(self, method: str, path: str) -> str:
        with self._lock:
            if self.mode not in MODES:
                raise ValueError(f"unknown fault mode {self.mode!r}; use one of {sorted(MODES)}")
            if (method, path) != FAULTED_ROUTE:
                return PASS
            if self._mix:
                draw = self._rng.random()
                for mode, rate in self._mix:
                    if draw < rate:
                        return mode
                    draw -= rate
                return PASS
            if self.mode == PASS or self.times <= 0:
                return PASS
            mode = self.mode
            self.times -= 1
            if self.times == 0:
                self.mode = PASS
            return mode

    # --- what was seen ---------------------------------------------------------------------

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def publishes(self) -> list[Exchange]:
        """The requests on the faulted route (POST publications), in order of the target's answer."""
        return [exchange for exchange in self.exchanges if exchange.route == FAULTED_ROUTE]

    def wait_for(self, predicate: Callable[[list[Exchange]], bool], *, timeout: float = 60.0) -> list[Exchange]:
        """Block until predicate(exchanges) holds; raises TimeoutError (with what was seen) otherwise."""
        with self._recorded:
            if not self._recorded.wait_for(lambda: predicate(self._exchanges), timeout=timeout):
                raise TimeoutError(f"the proxy did not see what was expected; it saw {self._exchanges!r}")
            return list(self._exchanges)

    def _record(self, exchange: Exchange) -> None:
        with self._recorded:
            self._exchanges.append(exchange)
            self._recorded.notify_all()


class _Handler(BaseHTTPRequestHandler):
    server_version = "galley-fault-proxy/1"

    def do_GET(self) -> None:
        self._relay()

    def do_POST(self) -> None:
        self._relay()

    def do_PUT(self) -> None:
        self._relay()

    def do_PATCH(self) -> None:
        self._relay()

    def do_DELETE(self) -> None:
        self._relay()

    def do_HEAD(self) -> None:
        self._relay()

    def do_OPTIONS(self) -> None:
        self._relay()

    def log_message(self, format: str, *args: object) -> None:
        pass

    @property
    def _proxy(self) -> FaultProxy:
        return self.server.proxy  # type: ignore[attr-defined,no-any-return]

    def _relay(self) -> None:
        proxy = self._proxy
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _NOT_FORWARDED}
        fault = proxy._take_fault(self.command, urlsplit(self.path).path)

        def record(*, forwarded: bool, status: int | None) -> None:
            proxy._record(Exchange(self.command, self.path, headers, body, fault, forwarded, status))

        if fault in _REFUSALS:
            record(forwarded=False, status=None)
            status, refusal_headers, content = _REFUSALS[fault]
            self._answer(status, [*refusal_headers, ("Content-Type", "application/json")], content)
            return
        try:
            response = proxy._client.request(self.command, proxy.upstream + self.path, headers=headers, content=body)
        except httpx.HTTPError as exc:
            record(forwarded=False, status=None)
            self._answer(502, [("Content-Type", "text/plain")], f"upstream failed: {exc!r}".encode())
            return
        record(forwarded=True, status=response.status_code)
        if fault == DROP_AFTER_FORWARD:
            # The target applied it and answered; the client never hears: close without a status line.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.flush()
            return
        if fault == HANG_AFTER_FORWARD:
            proxy._released.wait(proxy.hold_seconds)
        relayed = [(name, value) for name, value in response.headers.multi_items() if name not in _NOT_RELAYED]
        self._answer(response.status_code, relayed, response.content)

    def _answer(self, status: int, headers: list[tuple[str, str]], content: bytes) -> None:
        try:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(content)
        except OSError:
            pass  # the client gave up (a timeout): nothing to answer
        self.close_connection = True
