"""publishing.api.briefs, what the web UI's brief page offers besides revisions: replacing a brief's
source material (web: "Edit source material") and using the pipeline's AI suggestion (web: "Use as
the next revision"). Same roles and actions as the views; Idempotency-Key; problem details."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.clients import ai as ai_providers
from publishing.hashing import source_hash
from publishing.identities import step_identity
from publishing.models import Brief, IdempotencyRecord, StepArtifact, SummaryRun
from tests.publishing.api.support import ApiClient, problem, token_for
from tests.publishing.handlers.test_summaries import SOURCE, CountingProvider, run_pipeline
from workers.models import AuditEvent


@pytest.fixture
def provider(monkeypatch) -> CountingProvider:
    counting = CountingProvider()
    monkeypatch.setattr(ai_providers, "provider_from_settings", lambda: counting)
    return counting


NEW_SOURCE = {"source_material": "The port authority called for talks on Tuesday."}


def make_brief(user) -> Brief:
    with transaction.atomic(durable=True):
        return check_create_brief(title="Harbour strike", source_material=SOURCE, acting_user=user)


def source_changes(brief: Brief) -> int:
    return AuditEvent.objects.filter(event_type="brief.source_changed", subject_id=brief.public_id).count()


# --- source material -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_replace_source__editor__200_brief_with_the_new_text__audited__a_new_summary_run_starts(editor, editor_api):
    brief = make_brief(editor)

    response = editor_api.post(f"/briefs/{brief.public_id}/source", NEW_SOURCE)

    assert response.status_code == 200, response.content
    body = json.loads(response.content)
    assert body["id"] == brief.public_id
    assert body["source_material"] == NEW_SOURCE["source_material"]
    assert body["source_hash"] == source_hash(NEW_SOURCE["source_material"])
    assert (body["latest_revision"], body["suggestion"]) == (None, None)
    brief.refresh_from_db()
    assert brief.source_material == NEW_SOURCE["source_material"]
    assert source_changes(brief) == 1
    runs = SummaryRun.objects.filter(brief=brief).order_by("number")
    assert [(run.number, run.source_hash) for run in runs][-1] == (2, body["source_hash"])
    assert json.loads(editor_api.get(f"/briefs/{brief.public_id}").content)["source_hash"] == body["source_hash"]


@pytest.mark.django_db
def test_replace_source__same_text_or_empty__200_same_text_writes_nothing(editor, editor_api):
    brief = make_brief(editor)
    same = editor_api.post(f"/briefs/{brief.public_id}/source", {"source_material": SOURCE})
    assert same.status_code == 200
    assert source_changes(brief) == 0 and SummaryRun.objects.filter(brief=brief).count() == 1
    # The web form lets an editor clear the source material; so does the API.
    cleared = editor_api.post(f"/briefs/{brief.public_id}/source", {"source_material": ""})
    assert cleared.status_code == 200 and json.loads(cleared.content)["source_material"] == ""


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["approver", "operator", "no_group"])
def test_replace_source__not_an_editor__403_problem_nothing_written(as_role, editor, role):
    brief = make_brief(editor)
    response = as_role(role).post(f"/briefs/{brief.public_id}/source", NEW_SOURCE)
    assert response.status_code == 403
    assert problem(response)["detail"] == "Only members of Editors can edit briefs."
    brief.refresh_from_db()
    assert brief.source_material == SOURCE and source_changes(brief) == 0
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
def test_replace_source__no_token__401_problem(editor, as_role):
    brief = make_brief(editor)
    response = as_role("anonymous").post(f"/briefs/{brief.public_id}/source", NEW_SOURCE)
    assert response.status_code == 401
    assert problem(response)["type"] == "urn:galley:problem:unauthenticated"


@pytest.mark.django_db
def test_replace_source__unknown_brief__404_problem(editor_api):
    response = editor_api.post("/briefs/brief-999/source", NEW_SOURCE)
    assert response.status_code == 404
    assert problem(response)["type"] == "urn:galley:problem:not-found"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({}, "source_material: Field required"),
        ({"source_material": "a\x00b"}, "source_material: String should match pattern"),
        ({"source_material": 5}, "source_material: Input should be a valid string"),
    ],
)
def test_replace_source__body_the_schema_refuses__400_problem_naming_the_field(editor, editor_api, body, detail):
    brief = make_brief(editor)
    response = editor_api.post(f"/briefs/{brief.public_id}/source", body)
    assert response.status_code == 400
    assert problem(response)["detail"].startswith(detail)
    assert source_changes(brief) == 0


@pytest.mark.django_db
def test_replace_source__longer_than_the_limit__400_problem_from_the_action(editor, editor_api, settings):
    brief = make_brief(editor)
    settings.GALLEY_MAX_BODY_CHARS = 10
    response = editor_api.post(f"/briefs/{brief.public_id}/source", {"source_material": "x" * 11})
    assert problem(response)["detail"] == "Source material is 11 characters long; the limit is 10."
    assert source_changes(brief) == 0 and not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
def test_replace_source__idempotency_key__replays_same_body__422_for_another__400_without_one(editor, editor_api):
    brief = make_brief(editor)
    path = f"/briefs/{brief.public_id}/source"
    first = editor_api.post(path, NEW_SOURCE, key="source-1")
    again = editor_api.post(path, NEW_SOURCE, key="source-1")
    assert (first.status_code, again.status_code) == (200, 200)
    assert json.loads(again.content) == json.loads(first.content) and again["Idempotent-Replayed"] == "true"
    assert source_changes(brief) == 1

    reused = editor_api.post(path, {"source_material": "Other text."}, key="source-1")
    assert reused.status_code == 422
    assert problem(reused)["type"] == "urn:galley:problem:idempotency-key-reused"
    assert problem(editor_api.post(path, NEW_SOURCE, key=None))["status"] == 400
    brief.refresh_from_db()
    assert brief.source_material == NEW_SOURCE["source_material"] and source_changes(brief) == 1


# --- AI suggestion -------------------------------------------------------------------------------


def brief_with_a_suggestion(editor) -> tuple[Brief, SummaryRun]:
    """The editor wrote revision 1 before the pipeline finished: its draft is offered, not written."""
    brief = make_brief(editor)
    with transaction.atomic(durable=True):
        check_create_revision(brief.public_id, base_number=0, title="Own", body="By hand.", acting_user=editor)
    run_pipeline()
    run = SummaryRun.objects.get(brief=brief)
    assert (run.status, run.suggestion) == ("completed", True)
    return brief, run


def draft_of(brief: Brief, run: SummaryRun, step: str) -> str:
    return StepArtifact.objects.get(identity=step_identity(brief.public_id, run.source_hash, step)).content["text"]


@pytest.mark.django_db(transaction=True)
def test_use_suggestion__editor__201_next_revision_is_the_draft_as_theirs__again_200_writes_nothing(
    editor, editor2, provider
):
    brief, run = brief_with_a_suggestion(editor)
    api = ApiClient(token_for(editor2))
    shown = json.loads(api.get(f"/briefs/{brief.public_id}").content)["suggestion"]
    assert shown == {
        "run_number": run.number,
        "title": draft_of(brief, run, "headline").strip(),
        "standfirst": draft_of(brief, run, "standfirst").strip(),
        "body": draft_of(brief, run, "draft").strip(),
    }

    response = api.post(f"/briefs/{brief.public_id}/summary-runs/{run.number}/use-suggestion")

    assert response.status_code == 201, response.content
    revision = json.loads(response.content)
    assert (revision["number"], revision["author"]) == (2, editor2.username)
    assert (revision["title"], revision["standfirst"], revision["body"]) == (
        shown["title"],
        shown["standfirst"],
        shown["body"],
    )
    assert list(brief.revisions.values_list("number", flat=True).order_by("number")) == [1, 2]
    again = api.post(f"/briefs/{brief.public_id}/summary-runs/{run.number}/use-suggestion")
    assert again.status_code == 200 and json.loads(again.content)["number"] == 2
    assert brief.revisions.count() == 2


@pytest.mark.django_db(transaction=True)
def test_use_suggestion__same_idempotency_key__replays_201(editor, editor_api, provider):
    brief, run = brief_with_a_suggestion(editor)
    path = f"/briefs/{brief.public_id}/summary-runs/{run.number}/use-suggestion"
    first = editor_api.post(path, key="use-1")
    again = editor_api.post(path, key="use-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again["Idempotent-Replayed"] == "true" and again.content == first.content
    assert problem(editor_api.post(path, key=None))["status"] == 400


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", ["approver", "operator", "no_group"])
def test_use_suggestion__not_an_editor__403_problem_nothing_written(as_role, editor, provider, role):
    brief, run = brief_with_a_suggestion(editor)
    response = as_role(role).post(f"/briefs/{brief.public_id}/summary-runs/{run.number}/use-suggestion")
    assert response.status_code == 403
    assert problem(response)["detail"] == "Only members of Editors can edit briefs."
    assert brief.revisions.count() == 1


@pytest.mark.django_db
def test_use_suggestion__no_token__401_problem(as_role, editor):
    brief = make_brief(editor)
    response = as_role("anonymous").post(f"/briefs/{brief.public_id}/summary-runs/1/use-suggestion")
    assert problem(response)["status"] == 401


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/briefs/{id}/summary-runs/1/use-suggestion", "/briefs/brief-999/summary-runs/1/use-suggestion"]
)
def test_use_suggestion__run_without_a_suggestion_or_unknown_brief__404_problem(editor, editor_api, path):
    # Run 1 is still running (no worker here) and offers nothing yet.
    brief = make_brief(editor)
    response = editor_api.post(path.format(id=brief.public_id))
    assert response.status_code == 404
    assert problem(response)["type"] == "urn:galley:problem:not-found"
    assert not brief.revisions.exists() and not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("run", ["0", "x", str(2**31)])
def test_use_suggestion__run_number_not_a_run__400_problem(editor, editor_api, run):
    brief = make_brief(editor)
    response = editor_api.post(f"/briefs/{brief.public_id}/summary-runs/{run}/use-suggestion")
    assert response.status_code == 400
    assert problem(response)["type"] == "urn:galley:problem:invalid-request"


@pytest.mark.django_db(transaction=True)
def test_use_suggestion__run_that_wrote_the_first_revision__404_nothing_to_use(editor, editor_api, provider):
    brief = make_brief(editor)
    run_pipeline()
    run = SummaryRun.objects.get(brief=brief)
    assert (run.status, run.suggestion) == ("completed", False)
    assert json.loads(editor_api.get(f"/briefs/{brief.public_id}").content)["suggestion"] is None
    response = editor_api.post(f"/briefs/{brief.public_id}/summary-runs/{run.number}/use-suggestion")
    assert problem(response)["status"] == 404
    assert brief.revisions.count() == 1


def test_openapi_schema__declares_both_endpoints_with_idempotency_key_and_problem_details(client):
    schema = json.loads(client.get("/api/v1/openapi.json").content)
    for path in (
        "/api/v1/briefs/{brief_id}/source",
        "/api/v1/briefs/{brief_id}/summary-runs/{run_number}/use-suggestion",
    ):
        operation = schema["paths"][path]["post"]
        assert any(p["name"] == "Idempotency-Key" and p["required"] for p in operation["parameters"])
        for status in ("400", "401", "403", "404", "409", "422"):
            assert list(operation["responses"][status]["content"]) == ["application/problem+json"]
    assert "suggestion" in schema["components"]["schemas"]["BriefDetailOut"]["properties"]
