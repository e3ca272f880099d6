"""The one place a revision payload becomes its canonical bytes and its payload hash.

Canonical JSON (docs/architecture.md#payload-hash): keys sorted at every level, no insignificant whitespace
(separators "," and ":"), non-ASCII kept as UTF-8 rather than \\u escapes, and NaN or
Infinity refused because JSON has no spelling for them. The hash is the lowercase sha256 hex
digest of those bytes. Two payloads that differ only in key order or whitespace hash the same.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class PayloadError(ValueError):
    """The payload cannot be canonicalised; the message says why, for the person who sent it."""


def canonical_json(payload: Any) -> bytes:
    try:
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise PayloadError(f"The payload contains NaN or Infinity, which JSON cannot represent ({exc}).") from None
    except TypeError as exc:
        raise PayloadError(f"The payload is not plain JSON data: {exc}.") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError("The payload contains text that is not valid UTF-8 (a lone surrogate).") from None


def payload_hash(payload: Any) -> str:
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def source_hash(source_material: str) -> str:
    """The version of a brief's source material: a summary run and its step identities are keyed by it."""
    return payload_hash({"source_material": source_material})
