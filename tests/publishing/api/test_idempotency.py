"""Idempotency-Key on the API's POSTs (docs/api.md): the same key and body replays the stored
response; the same key with another body is 422; a request in flight with that key is 409; keys
are per user, kept for GALLEY_RETENTION_DAYS, and recorded in the write's own transaction."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from publishing.actions import idempotency
from publishing.actions.idempotency import purge_idempotency_records, request_fingerprint
from publishing.api import briefs as briefs_api
from publishing.models import Brief, IdempotencyRecord
from tests.publishing.api.support import ApiClient, problem, token_for
from workers.models import AuditEvent

BRIEF = {"title": "Harbour strike", "source_material": "Dockers walked out."}


@pytest.mark.django_db
def test_idempotency_key__same_key_same_body__replays_status_and_body_and_writes_once(editor_api):
    first = editor_api.post("/briefs", BRIEF, key="create-1")
    # The same body with other key order and whitespace is the same request.
    again = editor_api.post(
        "/briefs", raw=b'{"source_material": "Dockers walked out.",  "title": "Harbour strike"}', key="create-1"
    )
    assert first.status_code == again.status_code == 201
    assert json.loads(again.content) == json.loads(first.content)
    assert again["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert Brief.objects.count() == 1
    assert AuditEvent.objects.filter(event_type="brief.created").count() == 1


@pytest.mark.django_db
def test_idempotency_key__same_key_other_body__422_problem_and_nothing_written(editor_api):
    editor_api.post("/briefs", BRIEF, key="create-1")
    response = editor_api.post("/briefs", {**BRIEF, "title": "Budget vote"}, key="create-1")
    assert response.status_code == 422
    assert problem(response)["type"] == "urn:galley:problem:idempotency-key-reused"
    assert list(Brief.objects.values_list("title", flat=True)) == ["Harbour strike"]


@pytest.mark.django_db
def test_idempotency_key__same_key_other_endpoint__422(editor_api):
    created = json.loads(editor_api.post("/briefs", BRIEF, key="k").content)
    response = editor_api.post(
        f"/briefs/{created['id']}/revisions", {"base_revision": 0, "title": "T", "body": "B"}, key="k"
    )
    assert problem(response)["status"] == 422


@pytest.mark.django_db
def test_idempotency_key__scoped_per_user__another_users_same_key_writes_its_own(editor_api, editor2):
    other = ApiClient(token_for(editor2))
    editor_api.post("/briefs", BRIEF, key="shared")
    response = other.post("/briefs", {**BRIEF, "title": "Budget vote"}, key="shared")
    assert response.status_code == 201 and not response.has_header("Idempotent-Replayed")
    assert Brief.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("key", [None, "has space", "x" * 256, "ключ"])
def test_idempotency_key__missing_or_malformed__400_problem_and_nothing_written(editor_api, key):
    if key is None:
        response = editor_api.post("/briefs", BRIEF, key=None)
    else:
        response = editor_api.client.post(
            "/api/v1/briefs",
            json.dumps(BRIEF),
            content_type="application/json",
            headers={**editor_api.headers, "Idempotency-Key": key},
        )
    assert problem(response)["status"] == 400
    assert not Brief.objects.exists() and not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
def test_idempotency_key__refused_request__stores_nothing_so_the_key_works_once_corrected(editor_api):
    refused = editor_api.post("/briefs", {"title": " "}, key="create-1")
    assert refused.status_code == 400
    assert not IdempotencyRecord.objects.exists()
    # Another body under the same key is a new request: the refusal was not stored.
    assert editor_api.post("/briefs", BRIEF, key="create-1").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_idempotency_key__record_commits_with_the_write__a_failure_between_leaves_neither(editor_api, monkeypatch):
    """The stored response and the write are one transaction: if storing fails after the write,
    neither is there, and a retry with the key writes once."""

    def broken(**kwargs):
        raise RuntimeError("crash between the write and its record")

    monkeypatch.setattr("publishing.api.common.do_record_idempotent_response", broken)
    editor_api.client.raise_request_exception = False
    assert editor_api.post("/briefs", BRIEF, key="create-1").status_code == 500
    assert not Brief.objects.exists() and not IdempotencyRecord.objects.exists()
    monkeypatch.undo()
    assert editor_api.post("/briefs", BRIEF, key="create-1").status_code == 201
    assert Brief.objects.count() == 1


@pytest.mark.django_db
def test_key_retention__record_older_than_retention__is_absent_and_purged(editor_api, settings):
    settings.GALLEY_RETENTION_DAYS = 30
    editor_api.post("/briefs", BRIEF, key="old")
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(days=31))
    # An expired key is a new request: the same body writes again.
    assert not editor_api.post("/briefs", BRIEF, key="old").has_header("Idempotent-Replayed")
    assert Brief.objects.count() == 2
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(days=31))
    editor_api.post("/briefs", BRIEF, key="fresh")
    assert purge_idempotency_records() == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["fresh"]


def test_request_fingerprint__key_order_and_whitespace_do_not_count_path_and_method_do():
    a = request_fingerprint("POST", "/api/v1/briefs", b'{"a": 1, "b": [1, 2]}')
    assert a == request_fingerprint("POST", "/api/v1/briefs", b'{"b":[1,2],"a":1}')
    assert a != request_fingerprint("POST", "/api/v1/briefs/brief-001/revisions", b'{"a":1,"b":[1,2]}')
    assert a != request_fingerprint("POST", "/api/v1/briefs", b'{"a":2,"b":[1,2]}')


@pytest.mark.django_db(transaction=True)
def test_idempotency_key__request_in_flight__second_concurrent_request_409_then_replay(
    live_server, editor, monkeypatch
):
    """Two real HTTP requests with one key at once: while the first is inside its write, the
    second is refused 409 at once (it does not wait); after the first commits, the key replays."""
    secret = token_for(editor)
    inside, release = threading.Event(), threading.Event()
    real_create = briefs_api.check_create_brief

    def slow_create(**kwargs):
        inside.set()
        assert release.wait(timeout=20), "the test never released the first request"
        return real_create(**kwargs)

    monkeypatch.setattr(briefs_api, "check_create_brief", slow_create)
    headers = {"Authorization": f"Bearer {secret}", "Idempotency-Key": f"race-{uuid.uuid4()}"}
    url = f"{live_server.url}/api/v1/briefs"
    first: dict[str, httpx.Response] = {}

    def send_first() -> None:
        first["response"] = httpx.post(url, json=BRIEF, headers=headers, timeout=30)

    thread = threading.Thread(target=send_first)
    thread.start()
    try:
        assert inside.wait(timeout=20), "the first request never reached its write"
        second = httpx.post(url, json=BRIEF, headers=headers, timeout=30)
    finally:
        release.set()
        thread.join(timeout=30)
    assert second.status_code == 409
    assert second.headers["Content-Type"] == "application/problem+json"
    assert second.json()["type"] == "urn:galley:problem:idempotency-key-in-flight"
    assert second.headers["Retry-After"] == "1"
    assert first["response"].status_code == 201
    third = httpx.post(url, json=BRIEF, headers=headers, timeout=30)
    assert (third.status_code, third.json()) == (201, first["response"].json())
    assert third.headers["Idempotent-Replayed"] == "true"
    assert Brief.objects.count() == 1


def test_idempotency_lock_id__depends_on_user_and_key():
    class U:
        def __init__(self, pk):
            self.pk = pk

    lock = idempotency._lock_id
    assert lock(U(1), "k") == lock(U(1), "k")
    assert len({lock(U(1), "k"), lock(U(2), "k"), lock(U(1), "k2")}) == 3
