"""What the reference target speaks (docs/target-protocol.md): a publication request's rules, the receipt and
the published page.

A request is checked before anything is stored or any fault drawn: the body's shape, the
Idempotency-Key header, and the payload hash recomputed here.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import sqlite3
from typing import Any

MAX_BODY_BYTES = 4 * 1024 * 1024
_HASH_RE = re.compile(r"[0-9a-f]{64}")


class InvalidRequest(Exception):
    """A publication request the target refuses with 400; the message is for the sender."""


def canonical_hash(payload: Any) -> str:
    """sha256 hex of the canonical JSON (docs/architecture.md#payload-hash).

    Written here independently of publishing.hashing on purpose: the target is another
    service, and agreeing with Galley's hash is what it checks, not what it assumes.
    """
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _reject_constant(name: str) -> Any:
    raise InvalidRequest(f"{name} is not valid JSON")


def validate_publication(raw: bytes, idempotency_key: str | None) -> dict[str, Any]:
    """The publication request as a dict, or InvalidRequest with a message for the sender."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("the body is not valid UTF-8") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    for name in ("operation_key", "brief_id", "payload_hash"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise InvalidRequest(f"{name} must be a non-empty string")
    revision = body.get("revision")
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        raise InvalidRequest("revision must be an integer of at least 1")
    if not _HASH_RE.fullmatch(body["payload_hash"]):
        raise InvalidRequest("payload_hash must be 64 lowercase hex characters (sha256)")
    payload = body.get("payload")
    if not isinstance(payload, dict):
        raise InvalidRequest("payload must be a JSON object")
    for name in ("title", "body"):
        if not isinstance(payload.get(name), str):
            raise InvalidRequest(f"payload.{name} must be a string")
    if not idempotency_key:
        raise InvalidRequest("the Idempotency-Key header is required")
    if idempotency_key != body["operation_key"]:
        raise InvalidRequest("the Idempotency-Key header must equal operation_key")
    try:
        actual = canonical_hash(payload)
    except UnicodeEncodeError:
        raise InvalidRequest("payload contains text that is not valid UTF-8 (a lone surrogate)") from None
    if actual != body["payload_hash"]:
        raise InvalidRequest(f"payload_hash does not match the payload (its canonical sha256 is {actual})")
    return body


def receipt(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "operation_key": row["operation_key"],
        "brief_id": row["brief_id"],
        "revision": row["revision"],
        "payload_hash": row["payload_hash"],
        "permalink": row["permalink"],
    }


def article_html(row: sqlite3.Row) -> str:
    payload = json.loads(row["payload"])
    title = html.escape(payload["title"])
    paragraphs = [part.strip() for part in payload["body"].split("\n\n") if part.strip()]
    body = "\n".join(f"<p>{html.escape(part)}</p>" for part in paragraphs)
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n"
        f"</head>\n<body>\n<article>\n<h1>{title}</h1>\n{body}\n</article>\n</body>\n</html>\n"
    )
