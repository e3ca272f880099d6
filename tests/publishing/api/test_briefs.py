"""The JSON API's briefs, revisions and publication state: every endpoint and role, problem
details for every refusal, cursor pages that never overlap or skip."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.actions.api_tokens import hash_token
from publishing.actions.briefs import check_create_brief
from publishing.models import ApiToken, Brief, Revision
from publishing.roles import Role
from tests.publishing.api.support import ApiClient, problem, token_for
from workers.models import AuditEvent, Operation

pytestmark = pytest.mark.django_db

ROLES = ["editor", "approver", "operator", "no_group"]


def make_brief(user, title: str = "Harbour strike") -> Brief:
    with transaction.atomic(durable=True):
        return check_create_brief(title=title, source_material="Dockers walked out at dawn.", acting_user=user)


def write_revision(api: ApiClient, brief_id: str, *, base: int, body: str = "Dockers walked out.") -> dict:
    response = api.post(f"/briefs/{brief_id}/revisions", {"base_revision": base, "title": "Strike", "body": body})
    assert response.status_code == 201, response.content
    return json.loads(response.content)


# --- authentication ------------------------------------------------------------------------------


def test_api_token__stored_as_sha256_only__its_secret_authenticates(editor):
    secret = token_for(editor)
    (token,) = ApiToken.objects.filter(user=editor)
    assert token.token_hash == hash_token(secret) and secret not in token.token_hash
    assert ApiClient(secret).get("/briefs").status_code == 200


@pytest.mark.parametrize("secret", [None, "galley_not-a-token", "nonsense"])
def test_api_auth__missing_or_unknown_token__401_problem(secret):
    response = ApiClient(secret).get("/briefs")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert problem(response)["type"] == "urn:galley:problem:unauthenticated"


def test_api_auth__revoked_token_or_inactive_user__401(editor, make_user):
    secret = token_for(editor)
    ApiToken.objects.filter(user=editor).update(revoked_at="2026-01-01T00:00:00Z")
    assert ApiClient(secret).get("/briefs").status_code == 401
    other = make_user("gone", Role.EDITOR)
    other_secret = token_for(other)
    other.is_active = False
    other.save(update_fields=["is_active"])
    assert ApiClient(other_secret).get("/briefs").status_code == 401


def test_create_api_token_command__prints_the_secret_once_and_stores_its_hash(editor, capsys):
    from django.core.management import call_command

    call_command("create_api_token", editor.username, "--name", "ci")
    secret = capsys.readouterr().out.strip()
    assert ApiToken.objects.get(user=editor, name="ci").token_hash == hash_token(secret)
    assert ApiClient(secret).get("/briefs").status_code == 200


def test_openapi_schema__served_without_a_token_and_declares_problem_details():
    response = ApiClient(None).client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    refusal = schema["paths"]["/api/v1/briefs"]["post"]["responses"]["409"]
    assert list(refusal["content"]) == ["application/problem+json"]


# --- briefs --------------------------------------------------------------------------------------


def test_create_brief__editor__201_with_the_brief_audited_and_its_summary_started(editor_api, editor):
    response = editor_api.post("/briefs", {"title": "Harbour strike", "source_material": "Dockers walked out."})
    assert response.status_code == 201, response.content
    body = json.loads(response.content)
    brief = Brief.objects.get(public_id=body["id"])
    assert body["title"] == "Harbour strike" and body["author"] == editor.username and body["status"] == "drafting"
    assert AuditEvent.objects.filter(event_type="brief.created", subject_id=brief.public_id).count() == 1
    assert Operation.objects.for_subject("brief", brief.public_id).exists()


@pytest.mark.parametrize("role", ["approver", "operator", "no_group"])
def test_create_brief__not_an_editor__403_problem_and_nothing_written(as_role, role):
    response = as_role(role).post("/briefs", {"title": "Harbour strike"})
    assert response.status_code == 403
    assert problem(response)["detail"] == "Only members of Editors can create briefs."
    assert not Brief.objects.exists()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"title": "  "}, "title: String should match pattern"),
        ({"title": "a\x00b"}, "title: String should match pattern"),
        ({"title": "x" * 201}, "title: String should have at most 200 characters"),
        ({"title": "T", "source_material": "\x00"}, "source_material: String should match pattern"),
    ],
)
def test_create_brief__text_the_schema_refuses__400_problem_naming_the_field(editor_api, body, detail):
    response = editor_api.post("/briefs", body)
    assert response.status_code == 400
    assert problem(response)["detail"].startswith(detail)
    assert not Brief.objects.exists()


def test_create_brief__source_longer_than_the_limit__400_problem_from_the_action(editor_api, settings):
    settings.GALLEY_MAX_BODY_CHARS = 10
    response = editor_api.post("/briefs", {"title": "T", "source_material": "x" * 11})
    assert problem(response)["detail"] == "Source material is 11 characters long; the limit is 10."
    assert not Brief.objects.exists()


@pytest.mark.parametrize("raw", [b"{not json", b'{"title": 5}', b"[]", b'{"title": NaN}', b'{"title": "\xff"}'])
def test_create_brief__malformed_body__400_problem_with_errors(editor_api, raw):
    response = editor_api.post("/briefs", raw=raw)
    assert response.status_code == 400
    assert problem(response)["type"] == "urn:galley:problem:invalid-request"
    assert not Brief.objects.exists()


def test_list_briefs__every_role__200_newest_first(as_role, editor):
    first, second = make_brief(editor, "First"), make_brief(editor, "Second")
    for role in ("editor", "approver", "operator"):
        response = as_role(role).get("/briefs")
        assert response.status_code == 200
        assert [item["id"] for item in json.loads(response.content)["items"]] == [second.public_id, first.public_id]


def test_list_briefs__no_role__403(as_role):
    response = as_role("no_group").get("/briefs")
    assert response.status_code == 403
    assert problem(response)["detail"] == "You need the Editors, Approvers or Operators role to see briefs."


def test_list_briefs__cursor_pages__never_overlap_or_skip_even_with_new_briefs_meanwhile(editor_api, editor):
    made = [make_brief(editor, f"Brief {n}").public_id for n in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        page = json.loads(editor_api.get("/briefs", limit=3, **({"cursor": cursor} if cursor else {})).content)
        seen.extend(item["id"] for item in page["items"])
        if len(seen) == 3:
            make_brief(editor, "Created while paging")  # newer than every page: never shows up
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))


def test_list_briefs__status_and_query_filters(editor_api, editor, revise):
    harbour, other = make_brief(editor, "Harbour strike"), make_brief(editor, "Budget vote")
    revise(other, "The vote passed.")
    by_status = json.loads(editor_api.get("/briefs", status="in_review").content)["items"]
    assert [item["id"] for item in by_status] == [other.public_id]
    assert by_status[0]["latest_revision"] == 1
    by_query = json.loads(editor_api.get("/briefs", q="harbour").content)["items"]
    assert [item["id"] for item in by_query] == [harbour.public_id]
    by_id = json.loads(editor_api.get("/briefs", q=harbour.public_id.upper()).content)["items"]
    assert [item["id"] for item in by_id] == [harbour.public_id]


@pytest.mark.parametrize("params", [{"cursor": "not-a-cursor"}, {"status": "lost"}, {"limit": 0}, {"limit": 101}])
def test_list_briefs__invalid_cursor_or_filter__400_problem(editor_api, params):
    assert problem(editor_api.get("/briefs", **params))["status"] == 400


def test_get_brief__every_role_200__unknown_404(as_role, editor):
    brief = make_brief(editor)
    for role in ("editor", "approver", "operator"):
        body = json.loads(as_role(role).get(f"/briefs/{brief.public_id}").content)
        assert body["id"] == brief.public_id and body["source_material"] == "Dockers walked out at dawn."
    assert problem(as_role("no_group").get(f"/briefs/{brief.public_id}"))["status"] == 403
    assert problem(as_role("editor").get("/briefs/brief-999"))["detail"] == "There is no brief brief-999."


# --- revisions -----------------------------------------------------------------------------------


def test_create_revision__editor_on_the_latest__201_with_payload_hash(editor_api, editor):
    brief = make_brief(editor)
    body = write_revision(editor_api, brief.public_id, base=0)
    revision = Revision.objects.get(brief=brief, number=1)
    assert body["number"] == 1 and body["payload_hash"] == revision.payload_hash
    assert body["payload"] == {"title": "Strike", "body": "Dockers walked out."}


def test_revision_conflict__base_older_than_latest__409_naming_the_newer_revision(editor_api, editor):
    brief = make_brief(editor)
    write_revision(editor_api, brief.public_id, base=0)
    second = write_revision(editor_api, brief.public_id, base=1, body="The port is closed.")
    response = editor_api.post(
        f"/briefs/{brief.public_id}/revisions", {"base_revision": 1, "title": "Strike", "body": "My edit."}
    )
    assert response.status_code == 409
    body = problem(response)
    assert body["type"] == "urn:galley:problem:revision-conflict"
    assert body["current_revision"] == 2 and body["current_payload_hash"] == second["payload_hash"]
    # In the API's words (issue 18 item 6), not the web page's ("your text is kept below").
    assert body["detail"].startswith("Revision 2 has been written since revision 1, your base_revision.")
    assert "send your text again with base_revision 2" in body["detail"]
    assert brief.revisions.count() == 2


def test_create_revision__same_text_as_latest__200_and_nothing_written(editor_api, editor):
    brief = make_brief(editor)
    first = write_revision(editor_api, brief.public_id, base=0)
    response = editor_api.post(
        f"/briefs/{brief.public_id}/revisions", {"base_revision": 1, "title": "Strike", "body": "Dockers walked out."}
    )
    assert response.status_code == 200 and json.loads(response.content) == first
    assert brief.revisions.count() == 1


@pytest.mark.parametrize("role", ["approver", "operator", "no_group"])
def test_create_revision__not_an_editor__403(as_role, role, editor):
    brief = make_brief(editor)
    response = as_role(role).post(
        f"/briefs/{brief.public_id}/revisions", {"base_revision": 0, "title": "T", "body": "B"}
    )
    assert problem(response)["status"] == 403
    assert not brief.revisions.exists()


def test_create_revision__unknown_brief_404__negative_base_400(editor_api, editor):
    brief = make_brief(editor)
    missing = editor_api.post("/briefs/brief-999/revisions", {"base_revision": 0, "title": "T", "body": "B"})
    assert problem(missing)["status"] == 404
    negative = editor_api.post(f"/briefs/{brief.public_id}/revisions", {"base_revision": -1, "title": "T", "body": "B"})
    assert problem(negative)["status"] == 400


def test_get_and_list_revisions__every_role(as_role, editor, revise):
    brief = make_brief(editor)
    revise(brief, "One.")
    revise(brief, "Two.")
    for role in ("editor", "approver", "operator"):
        api = as_role(role)
        revisions = json.loads(api.get(f"/briefs/{brief.public_id}/revisions").content)  # a page (issue 18)
        assert [r["number"] for r in revisions["items"]] == [2, 1]
        assert json.loads(api.get(f"/briefs/{brief.public_id}/revisions/1").content)["body"] == "One."
    assert problem(as_role("editor").get(f"/briefs/{brief.public_id}/revisions/3"))["status"] == 404
    assert problem(as_role("editor").get(f"/briefs/{brief.public_id}/revisions/0"))["status"] == 400
    assert problem(as_role("no_group").get(f"/briefs/{brief.public_id}/revisions"))["status"] == 403


def test_list_revisions__pages_by_before_like_every_list(editor_api, editor, revise):
    brief = make_brief(editor)
    for n in range(5):
        revise(brief, f"Draft {n}.")
    seen, before, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"before": before} if before else {})}
        page = json.loads(editor_api.get(f"/briefs/{brief.public_id}/revisions", **params).content)
        seen.extend(item["number"] for item in page["items"])
        before, pages = page["next_cursor"], pages + 1
        if before is None:
            break
    assert (seen, pages) == ([5, 4, 3, 2, 1], 3)


# --- publication state ---------------------------------------------------------------------------


def test_publication_state__not_approved_then_approved__none_then_publishing(as_role, editor, approver, revise):
    brief = make_brief(editor)
    revision = revise(brief, "Dockers walked out.")
    api = as_role("approver")
    state = json.loads(api.get(f"/briefs/{brief.public_id}/publication").content)
    assert state["published_revision"] is None and state["latest"]["state"] == "none"
    with transaction.atomic(durable=True):
        check_decide_revision(
            brief.public_id,
            revision_number=1,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=approver,
        )
    state = json.loads(api.get(f"/briefs/{brief.public_id}/publication").content)
    assert state["status"] == "approved" and state["latest"]["state"] == "publishing"
    assert [op["key"] for op in state["latest"]["operations"]] == [f"publish:{brief.public_id}:revision-1"]
    assert problem(as_role("no_group").get(f"/briefs/{brief.public_id}/publication"))["status"] == 403


def test_publication_state__brief_without_revisions__latest_null(editor_api, editor):
    brief = make_brief(editor)
    state = json.loads(editor_api.get(f"/briefs/{brief.public_id}/publication").content)
    assert state == {
        "brief_id": brief.public_id,
        "status": "drafting",
        "published_revision": None,
        "published": None,
        "latest": None,
    }


def test_api_docs_page__served_without_a_token():
    response = ApiClient(None).client.get("/api/v1/docs")
    assert response.status_code == 200
    assert b"swagger" in response.content.lower()
