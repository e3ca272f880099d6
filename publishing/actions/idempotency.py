"""Idempotency-Key on the JSON API's POSTs (docs/api.md#idempotency-key): the target protocol's
semantics (docs/target-protocol.md) applied to Galley.

The same key and body replays the stored response (status and body); the same key with another
body is refused (422); a request still running with that key is refused (409). Keys are scoped
per user and kept for GALLEY_RETENTION_DAYS.

How, in the request's one durable transaction:

1. `claim_idempotency_key` takes a transaction-level advisory lock on (user, key) with
   `pg_try_advisory_xact_lock`: it never waits, so a second request while the first runs gets
   IdempotencyKeyInFlight at once. The lock belongs to the transaction, so a crashed or
   rolled-back request leaves nothing behind that could block a retry.
2. Holding the lock, it reads the key's record: a record is only ever written by a request
   that committed its write, so it is replayed (same fingerprint) or refused (another one).
3. The action writes, and `do_record_idempotent_response` stores the response in the same
   transaction: the record and the write commit together or not at all. A refusal (an error
   answer) rolls back and stores nothing, so the key can be used again with a corrected body.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from publishing.errors import GalleyError, InvalidInput
from publishing.hashing import PayloadError, canonical_json
from publishing.models import IdempotencyRecord
from publishing.sql import TRY_IDEMPOTENCY_LOCK_SQL

# Printable ASCII without spaces, as HTTP header values allow; long enough for a UUID or an
# operation-style key, short enough for the unique index.
KEY_FORM = re.compile(r"^[\x21-\x7e]{1,255}$")


class IdempotencyKeyInFlight(GalleyError):
    """Another request with this key is running now; nothing was done. Retry after it has answered."""


class IdempotencyKeyReused(GalleyError):
    """The key was used for a request with another method, path or body; nothing was done."""


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: str  # JSON text, answered byte for byte


def check_idempotency_key(value: str | None) -> str:
    if value is None or value == "":
        raise InvalidInput("Every POST needs an Idempotency-Key header (e.g. a UUID you keep for retries).")
    if not KEY_FORM.match(value):
        raise InvalidInput("The Idempotency-Key must be 1 to 255 printable ASCII characters without spaces.")
    return value


def request_fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 of method, path and the body as canonical JSON (key order and whitespace do not
    count); a body that is not JSON counts byte for byte."""
    try:
        canonical = canonical_json(json.loads(body)) if body else b""
    except (ValueError, PayloadError):
        canonical = body
    return hashlib.sha256(method.upper().encode() + b"\n" + path.encode() + b"\n" + canonical).hexdigest()


def _lock_id(user: User, key: str) -> int:
    # A signed 64-bit number from (user, key): two different keys share a lock only by a sha256
    # collision in 64 bits, and then one of them is merely answered 409 while the other runs.
    digest = hashlib.sha256(f"galley-api-idempotency:{user.pk}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def claim_idempotency_key(*, user: User, key: str, fingerprint: str) -> StoredResponse | None:
    """Hold `key` for the rest of the caller's transaction; return the stored response to replay, if any.

    Must run inside the request's transaction, before its write. Raises IdempotencyKeyInFlight
    when another transaction holds the key, IdempotencyKeyReused when its record has another
    fingerprint. A record older than the retention counts as absent (and is deleted).
    """
    if not connection.in_atomic_block:
        raise RuntimeError("claim_idempotency_key needs the request's transaction open")
    with connection.cursor() as cursor:
        cursor.execute(TRY_IDEMPOTENCY_LOCK_SQL, {"lock_id": _lock_id(user, key)})
        (locked,) = cursor.fetchone()
    if not locked:
        raise IdempotencyKeyInFlight(
            f"A request with Idempotency-Key {key!r} is still being processed; retry once it has answered."
        )
    record = IdempotencyRecord.objects.filter(user=user, key=key).first()
    if record is not None and record.created_at < timezone.now() - timedelta(days=settings.GALLEY_RETENTION_DAYS):
        record.delete()
        record = None
    if record is None:
        return None
    if record.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key!r} was already used for another request (method, path or body differ); "
            "nothing was done. Use a new key for a new request."
        )
    return StoredResponse(record.response_status, record.response_body)


@transaction.atomic(savepoint=False)
def do_record_idempotent_response(*, user: User, key: str, fingerprint: str, status: int, body: str) -> None:
    """Store the response of the write the caller's transaction holds; the caller holds the key's lock."""
    IdempotencyRecord.objects.create(
        user=user, key=key, fingerprint=fingerprint, response_status=status, response_body=body
    )


def purge_idempotency_records(*, now: Any = None) -> int:
    """Delete the records older than GALLEY_RETENTION_DAYS; returns how many."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.GALLEY_RETENTION_DAYS)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
