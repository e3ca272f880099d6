"""Corrections through the JSON API (docs/api.md#corrections): a revision marked `correction` with its
`correction_note`, refused on a brief nothing was published from; revisions say `is_correction` and
`correction_note`; a brief lists its `corrections` with the channels each reached; an approval naming
channels that leave out a holder is a 400, nothing written."""

from __future__ import annotations

import json

import pytest

from approvals.models import Approval
from publishing.hashing import payload_hash
from publishing.models import Revision
from publishing.story import CORRECTION_NOTE_MAX_CHARS
from tests.publishing.api.support import ApiClient, problem
from tests.publishing.api.test_briefs import make_brief
from tests.publishing.handlers.test_channels import approve, run_worker

NOTE = "An earlier version said the strike began on Monday; it began on Tuesday."


def story(body: str = "Dockers walked out on Tuesday.", **extra: object) -> dict:
    return {"base_revision": 1, "title": "Harbour strike", "body": body, **extra}


@pytest.mark.django_db
def test_api_revision__no_correction__is_correction_false_and_payload_as_ever(editor_api: ApiClient, editor):
    brief = make_brief(editor)
    created = editor_api.post(f"/briefs/{brief.public_id}/revisions", story(base_revision=0))
    assert created.status_code == 201
    body = json.loads(created.content)
    assert (body["is_correction"], body["correction_note"]) == (False, "")
    assert body["payload"] == {"title": "Harbour strike", "body": "Dockers walked out on Tuesday."}
    assert json.loads(editor_api.get(f"/briefs/{brief.public_id}").content)["corrections"] == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("extra", "detail"),
    [
        ({"correction": True, "correction_note": NOTE}, "has not been published anywhere yet"),
        ({"correction_note": NOTE}, "the revision is not marked as a correction"),
        ({"correction": True}, "needs its public correction note"),
    ],
    ids=["unpublished-brief", "note-without-mark", "mark-without-note"],
)
def test_api_correction__refused__400_naming_why__nothing_written(editor_api: ApiClient, editor, revise, extra, detail):
    brief = make_brief(editor)
    revise(brief, "Dockers walked out on Monday.")
    refused = editor_api.post(f"/briefs/{brief.public_id}/revisions", story(**extra))
    assert refused.status_code == 400
    assert detail in problem(refused)["detail"]
    assert list(Revision.objects.filter(brief=brief).values_list("number", flat=True)) == [1]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"correction": True, "correction_note": "x" * (CORRECTION_NOTE_MAX_CHARS + 1)},
        {"correction": "yes", "correction_note": NOTE},
        {"correction": 1, "correction_note": NOTE},
    ],
    ids=["oversized-note", "string-mark", "number-mark"],
)
def test_api_correction__what_the_schema_refuses__400__nothing_written(editor_api: ApiClient, editor, revise, extra):
    brief = make_brief(editor)
    revise(brief, "Dockers walked out on Monday.")
    refused = editor_api.post(f"/briefs/{brief.public_id}/revisions", story(**extra))
    assert refused.status_code == 400
    assert Revision.objects.filter(brief=brief).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fast_retries")
def test_api_correction__published_brief__201_marked__listed__holder_left_out_400__then_reaches_it(
    target, add_channel, as_role, editor, approver, revise
):
    add_channel("partner-feed")
    brief = make_brief(editor)
    approve(revise(brief, "Dockers walked out on Monday."), by=approver, channels=["partner-feed"])
    run_worker()
    editor_api, approver_api = as_role("editor"), as_role("approver")

    created = editor_api.post(
        f"/briefs/{brief.public_id}/revisions", story(correction=True, correction_note=f" {NOTE}\r\n")
    )
    assert created.status_code == 201, created.content
    body = json.loads(created.content)
    assert (body["number"], body["is_correction"], body["correction_note"]) == (2, True, NOTE)
    expected = {"title": "Harbour strike", "body": "Dockers walked out on Tuesday.", "correction": True}
    assert body["payload"] == {**expected, "correction_note": NOTE}
    assert body["payload_hash"] == payload_hash(body["payload"])
    fetched = json.loads(editor_api.get(f"/briefs/{brief.public_id}/revisions/2").content)
    assert (fetched["is_correction"], fetched["correction_note"]) == (True, NOTE)
    (listed,) = json.loads(editor_api.get(f"/briefs/{brief.public_id}").content)["corrections"]
    assert (listed["revision"], listed["note"], listed["author"], listed["channels"]) == (2, NOTE, "eddie", [])

    decisions = f"/briefs/{brief.public_id}/revisions/2/decisions"
    decision = {"decision": "approved", "payload_hash": body["payload_hash"]}
    refused = approver_api.post(decisions, {**decision, "channels": ["web"]})
    assert refused.status_code == 400
    assert "Partner Feed (partner-feed) holds revision 1" in problem(refused)["detail"]
    assert not Approval.objects.filter(revision__number=2).exists()

    approved = approver_api.post(decisions, decision)
    assert approved.status_code == 201, approved.content
    assert json.loads(approved.content)["channels"] == ["partner-feed"]
    run_worker()
    (listed,) = json.loads(editor_api.get(f"/briefs/{brief.public_id}").content)["corrections"]
    (reached,) = listed["channels"]
    assert (reached["channel"], reached["name"]) == ("partner-feed", "Partner Feed")
    assert reached["permalink"] and reached["published_at"] and reached["verified_at"]
