"""What the reference target speaks (docs/target-protocol.md): a publication's and a retraction's request
rules, their receipts and the published page.

A request is checked before anything is stored or any fault drawn: the body's shape, the
Idempotency-Key header, and the payload hash recomputed here.

The page is built from the payload's text fields, escaped, and from `rendered.content_html` (the
body as Galley rendered it) cleaned again with nh3: Galley sanitized it already, but a target takes
no markup from across the network on trust. A request without `rendered` (an older Galley) gets the
page it always did: the headline and the body's paragraphs as text.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import sqlite3
from typing import Any

import nh3

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


def _json_object(raw: bytes) -> dict[str, Any]:
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
    return body


def validate_publication(raw: bytes, idempotency_key: str | None) -> dict[str, Any]:
    """The publication request as a dict, or InvalidRequest with a message for the sender."""
    body = _json_object(raw)
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
    if "rendered" in body:
        _validate_rendered(body["rendered"], payload)
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


def validate_retraction(raw: bytes, idempotency_key: str | None) -> dict[str, Any]:
    """The retraction request as a dict (docs/target-protocol.md#retraction), or InvalidRequest."""
    body = _json_object(raw)
    for name in ("operation_key", "brief_id", "reason"):
        if not isinstance(body.get(name), str) or not body[name].strip():
            raise InvalidRequest(f"{name} must be a non-empty string")
    revision = body.get("revision")
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        raise InvalidRequest("revision must be an integer of at least 1")
    if not idempotency_key:
        raise InvalidRequest("the Idempotency-Key header is required")
    if idempotency_key != body["operation_key"]:
        raise InvalidRequest("the Idempotency-Key header must equal operation_key")
    return body


RENDERED_TEXTS = ("title", "excerpt", "content_html", "byline", "section")


def _validate_rendered(rendered: Any, payload: dict[str, Any]) -> None:
    if not isinstance(rendered, dict):
        raise InvalidRequest("rendered must be a JSON object")
    for name in RENDERED_TEXTS:
        if not isinstance(rendered.get(name, ""), str):
            raise InvalidRequest(f"rendered.{name} must be a string")
    tags = rendered.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidRequest("rendered.tags must be a list of strings")
    # The headline readers see is the hashed one: a page never shows a title the hash does not cover.
    if rendered.get("title", payload["title"]) != payload["title"]:
        raise InvalidRequest("rendered.title must equal payload.title")


def receipt(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "operation_key": row["operation_key"],
        "brief_id": row["brief_id"],
        "revision": row["revision"],
        "payload_hash": row["payload_hash"],
        "permalink": row["permalink"],
    }


def publication_state(row: sqlite3.Row) -> dict[str, Any]:
    """The receipt with whether the brief's article is taken down at this revision (look-up, read-back).
    Only answers of GET say so: a publish's answer stays the same body as the first time."""
    return {**receipt(row), "retracted": row["retracted_at"] is not None, "retracted_at": row["retracted_at"]}


def retraction_receipt(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["publication_id"],
        "operation_key": row["operation_key"],
        "revision": row["revision"],
        "retracted": True,
        "retracted_at": row["retracted_at"],
    }


GONE_HTML = (
    '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Gone</title>\n</head>\n'
    "<body>\n<p>This article has been retracted.</p>\n</body>\n</html>\n"
)


def _page(title: str, article: str) -> str:
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n"
        f"</head>\n<body>\n<article>\n{article}\n</article>\n</body>\n</html>\n"
    )


def _text(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name, "")
    return value if isinstance(value, str) else ""


def article_html(row: sqlite3.Row) -> str:
    """The published page: the headline (h1), the standfirst, the byline, a correction's note, the body,
    then the section and tags. Text comes from the payload (the hashed story), escaped; only the body's HTML
    from `rendered`."""
    payload = json.loads(row["payload"])
    title = html.escape(payload["title"])
    rendered = json.loads(row["rendered"]) if row["rendered"] else None
    # A correction's public note (docs/editorial.md#corrections) is part of the hashed payload: shown under
    # the headline, so every reader of this page sees that the article was corrected, and why.
    note = _text(payload, "correction_note") if payload.get("correction") is True else ""
    correction = f'<p class="correction">Correction: {html.escape(note)}</p>' if note else ""
    if rendered is None:
        paragraphs = [part.strip() for part in payload["body"].split("\n\n") if part.strip()]
        body = "\n".join(f"<p>{html.escape(part)}</p>" for part in paragraphs)
        return _page(title, "\n".join(part for part in (f"<h1>{title}</h1>", correction, body) if part))
    standfirst, byline, section = (_text(payload, name) for name in ("standfirst", "byline", "section"))
    tags = (
        [tag for tag in payload.get("tags", []) if isinstance(tag, str)]
        if isinstance(payload.get("tags"), list)
        else []
    )
    parts = [f"<h1>{title}</h1>"]
    if standfirst:
        parts.append(f'<p class="standfirst">{html.escape(standfirst)}</p>')
    if byline:
        parts.append(f'<p class="byline">By {html.escape(byline)}</p>')
    if correction:
        parts.append(correction)
    parts.append(f'<div class="body">\n{nh3.clean(rendered.get("content_html", ""))}\n</div>')
    if section or tags:
        filed = [html.escape(section)] if section else []
        filed += [f"#{html.escape(tag)}" for tag in tags]
        parts.append(f'<p class="filed">{" · ".join(filed)}</p>')
    return _page(title, "\n".join(parts))
