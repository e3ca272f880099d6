"""Operators' actions in Django admin (docs/operations.md#admin), through the test client: retry now,
reconcile with the target, cancel with a reason, mark a key conflict resolved.

Each action is audited with its actor (docs/invariants.md#i13), idempotent (a second run writes no new
audit record), and refused to anyone without the operate permission, staff or not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import transaction
from django.http import HttpResponse
from django.test import Client

from approvals.actions import check_decide_revision
from approvals.models import Approval
from galley.reference_target import Faults, ReferenceTarget
from publishing.identities import PUBLISH, VERIFY, publish_key
from publishing.models import Brief, Publication
from publishing.roles import Role
from workers.actions.claims import claim_operations, fail_operation
from workers.actions.enqueue import enqueue_operation
from workers.drain import drain
from workers.errors import FailureKind, OperationFailed
from workers.models import Attempt, AuditEvent, Conflict, Operation

OPERATIONS = "/admin/workers/operation/"
CONFLICTS = "/admin/workers/conflict/"
HASH_A = "a" * 64
HASH_B = "b" * 64
TOKEN = "admin-test-token"


# --- helpers -----------------------------------------------------------------------------------------


def enqueue(key: str, *, payload_hash: str = HASH_A) -> Operation:
    with transaction.atomic(durable=True):
        return enqueue_operation(
            key=key, kind="test.noop", payload_hash=payload_hash, subject_type="test", subject_id=key
        ).operation


def dead_letter(key: str) -> Operation:
    """An operation whose only attempt failed terminally."""
    enqueue(key)
    (job,) = claim_operations(worker_id="w1", limit=1, kinds=["test.noop"])
    fail_operation(job, OperationFailed(FailureKind.INVALID, "the target rejected it"), started=time.monotonic())
    return Operation.objects.get(key=key)


def key_conflict(key: str) -> Conflict:
    enqueue(key, payload_hash=HASH_A)
    with transaction.atomic(durable=True):
        conflict = enqueue_operation(
            key=key, kind="test.noop", payload_hash=HASH_B, subject_type="test", subject_id=key
        ).conflict
    assert conflict is not None
    return conflict


def run_action(client: Client, changelist: str, action: str, objects: list[Any], reason: str = "") -> HttpResponse:
    """What the changelist's action bar posts (the action, the ticked rows, the reason field),
    following the redirect back to the changelist, which shows and consumes the messages."""
    return client.post(
        changelist,
        {
            "action": action,
            "_selected_action": [str(obj.pk) for obj in objects],
            "index": "0",
            "select_across": "0",
            "reason": reason,
        },
        follow=True,
    )


def messages_of(response: HttpResponse) -> list[str]:
    """The messages the page after the action showed; an action always redirects back to its list."""
    assert [status for _url, status in response.redirect_chain] == [302]
    return [str(message) for message in response.context["messages"]]


def audit(event_type: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(event_type=event_type).order_by("id"))


@pytest.fixture
def staff_operator(operator):
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    return operator


@pytest.fixture
def operator_client(client, staff_operator) -> Client:
    client.force_login(staff_operator)
    return client


# --- retry now --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_audit__admin_retry_now__dead_letter_due_again_audited_with_actor_and_idempotent(
    operator_client, staff_operator
):
    operation = dead_letter("k-dead")

    response = run_action(operator_client, OPERATIONS, "retry_now", [operation])

    assert messages_of(response) == ["1 operation(s) retried."]
    operation.refresh_from_db()
    assert (operation.status, operation.needs_operator, operation.finished_at) == ("retry_wait", False, None)
    (event,) = audit("operation.retry_now")
    assert (event.actor, event.subject_id) == (staff_operator, "k-dead")
    assert (event.old_state["status"], event.new_state["status"]) == ("dead", "retry_wait")
    (job,) = claim_operations(worker_id="w2", limit=1, kinds=["test.noop"])
    assert job.attempt_number == 2

    # Running now: a second "retry now" has nothing to do and records nothing.
    again = run_action(operator_client, OPERATIONS, "retry_now", [operation])

    assert messages_of(again) == [
        "0 operation(s) retried.",
        "Left as they were (not allowed from their state): k-dead (running)",
    ]
    assert len(audit("operation.retry_now")) == 1


@pytest.mark.django_db
def test_audit__admin_retry_now_twice__second_is_a_no_op(operator_client):
    operation = dead_letter("k-dead")
    run_action(operator_client, OPERATIONS, "retry_now", [operation])
    before = Operation.objects.values().get(id=operation.id)

    again = run_action(operator_client, OPERATIONS, "retry_now", [operation])

    assert "0 operation(s) retried." in messages_of(again)
    after = Operation.objects.values().get(id=operation.id)
    assert after == before
    assert len(audit("operation.retry_now")) == 1


# --- cancel with reason -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_audit__admin_cancel_with_reason__cancelled_audited_with_actor_and_idempotent(operator_client, staff_operator):
    operation = enqueue("k-waiting")

    response = run_action(operator_client, OPERATIONS, "cancel_with_reason", [operation], reason="duplicate brief")

    assert messages_of(response) == ["1 operation(s) cancelled."]
    operation.refresh_from_db()
    assert (operation.status, operation.last_error_message) == ("cancelled", "duplicate brief")
    assert operation.finished_at is not None
    (event,) = audit("operation.cancelled")
    assert event.actor == staff_operator
    assert (event.old_state["status"], event.new_state) == (
        "pending",
        {"status": "cancelled", "detail": "duplicate brief", "max_attempts": operation.max_attempts},
    )

    again = run_action(operator_client, OPERATIONS, "cancel_with_reason", [operation], reason="again")

    assert "0 operation(s) cancelled." in messages_of(again)
    operation.refresh_from_db()
    assert operation.last_error_message == "duplicate brief"
    assert len(audit("operation.cancelled")) == 1


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["", "   "])
def test_audit__admin_cancel_without_reason__refused_and_nothing_written(operator_client, reason):
    operation = enqueue("k-waiting")
    events = AuditEvent.objects.count()

    response = run_action(operator_client, OPERATIONS, "cancel_with_reason", [operation], reason=reason)

    assert messages_of(response) == ["Give a reason to cancel."]
    operation.refresh_from_db()
    assert operation.status == "pending"
    assert AuditEvent.objects.count() == events


# --- mark resolved ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_audit__admin_mark_resolved__conflict_resolved_audited_with_actor_and_idempotent(
    operator_client, staff_operator
):
    conflict = key_conflict("k-conflict")

    response = run_action(
        operator_client, CONFLICTS, "mark_resolved", [conflict], reason="the second request was a client bug"
    )

    assert messages_of(response) == ["1 conflict(s) marked resolved."]
    conflict.refresh_from_db()
    assert (conflict.resolved_by, conflict.resolution) == (staff_operator, "the second request was a client bug")
    assert conflict.resolved_at is not None
    (event,) = audit("operation.conflict_resolved")
    assert (event.actor, event.subject_id) == (staff_operator, "k-conflict")
    assert event.new_state == {"resolved": True, "resolution": "the second request was a client bug"}

    again = run_action(operator_client, CONFLICTS, "mark_resolved", [conflict], reason="something else")

    assert messages_of(again) == ["0 conflict(s) marked resolved."]
    conflict.refresh_from_db()
    assert conflict.resolution == "the second request was a client bug"
    assert len(audit("operation.conflict_resolved")) == 1


@pytest.mark.django_db
def test_audit__admin_mark_resolved_without_resolution__refused_and_nothing_written(operator_client):
    conflict = key_conflict("k-conflict")
    events = AuditEvent.objects.count()

    response = run_action(operator_client, CONFLICTS, "mark_resolved", [conflict], reason="")

    assert messages_of(response) == ["Describe the resolution."]
    conflict.refresh_from_db()
    assert conflict.resolved_at is None
    assert AuditEvent.objects.count() == events


# --- reconcile with the target (real reference target, real HTTP) -----------------------------------------


@pytest.fixture
def target(tmp_path: Path, settings) -> Iterator[ReferenceTarget]:
    # Commit-then-drop: the first send is applied, but Galley never hears the answer.
    target = ReferenceTarget(db_path=tmp_path / "target.sqlite3", token=TOKEN, faults=Faults(rate_drop=1.0)).start()
    settings.GALLEY_TARGET_URL = target.url
    settings.GALLEY_TARGET_TOKEN = TOKEN
    settings.GALLEY_TARGET_TIMEOUT_SECONDS = 5.0
    yield target
    target.stop()


def run_worker() -> Any:
    return drain(worker_id="w-test", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5)


@pytest.mark.django_db(transaction=True)
def test_audit__admin_reconcile_with_target__adopts_what_the_target_holds_without_sending_again(
    target, operator_client, staff_operator, brief, revise, approver, settings
):
    settings.GALLEY_MAX_ATTEMPTS = 1
    revision = revise(brief, "Dockers walked out at dawn.")
    with transaction.atomic(durable=True):
        check_decide_revision(
            brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=approver,
        )
    assert run_worker() == {"dead": 1}
    operation = Operation.objects.get(key=publish_key(brief.public_id, 1))
    assert operation.last_error_message.startswith("attempts exhausted (1 of 1)")
    assert len(target.ledger()) == 1  # applied at the target, unknown to Galley

    response = run_action(operator_client, OPERATIONS, "reconcile_with_target", [operation])

    assert messages_of(response) == ["1 operation(s) queued for reconciliation."]
    operation.refresh_from_db()
    assert (operation.status, operation.last_error_kind) == ("retry_wait", "reconcile_requested")
    (event,) = audit("operation.reconcile_requested")
    assert (event.actor, event.subject_id) == (staff_operator, operation.key)

    again = run_action(operator_client, OPERATIONS, "reconcile_with_target", [operation])

    assert "0 operation(s) queued for reconciliation." in messages_of(again)
    assert len(audit("operation.reconcile_requested")) == 1

    # Every send would fail now, so the success below can only come from the look-up by key.
    target.faults = Faults(rate_500=1.0)
    assert run_worker() == {"succeeded": 1}  # adopted, read back and verified in one attempt

    operation.refresh_from_db()
    assert operation.status == "succeeded"
    assert operation.result["first_application"] is False
    last = Attempt.objects.filter(operation=operation).order_by("-number").first()
    assert (last.number, last.ambiguous, last.outcome) == (2, True, "succeeded")
    assert [row["operation_key"] for row in target.ledger()] == [operation.key]
    assert Publication.objects.get().verified_at is not None
    brief.refresh_from_db()
    assert (brief.published_revision_number, brief.status) == (1, Brief.Status.PUBLISHED)


# --- who may run them -----------------------------------------------------------------------------------


@pytest.fixture
def staff_editor(editor):
    editor.is_staff = True
    editor.save(update_fields=["is_staff"])
    return editor


@pytest.fixture
def staff_viewer(make_user):
    """Staff who may look at operations and conflicts, but not operate on them."""
    user = make_user("vera", Role.APPROVER)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="workers", codename__in=["view_operation", "view_conflict"])
    )
    return user


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changelist", "action"),
    [
        (OPERATIONS, "retry_now"),
        (OPERATIONS, "reconcile_with_target"),
        (OPERATIONS, "cancel_with_reason"),
        (CONFLICTS, "mark_resolved"),
    ],
)
@pytest.mark.parametrize(("who", "status"), [("staff_editor", 403), ("staff_viewer", 200)])
def test_audit__admin_operator_actions__refused_without_the_operate_permission(
    client, request, changelist, action, who, status
):
    operation = dead_letter("k-dead")
    conflict = key_conflict("k-conflict")
    operations_before = list(Operation.objects.order_by("id").values())
    conflicts_before = list(Conflict.objects.order_by("id").values())
    events = AuditEvent.objects.count()
    client.force_login(request.getfixturevalue(who))

    subject = conflict if changelist == CONFLICTS else operation
    response = run_action(client, changelist, action, [subject], reason="because I can")

    # A staff member without any permission on the model is refused outright; one who may
    # view it is not offered the action, so the post changes nothing.
    assert response.status_code == status
    assert response.redirect_chain == []
    assert list(Operation.objects.order_by("id").values()) == operations_before
    assert list(Conflict.objects.order_by("id").values()) == conflicts_before
    assert AuditEvent.objects.count() == events
