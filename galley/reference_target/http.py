"""The reference target's HTTP server: routing, authentication, and a POST's steps in order.

Endpoints
    POST /v1/publications            apply once per Idempotency-Key (bearer token)
    POST /v1/publications/{id}/retraction   take the brief's article down, once per Idempotency-Key (bearer token)
    GET  /v1/publications?operation_key=K, GET /v1/publications/{id}   look-up and read-back (bearer token)
    GET  /v1/briefs/{brief_id}       look-up by brief: the newest revision held (bearer token)
    GET  /v1/status                  {"target", "fence"}: whether the revision fence is on (bearer token)
    GET  /articles/{id}              the published page: the article's title and body, no other markup
    GET  /_ledger                    every first application, in order (for tests and operators)
    GET  /_retractions               every retraction applied (for tests and operators)
    GET  /_arrivals                  every valid POST's arrival time, key and answer (for rate-limit tests)
    GET  /_health                    liveness

A POST (a publication or a retraction) goes through these steps, in this order:
    1. auth (401 missing / 403 wrong), body and Idempotency-Key validation (400), no latency;
    2. one draw of every fault rate from the seeded random generator;
    3. claim the key in flight; if another request holds it, answer what the store holds for the
       key (200 replay / 422 mismatch) or else 409 in_progress;
    4. wait ``latency_ms`` (while holding the key, so a concurrent duplicate sees 409);
    5. 429 / 503 / 500 if drawn (nothing applied);
    6. one BEGIN IMMEDIATE transaction: replay (200) / mismatch (422) / stale_revision (409,
       skipped with fence_off) / store + ledger row (201); a retraction: replay (200) / mismatch (422) /
       unknown id (404) / stale_revision (409, a newer revision is held) / retraction row (201);
    7. only after a first application (201): commit-then-hang or commit-then-drop if drawn.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from galley.reference_target.faults import Draw, Faults
from galley.reference_target.protocol import (
    GONE_HTML,
    MAX_BODY_BYTES,
    InvalidRequest,
    article_html,
    publication_state,
    receipt,
    validate_publication,
    validate_retraction,
)
from galley.reference_target.store import Store, retraction_replay

logger = logging.getLogger(__name__)

_HTML = "text/html; charset=utf-8"
_PUBLICATION_PATH = re.compile(r"/v1/publications/([A-Za-z0-9_-]+)")
_RETRACTION_PATH = re.compile(r"/v1/publications/([A-Za-z0-9_-]+)/retraction")
_BRIEF_PATH = re.compile(r"/v1/briefs/([A-Za-z0-9_.:-]+)")
_ARTICLE_PATH = re.compile(r"/articles/([A-Za-z0-9_-]+)")


class Target(Protocol):
    """What the handler asks of the target it serves (harness.ReferenceTarget)."""

    token: str
    faults: Faults  # read per request: a test may change the faults of a running target
    store: Store

    @property
    def public_url(self) -> str: ...

    def draw(self) -> Draw: ...

    def claim(self, operation_key: str) -> bool: ...

    def release(self, operation_key: str) -> None: ...

    def record_arrival(self, *, arrived_at: float, operation_key: str, status: int) -> None: ...

    def arrivals(self) -> list[dict[str, Any]]: ...

    def pause(self, seconds: float) -> None: ...


class TargetServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], target: Target) -> None:
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
    server: TargetServer
    # HTTP/1.1 with keep-alive: a client's connection serves request after request (no TCP connect
    # per call) until the client closes it, it stays idle `timeout` seconds, a response is sent
    # before its request's body was read, or the target stops (which shuts every open connection).
    protocol_version = "HTTP/1.1"
    timeout = 30
    server_version = "GalleyReferenceTarget/1"
    answered = 0  # the status of the last response sent on this connection
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
        self.answered = status
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
        if path == "/_arrivals":
            self._json(200, {"arrivals": target.arrivals()})
            return
        if path == "/_ledger":
            with target.store.connect() as conn:
                self._json(200, {"applications": target.store.ledger(conn)})
            return
        if path == "/_retractions":
            with target.store.connect() as conn:
                self._json(200, {"retractions": target.store.retractions(conn)})
            return
        if match := _ARTICLE_PATH.fullmatch(path):
            with target.store.connect() as conn:
                row = target.store.by_id(conn, match.group(1))
            if row is None:
                self._send(404, b"<!doctype html><title>Not found</title><p>Not found.</p>\n", _HTML)
                return
            if row["retracted_at"] is not None:
                self._send(410, GONE_HTML.encode("utf-8"), _HTML)
                return
            self._send(200, article_html(row).encode("utf-8"), _HTML)
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
                self._json(200, publication_state(row))
            return
        if match := _BRIEF_PATH.fullmatch(path):
            if not self._authorised():
                return
            with target.store.connect() as conn:
                row = target.store.newest_of_brief(conn, match.group(1))
            if row is None:
                self._not_found()
            else:
                self._json(
                    200, {"brief_id": row["brief_id"], "revision": row["revision"], "permalink": row["permalink"]}
                )
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
                        **publication_state(row),
                        "payload": json.loads(row["payload"]),
                        "rendered": json.loads(row["rendered"]) if row["rendered"] else None,
                        "published_at": row["published_at"],
                    },
                )
            return
        self._not_found()

    # --- POST ------------------------------------------------------------------------------

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        retraction = _RETRACTION_PATH.fullmatch(path)
        if path != "/v1/publications" and retraction is None:
            self.close_connection = True  # its body is left unread
            self._not_found()
            return
        raw = self._read_body()
        if raw is None or not self._authorised():
            return
        try:
            if retraction is None:
                body = validate_publication(raw, self.headers.get("Idempotency-Key"))
            else:
                body = validate_retraction(raw, self.headers.get("Idempotency-Key"))
        except InvalidRequest as exc:
            self._json(400, {"error": "invalid", "detail": str(exc)})
            return
        arrived_at = time.time()
        self.answered = 0  # a dropped connection answers nothing
        try:
            if retraction is None:
                self._publish(body)
            else:
                self._retract(retraction.group(1), body)
        finally:
            self.server.target.record_arrival(
                arrived_at=arrived_at, operation_key=body["operation_key"], status=self.answered
            )

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

        def busy() -> tuple[int, dict[str, Any]] | None:
            with target.store.connect() as conn:
                existing = target.store.by_key(conn, body["operation_key"])
            if existing is None:
                return None
            if existing["payload_hash"] == body["payload_hash"]:
                return 200, receipt(existing)
            return 422, {"error": "idempotency_mismatch"}

        def apply(conn: Any) -> tuple[int, dict[str, Any]]:
            return target.store.apply(conn, body, base_url=target.public_url, fence_off=target.faults.fence_off)

        self._apply_once(body, busy, apply)

    def _retract(self, publication_id: str, body: dict[str, Any]) -> None:
        target = self.server.target

        def busy() -> tuple[int, dict[str, Any]] | None:
            with target.store.connect() as conn:
                existing = target.store.retraction_by_key(conn, body["operation_key"])
            return None if existing is None else retraction_replay(existing, publication_id, body)

        def apply(conn: Any) -> tuple[int, dict[str, Any]]:
            return target.store.retract(conn, publication_id, body)

        self._apply_once(body, busy, apply)

    def _apply_once(
        self,
        body: dict[str, Any],
        busy: Callable[[], tuple[int, dict[str, Any]] | None],
        apply: Callable[[Any], tuple[int, dict[str, Any]]],
    ) -> None:
        """Steps 2-7 of a POST: the fault draw, the key held in flight, latency, the drawn failures, the
        store's one transaction (`apply`), then a commit-then-hang or -drop. `busy` answers a duplicate
        that arrives while the key is held: what the store holds for the key, or None (409 in_progress)."""
        target = self.server.target
        faults = target.faults
        key = body["operation_key"]
        draw = target.draw()
        if not target.claim(key):
            answer = busy()
            if answer is None:
                self._json(409, {"error": "in_progress", "detail": "this operation key is being applied now"})
            else:
                self._json(*answer)
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
                status, response = apply(conn)
        finally:
            target.release(key)
        if status == 201:
            logger.info(
                "applied %s (brief %s revision %s) as %s", key, body["brief_id"], body["revision"], response["id"]
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
