"""The reference target (docs/target-protocol.md) served for real on a free port, driven through TargetClient.

The ledger (/_ledger) is the target's record of first applications: every test that
retries, replays or fails counts it, because "applied exactly once" is what Galley relies on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from galley.reference_target import Faults, ReferenceTarget
from publishing.clients.target import (
    Receipt,
    TargetAmbiguous,
    TargetAuthError,
    TargetClient,
    TargetConnectionError,
    TargetGone,
    TargetInProgress,
    TargetKeyMismatch,
    TargetNotFound,
    TargetRejected,
    TargetServerError,
    TargetStaleRevision,
    TargetThrottled,
    TargetTimeout,
)
from publishing.hashing import payload_hash
from tests.processes import free_port

TOKEN = "target-test-token"
BASE_DIR = Path(__file__).resolve().parents[2]
PAYLOAD = {"title": "Harbour strike", "body": "Dockers walked out at dawn.\n\nThe port is closed."}


def key(brief: str, revision: int) -> str:
    return f"publish:{brief}:revision-{revision}"


def request_body(brief: str = "brief-042", revision: int = 1, payload: dict[str, Any] | None = None) -> dict:
    payload = payload if payload is not None else PAYLOAD
    return {
        "operation_key": key(brief, revision),
        "brief_id": brief,
        "revision": revision,
        "payload_hash": payload_hash(payload),
        "payload": payload,
    }


def publish(client: TargetClient, **kwargs: Any) -> tuple[Receipt, bool]:
    return client.publish(**request_body(**kwargs))


def ledger(target: ReferenceTarget) -> list[dict[str, Any]]:
    response = httpx.get(f"{target.url}/_ledger", timeout=5)
    assert response.status_code == 200
    return response.json()["applications"]


@pytest.fixture
def start_target(tmp_path: Path) -> Iterator[Callable[..., ReferenceTarget]]:
    started: list[ReferenceTarget] = []

    def start(faults: Faults | None = None, db_name: str = "target.sqlite3") -> ReferenceTarget:
        target = ReferenceTarget(db_path=tmp_path / db_name, token=TOKEN, faults=faults).start()
        started.append(target)
        return target

    yield start
    for target in started:
        target.stop()


@pytest.fixture
def target(start_target) -> ReferenceTarget:
    return start_target()


def client_for(target: ReferenceTarget, *, timeout: float = 5.0, token: str = TOKEN) -> TargetClient:
    return TargetClient(base_url=target.url, token=token, timeout=timeout)


@pytest.fixture
def client(target: ReferenceTarget) -> Iterator[TargetClient]:
    with client_for(target) as client:
        yield client


def raw_post(target: ReferenceTarget, body: object, **headers: str) -> httpx.Response:
    base = {"Authorization": f"Bearer {TOKEN}"}
    if isinstance(body, dict) and "operation_key" in body:
        base["Idempotency-Key"] = str(body["operation_key"])
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    return httpx.post(
        f"{target.url}/v1/publications",
        content=content,
        headers={**base, "Content-Type": "application/json", **headers},
        timeout=5,
    )


# --- applications, replays and conflicts (docs/invariants.md#i1, #i2, #i4) ------------------


def test_publish__first_application__201_and_one_ledger_row(target, client):
    receipt, first = publish(client)
    assert first is True
    assert receipt.operation_key == key("brief-042", 1)
    assert receipt.payload_hash == payload_hash(PAYLOAD)
    assert receipt.permalink == f"{target.url}/articles/{receipt.id}"
    (row,) = ledger(target)
    assert (row["operation_key"], row["brief_id"], row["revision"], row["payload_hash"]) == (
        key("brief-042", 1),
        "brief-042",
        1,
        payload_hash(PAYLOAD),
    )


def test_publish__invariant1_replay_same_key__200_same_body_not_applied_again(target):
    first = raw_post(target, request_body())
    second = raw_post(target, request_body())
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.content == first.content
    assert len(ledger(target)) == 1


def test_publish__invariant1_replay_through_client__same_receipt(target, client):
    receipt, _ = publish(client)
    again, first = publish(client)
    assert first is False
    assert again == receipt
    assert len(ledger(target)) == 1


def test_publish__invariant2_same_key_other_hash__422_key_mismatch(target, client):
    publish(client)
    other = {"title": "Harbour strike", "body": "A different text."}
    body = {**request_body(), "payload": other, "payload_hash": payload_hash(other)}
    with pytest.raises(TargetKeyMismatch) as caught:
        client.publish(**body)
    assert caught.value.status == 422
    assert len(ledger(target)) == 1


def test_publish__invariant4_older_revision__409_stale_with_current(target, client):
    publish(client, revision=3)
    with pytest.raises(TargetStaleRevision) as caught:
        publish(client, revision=2)
    assert caught.value.current_revision == 3
    with pytest.raises(TargetStaleRevision):
        client.publish(**{**request_body(revision=3), "operation_key": "publish:brief-042:revision-3:other"})
    assert [row["revision"] for row in ledger(target)] == [3]


def test_publish__invariant4_other_brief__not_fenced(target, client):
    publish(client, brief="brief-001", revision=5)
    _, first = publish(client, brief="brief-002", revision=1)
    assert first is True


def test_publish__fence_off__accepts_older_revision(start_target):
    target = start_target(Faults(fence_off=True))
    with client_for(target) as client:
        publish(client, revision=3)
        _, first = publish(client, revision=2)
    assert first is True
    assert [row["revision"] for row in ledger(target)] == [3, 2]


def test_publish__storage_survives_restart__replay_after_restart(start_target):
    first_run = start_target()
    with client_for(first_run) as client:
        receipt, _ = publish(client)
    first_run.stop()
    second_run = start_target()
    with client_for(second_run) as client:
        assert client.lookup(key("brief-042", 1)) == receipt
        again, first = publish(client)
    assert (again, first) == (receipt, False)
    assert len(ledger(second_run)) == 1


# --- look-up, read-back, permalink (docs/invariants.md#i10) ---------------------------------


def test_lookup__by_key__receipt_or_none(client):
    assert client.lookup(key("brief-042", 1)) is None
    receipt, _ = publish(client)
    assert client.lookup(key("brief-042", 1)) == receipt


def test_read_back__holds_payload_hash_and_permalink(target, client):
    receipt, _ = publish(client)
    assert client.read_back(receipt.id) == receipt
    raw = httpx.get(
        f"{target.url}/v1/publications/{receipt.id}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
    ).json()
    assert raw["payload"] == PAYLOAD
    assert raw["published_at"]
    with pytest.raises(TargetNotFound):
        client.read_back("pub-doesnotexist")


def test_permalink__invariant10_page_escapes_markup_and_shows_only_the_article(target, client):
    payload = {"title": "<script>alert('t')</script>", "body": 'Bold <b>claims</b> & "quotes"'}
    receipt, _ = publish(client, payload=payload)
    text = client.fetch_permalink(receipt.permalink)
    assert payload["title"] in text and payload["body"] in text
    page = httpx.get(receipt.permalink, timeout=5)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "<script>" not in page.text and "<b>" not in page.text
    assert "&lt;script&gt;alert(&#x27;t&#x27;)&lt;/script&gt;" in page.text
    assert "Bold &lt;b&gt;claims&lt;/b&gt; &amp; &quot;quotes&quot;" in page.text
    # The protocol defines no markup beyond the article (docs/target-protocol.md#permalink); the page
    # carries none Galley could come to rely on.
    assert '<meta name="galley' not in page.text and payload_hash(payload) not in page.text


def test_permalink__unknown__404(target, client):
    with pytest.raises(TargetNotFound):
        client.fetch_permalink(f"{target.url}/articles/pub-doesnotexist")


# --- refusals (docs/invariants.md#i9: terminal failures apply nothing) -----------------------


def test_auth__missing_401__wrong_403(target):
    missing = httpx.post(f"{target.url}/v1/publications", json=request_body(), timeout=5)
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    with client_for(target, token="wrong") as wrong, pytest.raises(TargetAuthError) as caught:
        publish(wrong)
    assert caught.value.status == 403
    with client_for(target, token="wrong") as wrong, pytest.raises(TargetAuthError):
        wrong.lookup(key("brief-042", 1))
    assert httpx.get(f"{target.url}/v1/publications?operation_key=x", timeout=5).status_code == 401
    assert ledger(target) == []


@pytest.mark.parametrize(
    ("body", "headers", "detail"),
    [
        (b"{not json", {}, "not valid JSON"),
        (b'"a string"', {}, "must be a JSON object"),
        (b"\xff\xfe", {}, "not valid UTF-8"),
        ({**request_body(), "revision": "1"}, {}, "revision must be an integer"),
        ({**request_body(), "revision": 0}, {}, "revision must be an integer"),
        ({**request_body(), "revision": True}, {}, "revision must be an integer"),
        ({k: v for k, v in request_body().items() if k != "brief_id"}, {}, "brief_id"),
        ({**request_body(), "payload_hash": "ABC"}, {}, "64 lowercase hex"),
        ({**request_body(), "payload": {"title": "t"}}, {}, "payload.body"),
        ({**request_body(), "payload": ["t"]}, {}, "payload must be a JSON object"),
        (request_body(), {"Idempotency-Key": "publish:other"}, "must equal operation_key"),
    ],
    ids=[
        "malformed",
        "not-object",
        "bad-utf8",
        "revision-string",
        "revision-zero",
        "revision-bool",
        "missing-brief",
        "hash-not-hex",
        "payload-no-body",
        "payload-list",
        "key-header-differs",
    ],
)
def test_publish__invalid_body__400_nothing_applied(target, body, headers, detail):
    response = raw_post(target, body, **headers)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert detail in response.json()["detail"]
    assert ledger(target) == []


def test_publish__missing_idempotency_key__400(target):
    response = httpx.post(
        f"{target.url}/v1/publications",
        json=request_body(),
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=5,
    )
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["detail"]


def test_publish__nan_in_body__400(target):
    content = request_body()
    raw = httpx.Request("POST", "/", json=content).content.replace(b'"revision":1', b'"revision":NaN')
    response = raw_post(target, raw, **{"Idempotency-Key": content["operation_key"]})
    assert response.status_code == 400
    assert "NaN" in response.json()["detail"]


def test_publish__hash_not_of_payload__rejected_and_nothing_applied(target, client):
    body = {**request_body(), "payload_hash": payload_hash({"title": "x", "body": "y"})}
    with pytest.raises(TargetRejected) as caught:
        client.publish(**body)
    assert caught.value.status == 400
    assert "does not match the payload" in str(caught.value)
    assert ledger(target) == []


# --- concurrency and faults (docs/invariants.md#i8, #i9, #i12) -------------------------------


def test_publish__two_concurrent_same_key__one_201_other_409_or_replay_ledger_one(start_target):
    target = start_target(Faults(latency_ms=300))
    outcomes: list[object] = []
    barrier = threading.Barrier(2)

    def send() -> None:
        with client_for(target) as client:
            barrier.wait()
            try:
                outcomes.append(publish(client)[1])
            except TargetInProgress as exc:
                outcomes.append(exc)

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert outcomes.count(True) == 1
    (other,) = [outcome for outcome in outcomes if outcome is not True]
    assert other is False or isinstance(other, TargetInProgress)
    assert len(ledger(target)) == 1


def test_publish__duplicate_while_first_in_flight__409_in_progress_then_replay(start_target):
    target = start_target(Faults(latency_ms=2000))
    results: list[tuple[Receipt, bool]] = []
    with client_for(target) as client:
        first = threading.Thread(target=lambda: results.append(publish(client)))
        first.start()
        # The duplicate goes once the first request holds the key (the target's in-flight set), however
        # slowly a loaded CPU gets it there; a fixed pause would assume it had. The latency leaves ample
        # time for the duplicate to arrive while the first is still held.
        deadline = time.monotonic() + 10
        while key("brief-042", 1) not in target._in_flight:
            assert time.monotonic() < deadline, "the first request never reached the target"
            time.sleep(0.01)
        with pytest.raises(TargetInProgress) as caught:
            publish(client)
        first.join(10)
        assert caught.value.status == 409
        assert results[0][1] is True
        assert publish(client) == (results[0][0], False)
    assert len(ledger(target)) == 1


@pytest.mark.parametrize(("rate", "status"), [("rate_429", 429), ("rate_503", 503)])
def test_publish__invariant9_throttled__retry_after_and_nothing_applied(start_target, rate, status):
    target = start_target(Faults(**{rate: 1.0}, retry_after=7))
    with client_for(target) as client, pytest.raises(TargetThrottled) as caught:
        publish(client)
    assert caught.value.status == status
    assert caught.value.retry_after == 7.0
    assert ledger(target) == []


def test_publish__invariant9_500__server_error_nothing_applied(start_target):
    target = start_target(Faults(rate_500=1.0))
    with client_for(target) as client, pytest.raises(TargetServerError) as caught:
        publish(client)
    assert caught.value.status == 500
    assert ledger(target) == []


def test_publish__invariant9_commit_then_hang__timeout_but_applied_and_found_by_lookup(start_target):
    target = start_target(Faults(rate_hang=1.0, hang_seconds=5))
    # The client waits long enough for the commit even on a loaded CPU (the ledger is read right after),
    # and gives up well before the hang ends.
    with client_for(target, timeout=2.0) as client:
        with pytest.raises(TargetTimeout) as caught:
            publish(client)
        assert isinstance(caught.value, TargetAmbiguous)
        assert [row["operation_key"] for row in ledger(target)] == [key("brief-042", 1)]
        found = client.lookup(key("brief-042", 1))
    assert found is not None and found.payload_hash == payload_hash(PAYLOAD)


def test_publish__invariant12_commit_then_drop__ambiguous_but_applied(start_target):
    target = start_target(Faults(rate_drop=1.0))
    with client_for(target) as client:
        with pytest.raises(TargetConnectionError) as caught:
            publish(client)
        assert isinstance(caught.value, TargetAmbiguous)
        assert len(ledger(target)) == 1
        assert client.lookup(key("brief-042", 1)) is not None


# --- retraction (docs/target-protocol.md#retraction, docs/invariants.md#i16) ----------------------------


def retraction_key(brief: str, revision: int) -> str:
    return f"retract:{brief}:revision-{revision}"


def retract(
    client: TargetClient, publication_id: str, brief: str = "brief-042", revision: int = 1, reason: str = "libel"
):
    return client.retract(
        publication_id=publication_id,
        operation_key=retraction_key(brief, revision),
        brief_id=brief,
        revision=revision,
        reason=reason,
    )


def target_with_publication(start_target: Callable[..., ReferenceTarget]) -> tuple[ReferenceTarget, Receipt]:
    """A healthy target holding revision 1 of brief-042 (faults are set afterwards by the test)."""
    target = start_target()
    with client_for(target) as client:
        first, _ = publish(client)
    return target, first


def retractions(target: ReferenceTarget) -> list[dict[str, Any]]:
    return httpx.get(f"{target.url}/_retractions", timeout=5).json()["retractions"]


def raw_retract(target: ReferenceTarget, publication_id: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{target.url}/v1/publications/{publication_id}/retraction",
        json=body,
        headers={"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": str(body.get("operation_key", ""))},
        timeout=5,
    )


def test_retract__i16_first_201_then_replay_200_same_body_one_retraction(target, client):
    first, _ = publish(client, revision=1)
    body = {"operation_key": retraction_key("brief-042", 1), "brief_id": "brief-042", "revision": 1, "reason": "libel"}
    applied = raw_retract(target, first.id, body)
    replayed = raw_retract(target, first.id, body)
    assert (applied.status_code, replayed.status_code) == (201, 200)
    assert applied.json() == replayed.json()
    assert set(applied.json()) == {"id", "operation_key", "revision", "retracted", "retracted_at"}
    assert applied.json()["id"] == first.id and applied.json()["retracted"] is True
    assert len(retractions(target)) == 1


def test_retract__i16_every_publication_of_the_brief_reads_back_retracted_and_its_permalink_is_gone(target, client):
    older, _ = publish(client, revision=1)
    newer, _ = publish(client, revision=2, payload={"title": "Harbour strike", "body": "Corrected."})
    other, _ = publish(client, brief="brief-007")
    assert client.read_back(newer.id).retracted is False
    receipt = retract(client, newer.id, revision=2)
    assert (receipt.id, receipt.revision, receipt.retracted) == (newer.id, 2, True) and receipt.retracted_at
    for publication in (older, newer):
        back = client.read_back(publication.id)
        assert back.retracted is True and back.retracted_at
        with pytest.raises(TargetGone) as gone:
            client.fetch_permalink(publication.permalink)
        assert gone.value.status == 410
    assert client.lookup(key("brief-042", 1)).retracted is True
    assert client.read_back(other.id).retracted is False
    assert "Harbour strike" in client.fetch_permalink(other.permalink)


def test_retract__i4_fence__a_publish_of_the_retracted_revision_or_older_is_stale_a_newer_one_publishes(target, client):
    first, _ = publish(client, revision=1)
    retract(client, first.id, revision=1)
    with pytest.raises(TargetStaleRevision) as stale:
        client.publish(**{**request_body(revision=1), "operation_key": "publish:brief-042:revision-1:web"})
    assert stale.value.current_revision == 1
    again, applied = publish(client, revision=2)
    assert applied
    back = client.read_back(again.id)
    assert back.retracted is False and "Harbour strike" in client.fetch_permalink(again.permalink)
    # What was taken down stays down: the retracted revision's page does not come back with the newer one.
    assert client.read_back(first.id).retracted is True


def test_retract__newer_revision_held__409_stale_with_current_nothing_retracted(target, client):
    first, _ = publish(client, revision=1)
    publish(client, revision=2)
    with pytest.raises(TargetStaleRevision) as stale:
        retract(client, first.id, revision=1)
    assert stale.value.current_revision == 2
    assert retractions(target) == []
    assert client.read_back(first.id).retracted is False


def test_retract__same_key_other_reason__422_key_mismatch(target, client):
    first, _ = publish(client)
    retract(client, first.id, reason="libel")
    with pytest.raises(TargetKeyMismatch):
        retract(client, first.id, reason="another reason")
    assert len(retractions(target)) == 1


def test_retract__unknown_id__404_not_found(target, client):
    with pytest.raises(TargetNotFound) as caught:
        retract(client, "pub-does-not-exist")
    assert not isinstance(caught.value, TargetGone)
    assert retractions(target) == []


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"brief_id": "brief-042", "revision": 1, "reason": "x"}, "operation_key"),
        ({"operation_key": "retract:brief-042:revision-1", "brief_id": "brief-042", "revision": 1}, "reason"),
        (
            {"operation_key": "retract:brief-042:revision-1", "brief_id": "brief-042", "revision": 0, "reason": "x"},
            "revision",
        ),
        (
            {"operation_key": "retract:brief-042:revision-1", "brief_id": "brief-007", "revision": 1, "reason": "x"},
            "not of brief-007",
        ),
        (
            {"operation_key": "retract:brief-042:revision-3", "brief_id": "brief-042", "revision": 3, "reason": "x"},
            "never published",
        ),
    ],
)
def test_retract__invalid__400_nothing_retracted(target, client, body, detail):
    first, _ = publish(client)
    response = raw_retract(target, first.id, body)
    assert response.status_code == 400
    assert detail in response.json()["detail"]
    assert retractions(target) == []


def test_retract__duplicate_while_first_in_flight__409_in_progress_then_replay(start_target):
    target, first = target_with_publication(start_target)
    target.faults = Faults(latency_ms=2000)
    outcome: list[Any] = []
    with client_for(target) as client:
        slow = threading.Thread(target=lambda: outcome.append(retract(client, first.id)))
        slow.start()
        # As for publishes: the duplicate goes once the first request holds the key, however slowly.
        deadline = time.monotonic() + 10
        while retraction_key("brief-042", 1) not in target._in_flight:
            assert time.monotonic() < deadline, "the first retraction never reached the target"
            time.sleep(0.01)
        with pytest.raises(TargetInProgress):
            retract(client, first.id)
        slow.join(10)
        assert retract(client, first.id) == outcome[0]
    assert len(retractions(target)) == 1


@pytest.mark.parametrize(("rate", "error"), [("rate_429", TargetThrottled), ("rate_500", TargetServerError)])
def test_retract__invariant9_faults__nothing_retracted(start_target, rate, error):
    target, first = target_with_publication(start_target)
    target.faults = Faults(**{rate: 1.0}, retry_after=3)
    with client_for(target) as client, pytest.raises(error):
        retract(client, first.id)
    assert retractions(target) == []


def test_retract__invariant12_commit_then_drop__ambiguous_but_retracted_and_read_back_says_so(start_target):
    target, first = target_with_publication(start_target)
    target.faults = Faults(rate_drop=1.0)
    with client_for(target) as client:
        with pytest.raises(TargetConnectionError):
            retract(client, first.id)
        assert len(retractions(target)) == 1
        assert client.read_back(first.id).retracted is True


def test_retract__storage_survives_restart__replay_after_restart(start_target):
    target = start_target(db_name="kept.sqlite3")
    with client_for(target) as client:
        first, _ = publish(client)
        receipt = retract(client, first.id)
    target.stop()
    again = start_target(db_name="kept.sqlite3")
    with client_for(again) as client:
        assert retract(client, first.id) == receipt
        assert client.read_back(first.id).retracted is True
    assert len(retractions(again)) == 1


def test_faults__same_seed__same_draws(tmp_path):
    faults = Faults(rate_429=0.5, rate_hang=0.3, seed=42)
    draws = []
    for name in ("a.sqlite3", "b.sqlite3"):
        target = ReferenceTarget(db_path=tmp_path / name, token=TOKEN, faults=faults)
        draws.append([target.draw() for _ in range(20)])
        target.stop()
    assert draws[0] == draws[1]
    assert any(draw.throttle for draw in draws[0]) and not all(draw.throttle for draw in draws[0])


def test_faults__rate_out_of_range__refused():
    with pytest.raises(ValueError, match="rate_429"):
        Faults(rate_429=1.5)


def test_arrivals__every_valid_post_with_its_time_key_and_answer(start_target):
    target = start_target(Faults(rate_429=1.0, retry_after=7))
    before = time.time()
    assert raw_post(target, request_body(revision=1)).status_code == 429
    target.faults = Faults()
    assert raw_post(target, request_body(revision=2)).status_code == 201
    assert raw_post(target, {"operation_key": "not a publication"}).status_code == 400
    arrivals = httpx.get(f"{target.url}/_arrivals", timeout=5).json()["arrivals"]
    assert [(a["operation_key"], a["status"]) for a in arrivals] == [
        (key("brief-042", 1), 429),
        (key("brief-042", 2), 201),
    ]
    assert before <= arrivals[0]["arrived_at"] <= arrivals[1]["arrived_at"] <= time.time()
    assert arrivals == target.arrivals()


def test_health(target):
    assert httpx.get(f"{target.url}/_health", timeout=5).json() == {"status": "ok"}


# --- connections: kept alive, so a publication is not three TCP connects ------------------------


def raw_exchange(sock: socket.socket, request: bytes) -> bytes:
    """Send one HTTP request on `sock` and read its answer (headers and the Content-Length body)."""
    sock.sendall(request)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        if not chunk:
            return answer
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = int(next(line.split(b":")[1] for line in lines if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_connections__a_publication_s_calls_share_one_connection(target):
    body = httpx.Request("POST", "/", json=request_body()).content
    post = (
        f"POST /v1/publications HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Idempotency-Key: {key('brief-042', 1)}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((target.host, target.port), timeout=5) as sock:
        created = raw_exchange(sock, post)
        assert created.startswith(b"HTTP/1.1 201") and b"Connection: close" not in created
        receipt = json.loads(created.partition(b"\r\n\r\n")[2])
        read_back = f"GET /v1/publications/{receipt['id']} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        assert raw_exchange(sock, read_back.encode()).startswith(b"HTTP/1.1 200")
        page = f"GET {urlsplit(receipt['permalink']).path} HTTP/1.1\r\nHost: t\r\n\r\n"
        assert raw_exchange(sock, page.encode()).startswith(b"HTTP/1.1 200")
        assert raw_exchange(sock, post).startswith(b"HTTP/1.1 200")  # a replay, on the same connection
    assert len(ledger(target)) == 1


def test_connections__stop_ends_an_idle_kept_alive_connection(start_target):
    target = start_target()
    with socket.create_connection((target.host, target.port), timeout=5) as sock:
        assert raw_exchange(sock, b"GET /_health HTTP/1.1\r\nHost: t\r\n\r\n").startswith(b"HTTP/1.1 200")
        target.stop()
        sock.settimeout(5)
        assert sock.recv(1) == b""  # the target hung up: a stopped target serves nothing more


def test_connections__an_answer_sent_before_the_body_was_read_closes_the_connection(target):
    with socket.create_connection((target.host, target.port), timeout=5) as sock:
        answer = raw_exchange(
            sock,
            b"POST /v1/publications HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 400") and b"Connection: close" in answer
        # The unread body is never taken for a next request: the connection is closed.
        assert sock.recv(1) == b""


# --- the program as a real process ----------------------------------------------------------


def target_env(**overrides: str) -> dict[str, str]:
    """This environment without Django's settings, Galley's database or a target token, plus overrides."""
    unset = {"DATABASE_URL", "DJANGO_SETTINGS_MODULE", "GALLEY_TARGET_TOKEN"}
    return {**{k: v for k, v in os.environ.items() if k not in unset}, **overrides}


def refused(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m galley.reference_target *args` on a free port and a scratch file, expected to refuse to start."""
    argv = [sys.executable, "-m", "galley.reference_target", "--port", "0", "--db", str(tmp_path / "t.sqlite3"), *args]
    result = subprocess.run(argv, cwd=BASE_DIR, env=target_env(), capture_output=True, text=True, timeout=60)
    assert not (tmp_path / "t.sqlite3").exists()
    return result


@pytest.mark.integration
def test_program__imports_no_django():
    check = (
        "import sys, galley.reference_target.__main__; "
        "loaded = [m for m in sys.modules if m == 'django' or m.startswith('django.')]; "
        "assert not loaded, loaded"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=BASE_DIR, env=target_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.integration
def test_program__no_token__exits_2_naming_the_option_and_variable(tmp_path):
    result = refused(tmp_path)
    assert result.returncode == 2
    assert "no bearer token: pass --token or set GALLEY_TARGET_TOKEN" in result.stderr


@pytest.mark.integration
def test_program__fault_rate_out_of_range__exits_2_with_the_reason(tmp_path):
    result = refused(tmp_path, "--token", TOKEN, "--rate-503", "1.5")
    assert result.returncode == 2
    assert "rate_503 must be a probability between 0 and 1, got 1.5" in result.stderr


@pytest.mark.acceptance
def test_program__serves_publish__sigterm_exits_zero(tmp_path):
    port = free_port()
    env = target_env(GALLEY_VAR_DIR=str(tmp_path), GALLEY_TARGET_TOKEN=TOKEN)
    process = subprocess.Popen(
        [sys.executable, "-m", "galley.reference_target", "--port", str(port), "--seed", "1"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read()
            try:
                if httpx.get(f"{base_url}/_health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "reference target not healthy within 60 s"
            time.sleep(0.1)
        with TargetClient(base_url=base_url, token=TOKEN, timeout=5) as client:
            receipt, first = publish(client)
            assert first is True
            assert PAYLOAD["title"] in client.fetch_permalink(receipt.permalink)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert f"reference target on {base_url}" in output
    assert (tmp_path / "reference-target.sqlite3").exists()
