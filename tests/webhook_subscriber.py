"""A webhook subscriber as a program of its own (stdlib only): `python -m tests.webhook_subscriber
--port P --secret S --log FILE`. It verifies each delivery's signature with the code docs/webhooks.md
gives subscribers, keeps each event once by its Idempotency-Key, and appends every delivery it
answers, duplicates too, as one JSON line to FILE, fsynced before it answers 200; restarted on the
same FILE it remembers the events it kept, as a subscriber's database would."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOLERANCE_SECONDS = 300


# --- as in docs/webhooks.md#verifying ---------------------------------------------------------------
def verify(secret: str, body: bytes, header: str, *, tolerance: int = TOLERANCE_SECONDS) -> bool:
    """Whether `header` (Galley-Signature) signs `body` with `secret`, at a time within `tolerance`."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    timestamp, received = fields.get("t", ""), fields.get("v1", "")
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance:
        return False
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, received)


# -----------------------------------------------------------------------------------------------------


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.kept: set[str] = set()
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record["verified"] and not record["duplicate"]:
                    self.kept.add(record["idempotency_key"])

    def record(self, key: str, record: dict[str, object]) -> None:
        with self.lock:
            record["duplicate"] = key in self.kept
            with self.path.open("a") as out:
                out.write(json.dumps(record) + "\n")
                out.flush()
                os.fsync(out.fileno())
            if record["verified"]:
                self.kept.add(key)


def serve(port: int, secret: str, ledger: Ledger) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the test's readiness probe
            self.send_response(200)
            self.end_headers()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            key = self.headers.get("Idempotency-Key", "")
            verified = verify(secret, body, self.headers.get("Galley-Signature", ""))
            ledger.record(
                key,
                {
                    "idempotency_key": key,
                    "event_id": self.headers.get("Galley-Event-Id", ""),
                    "timestamp": self.headers.get("Galley-Timestamp", ""),
                    "signature": self.headers.get("Galley-Signature", ""),
                    "body": body.decode(),
                    "verified": verified,
                    "pid": os.getpid(),
                },
            )
            self.send_response(200 if verified else 400)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--log", type=Path, required=True)
    options = parser.parse_args()
    serve(options.port, options.secret, Ledger(options.log))


if __name__ == "__main__":
    main()
