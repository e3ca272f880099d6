"""Invariant: a revision's payload_hash is sha256 of canonical JSON (docs/architecture.md#payload-hash).

Canonical JSON: keys sorted at every level, no insignificant whitespace, UTF-8 (no \\u
escapes), NaN and Infinity refused. Pure functions: no database.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from publishing.hashing import PayloadError, canonical_json, payload_hash

# Written by hand, not produced by the code under test.
FIXED_BYTES = b'{"body":"x","title":"T"}'
FIXED_HASH = "8c91b02f810ac3d9f7b0c0d580f261a0fc2ad009b405a4374685e8e94f6f32f4"


def test_payload_hash__fixed_vector__is_sha256_hex_of_hand_written_canonical_bytes():
    assert hashlib.sha256(FIXED_BYTES).hexdigest() == FIXED_HASH  # the vector itself is right
    assert canonical_json({"title": "T", "body": "x"}) == FIXED_BYTES
    assert payload_hash({"title": "T", "body": "x"}) == FIXED_HASH


def test_payload_hash__form__is_lowercase_sha256_hex():
    assert re.fullmatch(r"[0-9a-f]{64}", payload_hash({"title": "Ä", "body": "ß"}))


def test_payload_hash__key_order_and_whitespace__do_not_matter():
    compact = '{"title":"T","body":"x"}'
    spread = '{\n  "body" :  "x",\n\t"title":\r\n "T"   }\n'
    first, second = json.loads(compact), json.loads(spread)
    assert list(first) != list(second)  # the two texts really do order the keys differently

    assert canonical_json(first) == canonical_json(second) == FIXED_BYTES
    assert payload_hash(first) == payload_hash(second) == FIXED_HASH


def test_payload_hash__nested_key_order__does_not_matter():
    one = json.loads('{"meta": {"z": 1, "a": {"y": [1, {"q": true, "b": null}], "c": "d"}}, "body": "x"}')
    other = json.loads('{"body":"x","meta":{"a":{"c":"d","y":[1,{"b":null,"q":true}]},"z":1}}')

    expected = b'{"body":"x","meta":{"a":{"c":"d","y":[1,{"b":null,"q":true}]},"z":1}}'
    assert canonical_json(one) == canonical_json(other) == expected
    assert payload_hash(one) == payload_hash(other) == hashlib.sha256(expected).hexdigest()


def test_payload_hash__list_order__matters():
    # Only object keys are unordered; a list's order is content.
    assert payload_hash({"tags": ["a", "b"]}) != payload_hash({"tags": ["b", "a"]})


def test_payload_hash__different_text__different_hash():
    assert payload_hash({"title": "T", "body": "x"}) != payload_hash({"title": "T", "body": "x "})


def test_canonical_json__non_ascii__stays_utf8_not_escaped():
    payload = {"title": "Kapal", "body": "Żółw — 港"}

    canonical = canonical_json(payload)

    expected = '{"body":"Żółw — 港","title":"Kapal"}'.encode()
    assert canonical == expected
    assert b"\\u" not in canonical
    assert payload_hash(payload) == hashlib.sha256(expected).hexdigest()
    # The escaped spelling of the same text is a different byte string, hence not canonical.
    assert canonical != json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def test_canonical_json__emoji_outside_bmp__encoded_as_four_utf8_bytes():
    assert canonical_json({"body": "🚢"}) == b'{"body":"\xf0\x9f\x9a\xa2"}'


@pytest.mark.parametrize(
    "payload",
    [
        {"body": float("nan")},
        {"body": float("inf")},
        {"body": float("-inf")},
        {"meta": {"score": [1.5, float("nan")]}},
        json.loads('{"body": NaN}'),  # Python's json module parses these non-JSON words
        json.loads('{"body": -Infinity}'),
    ],
    ids=["nan", "infinity", "minus-infinity", "nested-nan", "parsed-nan", "parsed-minus-infinity"],
)
def test_payload_hash__nan_or_infinity__refused(payload):
    with pytest.raises(PayloadError, match="NaN or Infinity") as refused:
        payload_hash(payload)
    assert "JSON cannot represent" in str(refused.value)

    with pytest.raises(PayloadError, match="NaN or Infinity"):
        canonical_json(payload)


@pytest.mark.parametrize(
    "payload",
    [{"body": "before \ud800 after"}, {"title": "\udfff"}, json.loads('{"body": "\\ud83d"}')],
    ids=["high-surrogate", "low-surrogate", "parsed-surrogate"],
)
def test_payload_hash__lone_surrogate__refused(payload):
    with pytest.raises(PayloadError, match="not valid UTF-8 \\(a lone surrogate\\)"):
        payload_hash(payload)


def test_payload_hash__surrogate_pair_from_json__is_a_valid_character():
    # An escaped pair is one character, not a lone surrogate, so it hashes like the literal.
    assert payload_hash(json.loads('{"body": "\\ud83d\\udea2"}')) == payload_hash({"body": "🚢"})


@pytest.mark.parametrize("payload", [{"body": {1, 2}}, {"body": b"bytes"}, {"body": object()}])
def test_payload_hash__not_plain_json__refused(payload):
    with pytest.raises(PayloadError, match="not plain JSON data"):
        payload_hash(payload)
