"""The bundled reference publishing target: a separate HTTP service speaking PRODUCT.md §7.4.

It stands in for a real publishing service (WordPress and the like) in development and in
tests, so it deliberately shares nothing with Galley: no Django, no ORM, no Galley database,
only the standard library. It runs as its own program, ``python -m galley.reference_target``
(see ``__main__``), or in a thread of a test through ``ReferenceTarget``.
Its state is one SQLite file (WAL mode, a fresh connection per request, every application in
a ``BEGIN IMMEDIATE`` transaction so concurrent writers serialise on the file lock).

Endpoints
    POST /v1/publications            apply once per Idempotency-Key (bearer token)
    GET  /v1/publications?operation_key=K, GET /v1/publications/{id}   look-up and read-back (bearer token)
    GET  /v1/status                  {"target", "fence"}: whether the revision fence is on (bearer token)
    GET  /articles/{id}              the published page: the article's title and body, no other markup
    GET  /_ledger                    every first application, in order (for tests and operators)
    GET  /_health                    liveness

A POST goes through these steps, in this order:
    1. auth (401 missing / 403 wrong), body and Idempotency-Key validation (400), no latency;
    2. one draw of every fault rate from the seeded random generator;
    3. claim the key in flight; if another request holds it, answer what the store holds for the
       key (200 replay / 422 mismatch) or else 409 in_progress;
    4. wait ``latency_ms`` (while holding the key, so a concurrent duplicate sees 409);
    5. 429 / 503 / 500 if drawn (nothing applied);
    6. one BEGIN IMMEDIATE transaction: replay (200) / mismatch (422) / stale_revision (409,
       skipped with fence_off) / store + ledger row (201);
    7. only after a first application (201): commit-then-hang or commit-then-drop if drawn.

The in-flight set lives in memory on purpose: a crash loses it together with the request,
and the store's transaction re-checks everything anyway, so it can never cause a duplicate.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import html
import json
import logging
import random
import re
import signal
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
_HTML = "text/html; charset=utf-8"
_HASH_RE = re.compile(r"[0-9a-f]{64}")
_PUBLICATION_PATH = re.compile(r"/v1/publications/([A-Za-z0-9_-]+)")
_ARTICLE_PATH = re.compile(r"/articles/([A-Za-z0-9_-]+)")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS publications (
    id            TEXT PRIMARY KEY,
    operation_key TEXT NOT NULL UNIQUE,
    brief_id      TEXT NOT NULL,
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    payload_hash  TEXT NOT NULL,
    payload       TEXT NOT NULL,
    permalink     TEXT NOT NULL,
    published_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS publications_brief_revision ON publications (brief_id, revision);
CREATE TABLE IF NOT EXISTS ledger (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_key TEXT NOT NULL,
    brief_id      TEXT NOT NULL,
    revision      INTEGER NOT NULL,
    payload_hash  TEXT NOT NULL,
    applied_at    TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS publications_immutable BEFORE UPDATE ON publications
BEGIN SELECT RAISE(ABORT, 'publications are immutable'); END;
CREATE TRIGGER IF NOT EXISTS publications_kept BEFORE DELETE ON publications
BEGIN SELECT RAISE(ABORT, 'publications are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS ledger_no_update BEFORE UPDATE ON ledger
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledger_no_delete BEFORE DELETE ON ledger
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""


@dataclass(frozen=True)
class Faults:
    """What goes wrong, and how often. Rates are probabilities in 0..1, drawn independently per POST.

    ``retry_after`` is the Retry-After (whole seconds) sent with 429 and 503. ``hang_seconds``
    should exceed the client's timeout. ``seed`` makes the sequence of draws reproducible.
    """

    latency_ms: int = 0
    rate_429: float = 0.0
    rate_503: float = 0.0
    rate_500: float = 0.0
    rate_hang: float = 0.0
    hang_seconds: float = 30.0
    rate_drop: float = 0.0
    retry_after: int = 1
    fence_off: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("rate_429", "rate_503", "rate_500", "rate_hang", "rate_drop"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be a probability between 0 and 1, got {rate!r}")
        if self.latency_ms < 0 or self.hang_seconds < 0 or self.retry_after < 0:
            raise ValueError("latency_ms, hang_seconds and retry_after must not be negative")


@dataclass(frozen=True)
class _Draw:
    """One POST's fault decisions, all drawn up front so the sequence depends only on the seed."""

    throttle: bool
    unavailable: bool
    error: bool
    hang: bool
    drop: bool


class _Invalid(Exception):
    pass


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def canonical_hash(payload: Any) -> str:
    """sha256 hex of the canonical JSON (PRODUCT.md §3).

    Written here independently of publishing.hashing on purpose: the target is another
    service, and agreeing with Galley's hash is what it checks, not what it assumes.
    """
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _reject_constant(name: str) -> Any:
    raise _Invalid(f"{name} is not valid JSON")


def _validate(raw: bytes, idempotency_key: str | None) -> dict[str, Any]:
    """The publication request as a dict, or _Invalid with a message for the sender."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Invalid("the body is not valid UTF-8") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _Invalid(f"the body is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(body, dict):
        raise _Invalid("the body must be a JSON object")
    for name in ("operation_key", "brief_id", "payload_hash"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise _Invalid(f"{name} must be a non-empty string")
    revision = body.get("revision")
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        raise _Invalid("revision must be an integer of at least 1")
    if not _HASH_RE.fullmatch(body["payload_hash"]):
        raise _Invalid("payload_hash must be 64 lowercase hex characters (sha256)")
    payload = body.get("payload")
    if not isinstance(payload, dict):
        raise _Invalid("payload must be a JSON object")
    for name in ("title", "body"):
        if not isinstance(payload.get(name), str):
            raise _Invalid(f"payload.{name} must be a string")
    if not idempotency_key:
        raise _Invalid("the Idempotency-Key header is required")
    if idempotency_key != body["operation_key"]:
        raise _Invalid("the Idempotency-Key header must equal operation_key")
    try:
        actual = canonical_hash(payload)
    except UnicodeEncodeError:
        raise _Invalid("payload contains text that is not valid UTF-8 (a lone surrogate)") from None
    if actual != body["payload_hash"]:
        raise _Invalid(f"payload_hash does not match the payload (its canonical sha256 is {actual})")
    return body


def _receipt(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "operation_key": row["operation_key"],
        "brief_id": row["brief_id"],
        "revision": row["revision"],
        "payload_hash": row["payload_hash"],
        "permalink": row["permalink"],
    }


class _Store:
    """The target's own SQLite storage. One connection per call site; never shared between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: no implicit transactions; applications say BEGIN IMMEDIATE themselves.
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            # NORMAL in WAL mode survives a killed process (only an OS crash can lose the last commit).
            conn.execute("PRAGMA synchronous = NORMAL")
            yield conn
        finally:
            conn.close()

    def initialise(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.connect() as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(_SCHEMA)

    def by_key(self, conn: sqlite3.Connection, operation_key: str) -> sqlite3.Row | None:
        return conn.execute("SELECT * FROM publications WHERE operation_key = ?", (operation_key,)).fetchone()

    def by_id(self, conn: sqlite3.Connection, publication_id: str) -> sqlite3.Row | None:
        return conn.execute("SELECT * FROM publications WHERE id = ?", (publication_id,)).fetchone()

    def ledger(self, conn: sqlite3.Connection) -> list[dict[str, Any]]:
        rows = conn.execute(
            "SELECT operation_key, brief_id, revision, payload_hash, applied_at FROM ledger ORDER BY seq"
        ).fetchall()
        return [dict(row) for row in rows]

    def apply(
        self, conn: sqlite3.Connection, body: dict[str, Any], *, base_url: str, fence_off: bool
    ) -> tuple[int, dict[str, Any]]:
        """Apply one publication request in one BEGIN IMMEDIATE transaction; (status, response body).

        Re-checks the key inside the transaction, so two processes sharing the file still apply
        a key at most once.
        """
        conn.execute("BEGIN IMMEDIATE")
        try:
            existing = self.by_key(conn, body["operation_key"])
            if existing is not None:
                conn.execute("COMMIT")
                if existing["payload_hash"] == body["payload_hash"]:
                    return 200, _receipt(existing)
                return 422, {
                    "error": "idempotency_mismatch",
                    "detail": "this operation key was applied with a different payload hash",
                }
            if not fence_off:
                (current,) = conn.execute(
                    "SELECT MAX(revision) FROM publications WHERE brief_id = ?", (body["brief_id"],)
                ).fetchone()
                if current is not None and current >= body["revision"]:
                    conn.execute("COMMIT")
                    return 409, {"error": "stale_revision", "current_revision": current}
            publication_id = f"pub-{uuid.uuid4().hex}"
            now = _now()
            payload_text = json.dumps(body["payload"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            conn.execute(
                "INSERT INTO publications (id, operation_key, brief_id, revision, payload_hash, payload,"
                " permalink, published_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    publication_id,
                    body["operation_key"],
                    body["brief_id"],
                    body["revision"],
                    body["payload_hash"],
                    payload_text,
                    f"{base_url}/articles/{publication_id}",
                    now,
                ),
            )
            conn.execute(
                "INSERT INTO ledger (operation_key, brief_id, revision, payload_hash, applied_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (body["operation_key"], body["brief_id"], body["revision"], body["payload_hash"], now),
            )
            row = self.by_key(conn, body["operation_key"])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if row is None:  # inserted by this very transaction: cannot be missing
            raise RuntimeError(f"publication {publication_id} was not found right after its insert")
        return 201, _receipt(row)


def _article_html(row: sqlite3.Row) -> str:
    payload = json.loads(row["payload"])
    title = html.escape(payload["title"])
    paragraphs = [part.strip() for part in payload["body"].split("\n\n") if part.strip()]
    body = "\n".join(f"<p>{html.escape(part)}</p>" for part in paragraphs)
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n"
        f"</head>\n<body>\n<article>\n<h1>{title}</h1>\n{body}\n</article>\n</body>\n</html>\n"
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], target: ReferenceTarget) -> None:
        self.target = target
        # Connections being served, so that stopping the target ends the idle keep-alive ones too.
        self.open_connections: set[socket.socket] = set()
        self.open_connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def close_open_connections(self) -> None:
        with self.open_connections_lock:
            for conn in self.open_connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Into the log with a traceback, rather than socketserver's bare print to stderr.
        logger.exception("error while handling a request from %s", client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # HTTP/1.1 with keep-alive: a client's connection serves request after request (no TCP connect
    # per call) until the client closes it, it stays idle `timeout` seconds, a response is sent
    # before its request's body was read, or the target stops (which shuts every open connection).
    protocol_version = "HTTP/1.1"
    timeout = 30
    server_version = "GalleyReferenceTarget/1"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as separate writes: without this, on a kept-alive connection the
        # body waits for the client's delayed ACK of the headers (Nagle), about 40 ms per answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.open_connections_lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        with self.server.open_connections_lock:
            self.server.open_connections.discard(self.connection)
        with contextlib.suppress(OSError):  # the client may already be gone
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    # --- responses -------------------------------------------------------------------------

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout after a commit-then-hang); nothing left to tell it.
            logger.info("client went away before the %s response was written", status)

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self._send(status, data, "application/json", headers)

    def _not_found(self) -> None:
        self._json(404, {"error": "not_found"})

    def _authorised(self) -> bool:
        """True if the bearer token is right; otherwise the 401/403 has been sent."""
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            self._json(
                401,
                {"error": "unauthorized", "detail": "Authorization: Bearer <token> is required"},
                {"WWW-Authenticate": "Bearer"},
            )
            return False
        if not hmac.compare_digest(token.strip().encode(), self.server.target.token.encode()):
            self._json(403, {"error": "forbidden", "detail": "the bearer token is not accepted"})
            return False
        return True

    # --- GET -------------------------------------------------------------------------------

    def do_GET(self) -> None:
        target = self.server.target
        parts = urlsplit(self.path)
        path = parts.path
        if path == "/_health":
            self._json(200, {"status": "ok"})
            return
        if path == "/_ledger":
            with target.store.connect() as conn:
                self._json(200, {"applications": target.store.ledger(conn)})
            return
        if match := _ARTICLE_PATH.fullmatch(path):
            with target.store.connect() as conn:
                row = target.store.by_id(conn, match.group(1))
            if row is None:
                self._send(404, b"<!doctype html><title>Not found</title><p>Not found.</p>\n", _HTML)
                return
            self._send(200, _article_html(row).encode("utf-8"), _HTML)
            return
        if path == "/v1/status":
            if not self._authorised():
                return
            # Read per request: a test may switch the fence off on a running target.
            self._json(200, {"target": "galley-reference-target", "fence": not target.faults.fence_off})
            return
        if path == "/v1/publications":
            if not self._authorised():
                return
            keys = parse_qs(parts.query).get("operation_key")
            if not keys or not keys[0]:
                self._json(400, {"error": "invalid", "detail": "the operation_key query parameter is required"})
                return
            with target.store.connect() as conn:
                row = target.store.by_key(conn, keys[0])
            if row is None:
                self._not_found()
            else:
                self._json(200, _receipt(row))
            return
        if match := _PUBLICATION_PATH.fullmatch(path):
            if not self._authorised():
                return
            with target.store.connect() as conn:
                row = target.store.by_id(conn, match.group(1))
            if row is None:
                self._not_found()
            else:
                self._json(
                    200,
                    {
                        **_receipt(row),
                        "payload": json.loads(row["payload"]),
                        "published_at": row["published_at"],
                    },
                )
            return
        self._not_found()

    # --- POST ------------------------------------------------------------------------------

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/v1/publications":
            self.close_connection = True  # its body is left unread
            self._not_found()
            return
        raw = self._read_body()
        if raw is None or not self._authorised():
            return
        try:
            body = _validate(raw, self.headers.get("Idempotency-Key"))
        except _Invalid as exc:
            self._json(400, {"error": "invalid", "detail": str(exc)})
            return
        self._publish(body)

    def _read_body(self) -> bytes | None:
        """The request's body, or None when a 400 has been sent instead (and the connection is to be
        closed: the body, left unread, would be taken for the next request)."""
        closing, self.close_connection = self.close_connection, True
        body = self._read_framed_body()
        if body is not None:
            self.close_connection = closing
        return body

    def _read_framed_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding"):
            self._json(400, {"error": "invalid", "detail": "send the body with a Content-Length"})
            return None
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._json(400, {"error": "invalid", "detail": "a Content-Length header is required"})
            return None
        if length < 0 or length > MAX_BODY_BYTES:
            self._json(400, {"error": "invalid", "detail": f"the body must be at most {MAX_BODY_BYTES} bytes"})
            return None
        return self.rfile.read(length)

    def _publish(self, body: dict[str, Any]) -> None:
        target = self.server.target
        faults = target.faults
        key = body["operation_key"]
        draw = target.draw()
        if not target.claim(key):
            with target.store.connect() as conn:
                existing = target.store.by_key(conn, key)
            if existing is None:
                self._json(409, {"error": "in_progress", "detail": "this operation key is being applied now"})
            elif existing["payload_hash"] == body["payload_hash"]:
                self._json(200, _receipt(existing))
            else:
                self._json(422, {"error": "idempotency_mismatch"})
            return
        try:
            if faults.latency_ms:
                target.pause(faults.latency_ms / 1000)
            retry_after = {"Retry-After": str(faults.retry_after)}
            if draw.throttle:
                self._json(429, {"error": "throttled"}, retry_after)
                return
            if draw.unavailable:
                self._json(503, {"error": "unavailable"}, retry_after)
                return
            if draw.error:
                self._json(500, {"error": "server_error"})
                return
            with target.store.connect() as conn:
                status, response = target.store.apply(
                    conn, body, base_url=target.public_url, fence_off=faults.fence_off
                )
        finally:
            target.release(key)
        if status == 201:
            logger.info(
                "applied %s (brief %s revision %s) as %s",
                key,
                body["brief_id"],
                body["revision"],
                response["id"],
            )
            if draw.hang:
                logger.info("fault: committed %s, hanging %ss before answering", key, faults.hang_seconds)
                target.pause(faults.hang_seconds)
            elif draw.drop:
                logger.info("fault: committed %s, dropping the connection without an answer", key)
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
        self._json(status, response)


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
        self.store = _Store(Path(db_path))
        self.store.initialise()
        self._random = random.Random(self.faults.seed)  # noqa: S311 -- fault injection, not security
        self._random_lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._in_flight_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._server = _Server((host, port), self)
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

    def draw(self) -> _Draw:
        with self._random_lock:
            values = [self._random.random() for _ in range(5)]
        f = self.faults
        return _Draw(
            throttle=values[0] < f.rate_429,
            unavailable=values[1] < f.rate_503,
            error=values[2] < f.rate_500,
            hang=values[3] < f.rate_hang,
            drop=values[4] < f.rate_drop,
        )

    def claim(self, operation_key: str) -> bool:
        with self._in_flight_lock:
            if operation_key in self._in_flight:
                return False
            self._in_flight.add(operation_key)
            return True

    def release(self, operation_key: str) -> None:
        with self._in_flight_lock:
            self._in_flight.discard(operation_key)

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
