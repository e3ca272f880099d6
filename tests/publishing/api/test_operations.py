"""Operator endpoints: operations, dead letters and conflicts, and the admin's actions (retry now,
look up at the target, adopt, cancel with a reason, mark resolved) — audited, idempotent, and
refused to every role but Operators."""

from __future__ import annotations

import json

import pytest

from publishing.identities import publish_key
from tests.workers.test_admin import dead_letter, enqueue, key_conflict
from workers.models import AuditEvent, Conflict, Operation

pytestmark = pytest.mark.django_db(transaction=True)

READS = ["/operations", "/dead-letters", "/conflicts"]


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize("role", ["editor", "approver", "no_group"])
def test_operator_reads__not_an_operator__403(as_role, role, path):
    response = as_role(role).get(path)
    assert response.status_code == 403
    assert json.loads(response.content)["detail"] == "Only members of Operators can see and settle operations."


def test_operator_reads__operations_dead_letters_conflicts(operator_api):
    dead = dead_letter("test:dead")
    enqueue("test:pending")
    conflict = key_conflict("test:conflicted")
    operations = json.loads(operator_api.get("/operations").content)
    assert {item["key"] for item in operations["items"]} >= {"test:dead", "test:pending", "test:conflicted"}
    dead_letters = json.loads(operator_api.get("/dead-letters").content)["items"]
    assert [item["key"] for item in dead_letters] == ["test:dead"]
    assert dead_letters[0]["last_error_message"] == "the target rejected it"
    conflicts = json.loads(operator_api.get("/conflicts").content)  # a page, like the operations (issue 18)
    assert [(c["id"], c["operation_key"]) for c in conflicts["items"]] == [(conflict.id, "test:conflicted")]
    assert conflicts["next_cursor"] is None
    assert json.loads(operator_api.get(f"/operations/{dead.id}").content)["status"] == "dead"
    assert operator_api.get("/operations/999999").status_code == 404


def test_operator_reads__operations_page_by_before_cursor(operator_api):
    for n in range(5):
        enqueue(f"test:op-{n}")
    seen, before = [], None
    while True:
        page = json.loads(
            operator_api.get("/operations", limit=2, kind="test.noop", **({"before": before} if before else {})).content
        )
        seen.extend(item["key"] for item in page["items"])
        before = page["next_cursor"]
        if before is None:
            break
    assert seen == [f"test:op-{n}" for n in reversed(range(5))]


def test_operator_reads__conflicts_page_by_before_cursor_like_operations(operator_api):
    for n in range(5):
        key_conflict(f"test:conflicted-{n}")
    seen, before, pages = [], None, 0
    while True:
        page = json.loads(operator_api.get("/conflicts", limit=2, **({"before": before} if before else {})).content)
        seen.extend(item["operation_key"] for item in page["items"])
        before, pages = page["next_cursor"], pages + 1
        if before is None:
            break
    assert seen == [f"test:conflicted-{n}" for n in reversed(range(5))]
    assert pages == 3


def test_audit__api_retry_now__dead_letter_due_again_audited_and_idempotent(operator_api, users):
    dead = dead_letter("test:dead")
    response = operator_api.post(f"/operations/{dead.id}/retry")
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["changed"] is True and body["operation"]["status"] == "retry_wait"
    event = AuditEvent.objects.get(event_type="operation.retry_now", subject_id="test:dead")
    assert event.actor_id == users["operator"].id
    again = json.loads(operator_api.post(f"/operations/{dead.id}/retry").content)
    assert again["changed"] is False and again["message"].startswith("Nothing to do")


def test_audit__api_look_up__reconcile_requested(operator_api):
    dead = dead_letter("test:dead")
    assert json.loads(operator_api.post(f"/operations/{dead.id}/look-up").content)["changed"] is True
    assert AuditEvent.objects.filter(subject_id="test:dead", event_type__startswith="operation.").exists()


def test_audit__api_cancel_with_reason__cancelled_and_conflicts_settled(operator_api):
    conflict = key_conflict("test:conflicted")
    response = operator_api.post(f"/operations/{conflict.operation_id}/cancel", {"reason": "reset target"})
    body = json.loads(response.content)
    assert body["changed"] is True and body["operation"]["status"] == "cancelled"
    assert Conflict.objects.get(id=conflict.id).resolved_at is not None
    assert (
        json.loads(operator_api.post(f"/operations/{conflict.operation_id}/cancel", {"reason": "again"}).content)[
            "changed"
        ]
        is False
    )
    assert (
        json.loads(operator_api.post(f"/operations/{conflict.operation_id}/cancel", {"reason": " "}).content)["status"]
        == 400
    )


def test_audit__api_mark_conflict_resolved__idempotent(operator_api):
    conflict = key_conflict("test:conflicted")
    first = json.loads(operator_api.post(f"/conflicts/{conflict.id}/resolve", {"resolution": "fixed"}).content)
    again = json.loads(operator_api.post(f"/conflicts/{conflict.id}/resolve", {"resolution": "fixed"}).content)
    assert (first["changed"], again["changed"]) == (True, False)
    assert AuditEvent.objects.filter(event_type="operation.conflict_resolved").count() == 1
    assert operator_api.post("/conflicts/999999/resolve", {"resolution": "x"}).status_code == 404


def test_api_adopt__not_a_publication__400(operator_api):
    dead = dead_letter("test:dead")
    response = operator_api.post(f"/operations/{dead.id}/adopt")
    assert response.status_code == 400
    assert "nothing to adopt" in json.loads(response.content)["detail"]


def test_revision_bound_approval__api_adopt_with_nothing_held__refused_and_nothing_changes(
    operator_api, brief, revise, approver
):
    """A publication's operation goes through publishing.actions.resolutions: a pending publish is
    not waiting for an operator, so adopt, retry and cancel each say so and change nothing."""
    from tests.publishing.handlers.test_publications import approve

    revision = revise(brief, "Dockers walked out.")
    approve(revision, by=approver)
    publish = Operation.objects.get(key=publish_key(brief.public_id, 1))
    for action, body in [("adopt", None), ("retry", None), ("look-up", None), ("cancel", {"reason": "no"})]:
        outcome = json.loads(operator_api.post(f"/operations/{publish.id}/{action}", body).content)
        assert outcome["changed"] is False, action
    assert Operation.objects.get(id=publish.id).status == publish.status


@pytest.mark.parametrize("role", ["editor", "approver", "no_group"])
@pytest.mark.parametrize("action", ["retry", "look-up", "adopt"])
def test_operator_actions__not_an_operator__403_and_nothing_changes(as_role, role, action):
    dead = dead_letter("test:dead")
    response = as_role(role).post(f"/operations/{dead.id}/{action}")
    assert response.status_code == 403
    assert Operation.objects.get(id=dead.id).status == "dead"


def test_revision_bound_approval__api_publish_as_next_revision__stale_revision_written_again_as_the_next_revision(
    operator_api, target, brief, revise, approver
):
    """The admin's "publish as the next revision" through the API: revision 2 carries revision 1's
    approved content, needs its own approval, and a repeat changes nothing."""
    from tests.publishing.test_resolutions import target_holds_another_revision

    first, operation = target_holds_another_revision(target, brief, revise, approver, held=1)

    body = json.loads(operator_api.post(f"/operations/{operation.id}/publish-as-next-revision").content)
    again = json.loads(operator_api.post(f"/operations/{operation.id}/publish-as-next-revision").content)

    assert (body["changed"], body["operation"]["status"]) == (True, "cancelled")
    assert body["message"].startswith("Wrote revision 2 with revision 1's approved content")
    assert brief.revisions.get(number=2).payload_hash == first.payload_hash
    assert again["changed"] is False and again["message"].startswith("Nothing to do")
    assert AuditEvent.objects.filter(event_type="publication.republished_as_next_revision").count() == 1
    not_a_publication = dead_letter("test:dead")
    refused = operator_api.post(f"/operations/{not_a_publication.id}/publish-as-next-revision")
    assert refused.status_code == 400
    assert "nothing to publish again" in json.loads(refused.content)["detail"]
