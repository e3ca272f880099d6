"""A write that meets the lock bound (GALLEY_LOCK_TIMEOUT_SECONDS) while another session holds the brief's
row lock: a clear "busy, try again" answer, nothing written, never a 500 and never a wait for the holder.

The JSON API answers problem details 503 with Retry-After (its Idempotency-Key is not spent: the same
key then succeeds); an approver's decision form answers a page with the typed comment shown back.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from approvals.models import Approval
from tests.concurrency import brief_locked
from tests.publishing.api.support import problem

pytestmark = pytest.mark.django_db(transaction=True)

# Well past this process's lock bound (the default): a write that waited for the holder sees it end.
HOLD_SECONDS = 20


def test_api_write__brief_lock_held__503_busy_with_retry_after_then_same_key_succeeds(editor_api, brief, revise):
    first = revise(brief, "Dockers walked out at dawn.")
    body = {"base_revision": first.number, "title": "Harbour strike", "body": "Talks resume on Monday."}
    with brief_locked(brief, at_most=HOLD_SECONDS) as released:
        response = editor_api.post(f"/briefs/{brief.public_id}/revisions", body, key="busy-1")
        assert not released.is_set(), "the write waited for the lock's holder"

    refused = problem(response)
    assert (response.status_code, refused["type"]) == (503, "urn:galley:problem:busy")
    assert "This brief is busy" in refused["detail"] and "try again" in refused["detail"]
    assert int(response["Retry-After"]) > 0
    assert brief.revisions.count() == 1

    response = editor_api.post(f"/briefs/{brief.public_id}/revisions", body, key="busy-1")
    assert response.status_code == 201, response.content
    assert brief.revisions.count() == 2


def test_decision_form__brief_lock_held__503_busy_page_keeps_the_comment(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    form = {
        "revision_number": revision.number,
        "payload_hash": revision.payload_hash,
        "decision": Approval.Decision.APPROVED,
        "comment": "Checked the figures with the port authority.",
    }
    with brief_locked(brief, at_most=HOLD_SECONDS) as released:
        response = client.post(reverse("approvals:decide", args=[brief.public_id, revision.number]), form)
        assert not released.is_set(), "the decision waited for the lock's holder"

    assert response.status_code == 503
    assert response["Retry-After"]
    page = response.content.decode()
    assert "This brief is busy" in page and "try again" in page
    assert "Checked the figures with the port authority." in page
    assert not Approval.objects.exists()
