"""The API's revisions carry the structured story (publishing/story.py): every field goes in and comes
back, a title-and-body revision keeps its payload, and a bad field is a 400 naming it, nothing written."""

from __future__ import annotations

import json

import pytest

from publishing.hashing import payload_hash
from publishing.models import Revision
from tests.publishing.api.support import ApiClient, problem
from tests.publishing.api.test_briefs import make_brief

pytestmark = pytest.mark.django_db

STORY = {
    "title": "Dockers walk out over pay",
    "standfirst": "Ships wait offshore as the union and the port prepare for talks.",
    "body": "Dockers walked out at **dawn**.\n\nShips wait.",
    "byline": "Ana Lopes",
    "section": "Business",
    "tags": ["port", "Strike", "strike", " pay "],
}


def test_revision_story__every_field_round_trips__hashed_as_stored(editor_api: ApiClient, editor):
    brief = make_brief(editor)

    created = editor_api.post(f"/briefs/{brief.public_id}/revisions", {"base_revision": 0, **STORY})

    assert created.status_code == 201
    body = json.loads(created.content)
    stored = Revision.objects.get(brief=brief, number=1)
    expected = {**STORY, "tags": ["port", "Strike", "pay"]}
    assert stored.payload == body["payload"] == expected
    assert body["payload_hash"] == stored.payload_hash == payload_hash(expected)
    assert {name: body[name] for name in expected} == expected
    fetched = json.loads(editor_api.get(f"/briefs/{brief.public_id}/revisions/1").content)
    assert {name: fetched[name] for name in [*expected, "payload", "payload_hash"]} == {
        name: body[name] for name in [*expected, "payload", "payload_hash"]
    }


def test_revision_story__title_and_body_only__the_payload_from_before_structured_stories(editor_api, editor):
    brief = make_brief(editor)

    sent = {"base_revision": 0, "title": "Strike", "body": "Dockers.", "standfirst": "", "byline": None, "tags": []}
    body = json.loads(editor_api.post(f"/briefs/{brief.public_id}/revisions", sent).content)

    assert body["payload"] == {"title": "Strike", "body": "Dockers."}
    assert (body["standfirst"], body["byline"], body["section"], body["tags"]) == ("", "", "", [])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("standfirst", "x" * 501, "standfirst: String should have at most 500 characters"),
        ("byline", "Ana\nLopes", "Byline must be a single line."),
        ("section", "Business\r\nSport", "Section must be a single line."),
        ("section", "x" * 81, "section: String should have at most 80 characters"),
        ("tags", ["port, strike"], "The tag 'port, strike' contains a comma; commas separate tags."),
        ("tags", [f"tag {n}" for n in range(21)], "tags: List should have at most 20 items"),
        ("tags", "port", "tags: Input should be a valid list"),
        ("tags", [1], "tags.0: Input should be a valid string"),
        ("title", "Dockers\nwalk out", "Headline must be a single line."),
        ("standfirst", 5, "standfirst: Input should be a valid string"),
        ("byline", "Ana\x00", "byline"),
    ],
)
def test_revision_story__a_bad_field__400_naming_it__nothing_written(editor_api, editor, field, value, message):
    brief = make_brief(editor)

    response = editor_api.post(f"/briefs/{brief.public_id}/revisions", {"base_revision": 0, **STORY, field: value})

    assert response.status_code == 400
    assert message in problem(response)["detail"]
    assert not brief.revisions.exists()
