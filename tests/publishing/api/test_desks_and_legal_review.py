"""The API's desks and legal-review flag: a brief says its desk and flag, POST /briefs takes a desk,
POST and DELETE /briefs/{id}/legal-review raise and lift the flag, idempotently, with the usual refusals."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from publishing.actions.desks import check_save_desk
from publishing.models import Brief
from tests.publishing.api.support import API, ApiClient, problem, token_for
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def politics(operator):
    with transaction.atomic():
        return check_save_desk(None, values={"slug": "politics", "name": "Politics"}, acting_user=operator)


def delete(api: ApiClient, path: str):
    return api.client.delete(API + path, headers=api.headers)


def test_create_brief__desk__named_in_the_brief_and_the_list(editor_api, politics):
    created = editor_api.post("/briefs", {"title": "Budget vote", "desk": "politics"})
    plain = editor_api.post("/briefs", {"title": "Ferry timetable"})

    assert created.status_code == 201, created.content
    assert (created.json()["desk"], created.json()["legal_review"]) == ("politics", False)
    assert plain.json()["desk"] == "general"
    listed = {item["title"]: item["desk"] for item in editor_api.get("/briefs").json()["items"]}
    assert listed == {"Budget vote": "politics", "Ferry timetable": "general"}


def test_create_brief__unknown_desk__400_naming_the_desks_nothing_written(editor_api, politics):
    response = editor_api.post("/briefs", {"title": "Budget vote", "desk": "sport"})

    assert response.status_code == 400
    assert problem(response)["detail"] == "No desk is called 'sport'; choose among general, politics."
    assert not Brief.objects.exists()


def test_legal_review__editor_flags__idempotent__legal_lifts(editor_api, brief, legal):
    path = f"/briefs/{brief.public_id}/legal-review"
    legal_api = ApiClient(token_for(legal))

    flagged = editor_api.post(path)
    again = editor_api.post(path)
    shown = editor_api.get(f"/briefs/{brief.public_id}").json()["legal_review"]
    lifted = delete(legal_api, path)
    lifted_again = delete(legal_api, path)

    assert (flagged.status_code, flagged.json()) == (
        200,
        {"brief_id": brief.public_id, "legal_review": True, "changed": True},
    )
    assert (again.status_code, again.json()["changed"]) == (200, False)
    assert shown is True
    assert (lifted.status_code, lifted.json()) == (
        200,
        {"brief_id": brief.public_id, "legal_review": False, "changed": True},
    )
    assert lifted_again.json()["changed"] is False
    events = AuditEvent.objects.filter(subject_id=brief.public_id, event_type__startswith="brief.legal_review")
    assert list(events.order_by("id").values_list("event_type", flat=True)) == [
        "brief.legal_review_flagged",
        "brief.legal_review_lifted",
    ]


def test_legal_review__same_key_replays_the_stored_answer(editor_api, brief):
    path = f"/briefs/{brief.public_id}/legal-review"

    first = editor_api.post(path, key="flag-once")
    replay = editor_api.post(path, key="flag-once")

    assert replay["Idempotent-Replayed"] == "true"
    assert (
        json.loads(replay.content)
        == json.loads(first.content)
        == {
            "brief_id": brief.public_id,
            "legal_review": True,
            "changed": True,
        }
    )


def test_legal_review__lift_by_non_legal__403_nothing_written(editor_api, approver_api, brief):
    path = f"/briefs/{brief.public_id}/legal-review"
    editor_api.post(path)

    responses = [delete(editor_api, path), delete(approver_api, path)]

    for response in responses:
        assert response.status_code == 403
        assert problem(response)["detail"] == "Only members of Legal can lift a legal-review flag."
    brief.refresh_from_db()
    assert brief.legal_review is True


def test_legal_review__refusals__unknown_brief_404_no_token_401(editor_api, as_role):
    assert problem(editor_api.post("/briefs/brief-999/legal-review"))["status"] == 404
    assert as_role("anonymous").post("/briefs/brief-999/legal-review").status_code == 401
    assert delete(as_role("anonymous"), "/briefs/brief-999/legal-review").status_code == 401


def test_legal_review__operator_flag__403(operator_api, brief):
    response = operator_api.post(f"/briefs/{brief.public_id}/legal-review")

    assert response.status_code == 403
    assert "Only members of Editors or Approvers" in problem(response)["detail"]
