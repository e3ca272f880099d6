"""Decisions through the JSON API: bound to revision number and payload hash, for Approvers only,
with the publish intent in the same transaction and every refusal as problem details."""

from __future__ import annotations

import json

import pytest

from approvals.models import Approval
from publishing.identities import publish_key
from publishing.roles import Role
from tests.publishing.api.support import ApiClient, problem, token_for
from workers.models import Operation

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_role(users):
    """as_role("approver") → an ApiClient with that user's token."""
    return lambda role: ApiClient(token_for(users[role]))


@pytest.fixture
def approver_api(as_role) -> ApiClient:
    return as_role("approver")


def decide(api, revision, *, decision: str = "approved", payload_hash: str | None = None, key: str = ""):
    return api.post(
        f"/briefs/{revision.brief.public_id}/revisions/{revision.number}/decisions",
        {"decision": decision, "payload_hash": payload_hash or revision.payload_hash, "comment": "Fine."},
        key=key,
    )


def test_revision_bound_approval__api_approve__201_and_publish_intent_written(approver_api, brief, revise, approver):
    revision = revise(brief, "Dockers walked out.")
    response = decide(approver_api, revision)
    assert response.status_code == 201, response.content
    body = json.loads(response.content)
    assert body["decision"] == "approved" and body["payload_hash"] == revision.payload_hash
    assert body["approver"] == approver.username and body["revision"] == 1
    operation = Operation.objects.get(key=publish_key(brief.public_id, 1))
    assert operation.payload_hash == revision.payload_hash


def test_api_decision__same_decision_again_with_a_new_key__200_with_the_first(approver_api, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    first = json.loads(decide(approver_api, revision).content)
    again = decide(approver_api, revision)
    assert again.status_code == 200 and json.loads(again.content) == first
    assert Approval.objects.count() == 1


def test_api_decision__request_changes__201_brief_changes_requested(approver_api, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    assert decide(approver_api, revision, decision="changes_requested").status_code == 201
    brief.refresh_from_db()
    assert brief.status == "changes_requested"
    assert not Operation.objects.filter(key=publish_key(brief.public_id, 1)).exists()


def test_revision_bound_approval__api_stale_hash__409_naming_the_current_revision_and_hash(approver_api, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    response = decide(approver_api, revision, payload_hash="0" * 64)
    body = problem(response)
    assert response.status_code == 409 and body["type"] == "urn:galley:problem:stale-approval"
    assert body["current_revision"] == 1 and body["current_payload_hash"] == revision.payload_hash
    assert not Approval.objects.exists()


def test_revision_bound_approval__api_superseded_revision__409_naming_the_newer(approver_api, brief, revise):
    first = revise(brief, "Dockers walked out.")
    second = revise(brief, "The port is closed.")
    body = problem(decide(approver_api, first))
    assert body["status"] == 409
    assert body["current_revision"] == 2 and body["current_payload_hash"] == second.payload_hash
    assert not Approval.objects.exists()


def test_no_self_approval__api__403(brief, revise, make_user):
    both = make_user("edith", Role.EDITOR, Role.APPROVER)
    revision = revise(brief, "Dockers walked out.", by=both)
    response = decide(ApiClient(token_for(both)), revision)
    assert problem(response)["type"] == "urn:galley:problem:self-approval"
    assert response.status_code == 403


@pytest.mark.parametrize("role", ["editor", "operator", "no_group"])
def test_api_decision__not_an_approver__403_and_nothing_written(as_role, role, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    assert problem(decide(as_role(role), revision))["status"] == 403
    assert not Approval.objects.exists()


def test_api_decision__decision_already_made__409(approver_api, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    decide(approver_api, revision, decision="changes_requested")
    response = decide(approver_api, revision, decision="approved")
    assert problem(response)["type"] == "urn:galley:problem:decision-already-made"


def test_api_decision__unknown_revision_404__unknown_decision_400(approver_api, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    missing = approver_api.post(
        f"/briefs/{brief.public_id}/revisions/7/decisions", {"decision": "approved", "payload_hash": "0" * 64}
    )
    assert problem(missing)["status"] == 404
    assert problem(decide(approver_api, revision, decision="maybe"))["status"] == 400


def test_api_decision__idempotency_key_replayed__one_approval_one_operation(approver_api, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    first = decide(approver_api, revision, key="approve-1")
    again = decide(approver_api, revision, key="approve-1")
    assert (again.status_code, again.content) == (first.status_code, first.content) == (201, first.content)
    assert again["Idempotent-Replayed"] == "true"
    assert problem(decide(approver_api, revision, decision="changes_requested", key="approve-1"))["status"] == 422
    assert Approval.objects.count() == 1
