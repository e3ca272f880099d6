"""Retractions as operations in the admin (docs/retractions.md#operators, docs/operations.md#admin): a retract
operation in conflict or dead is offered the §7.2 actions that fit it — retry now, look up (read back, adopt
a retraction the target holds), cancel with a reason — in the Operations admin and in the "Publication
problems" admin, each through the admin's own action, audited; adopting a revision is refused with why."""

from __future__ import annotations

import pytest
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from galley.reference_target import Faults
from publishing.identities import RETRACT
from publishing.models import Brief, Publication
from tests.publishing.handlers.test_retractions import (
    conflicted_retraction,
    published,
    retract,
    retracted_unseen,
    retractions,
    run_worker,
)
from tests.workers.test_admin import OPERATIONS, messages_of, run_action
from workers.models import AuditEvent, Conflict, Operation, OperationStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

PROBLEMS = "/admin/publishing/publicationproblem/"


def dead_retraction(target, brief, revise, approver) -> Operation:
    """Revision 1 published, its retraction a dead letter (the target answered 500 until its attempts ran out)."""
    published(brief, revise, approver)
    (operation,) = retract(brief, by=approver)
    target.faults = Faults(rate_500=1.0)
    run_worker(kinds=(RETRACT,))
    target.faults = Faults()
    operation.refresh_from_db()
    assert operation.status == OperationStatus.DEAD
    return operation


def resolve(client: Client, operation: Operation, action: str, **fields: str) -> str:
    """The operator's POST from the problem's page; the message shown after the redirect."""
    response = client.post(f"{PROBLEMS}{operation.id}/resolve/", {"action": action, **fields}, follow=True)
    assert response.status_code == 200
    return " ".join(str(message) for message in response.context["messages"])


def test_operator__operations_admin__dead_retraction__retry_now_takes_it_down_once(
    target, brief, revise, approver, operator, operator_client
):
    operation = dead_retraction(target, brief, revise, approver)

    assert messages_of(run_action(operator_client, OPERATIONS, "retry_now", [operation])) == ["1 operation(s) retried."]
    assert run_worker(kinds=(RETRACT,)) == {"succeeded": 1}

    operation.refresh_from_db()
    assert operation.status == OperationStatus.SUCCEEDED
    assert retractions(target) == [(operation.key, 1)]
    assert Publication.objects.get(brief=brief).retracted_at is not None
    (retried,) = AuditEvent.objects.filter(event_type="operation.retry_now", subject_id=operation.key)
    assert retried.actor_id == operator.id


def test_operator__operations_admin__dead_retraction__cancel_needs_a_reason_then_ends_it_audited(
    target, brief, revise, approver, operator, operator_client
):
    operation = dead_retraction(target, brief, revise, approver)

    refused = run_action(operator_client, OPERATIONS, "cancel_with_reason", [operation])
    assert messages_of(refused) == ["Give a reason to cancel."]
    reason = "legal withdrew the takedown request"
    said = run_action(operator_client, OPERATIONS, "cancel_with_reason", [operation], reason=reason)
    assert messages_of(said) == ["1 operation(s) cancelled."]

    operation.refresh_from_db()
    assert operation.status == OperationStatus.CANCELLED
    (cancelled,) = AuditEvent.objects.filter(event_type="operation.cancelled", subject_id=operation.key)
    assert (cancelled.actor_id, cancelled.new_state["detail"]) == (operator.id, reason)
    assert run_worker(kinds=(RETRACT,)) == {} and retractions(target) == []


def test_operator__problems_admin__dead_retraction__listed_offers_look_up_retry_cancel_and_look_up_adopts(
    target, brief, revise, approver, operator_client
):
    operation = dead_retraction(target, brief, revise, approver)
    retracted_unseen(target, operation)

    assertContains(operator_client.get(PROBLEMS, {"state": "open"}), operation.key)
    page = operator_client.get(f"{PROBLEMS}{operation.id}/change/")
    assertContains(page, "This retract operation is")
    assertContains(page, 'value="look_up">Read the publication back and adopt a retraction the target holds')
    assertContains(page, 'value="retry">Retry now')
    assertContains(page, 'value="cancel">Cancel with this reason')
    assertContains(page, "Retract the brief again from its page")
    assertNotContains(page, 'value="adopt"')
    assertNotContains(page, "Publish a newer revision instead")

    said = resolve(operator_client, operation, "look_up")
    assert said == f"Looking {operation.key} up at the target now; what it holds there is adopted."
    assert run_worker(kinds=(RETRACT,)) == {"succeeded": 1}

    operation.refresh_from_db()
    assert operation.status == OperationStatus.SUCCEEDED
    assert retractions(target) == [(operation.key, 1)]  # adopted, not sent again
    assert Publication.objects.get(brief=brief).retracted_at is not None
    assert AuditEvent.objects.filter(event_type="operation.reconcile_requested", subject_id=operation.key).exists()


def test_operator__problems_admin__conflicted_retraction__adopt_refused_retry_asks_again_cancel_ends_it(
    target, brief, revise, approver, operator, operator_client
):
    operation = conflicted_retraction(target, brief, revise, approver)

    page = operator_client.get(f"{PROBLEMS}{operation.id}/change/")
    assertContains(page, "A retraction adopts nothing")
    assertNotContains(page, 'value="adopt"')
    assertNotContains(page, 'value="publish_as_next_revision"')
    assert resolve(operator_client, operation, "adopt").startswith("A retraction adopts nothing")
    assert resolve(operator_client, operation, "publish_as_next_revision") == (
        "Only a stale revision's publish can be published again."
    )
    operation.refresh_from_db()
    assert operation.status == OperationStatus.CONFLICT

    assert resolve(operator_client, operation, "retry") == f"Running {operation.key} again now."
    run_worker(kinds=(RETRACT,))
    operation.refresh_from_db()
    assert operation.status == OperationStatus.CONFLICT  # the target still holds revision 2: the same answer

    assert "reason" in resolve(operator_client, operation, "cancel", reason="").lower()
    said = resolve(operator_client, operation, "cancel", reason="revision 2 is the correction; it stays")
    assert said == f"Cancelled {operation.key}; the brief shows why."
    again = resolve(operator_client, operation, "cancel", reason="twice")
    assert again == f"Nothing to do: {operation.key} is cancelled now."

    operation.refresh_from_db()
    assert operation.status == OperationStatus.CANCELLED
    assert not Conflict.objects.filter(operation=operation, resolved_at__isnull=True).exists()
    assert (
        AuditEvent.objects.filter(
            event_type="operation.cancelled", subject_id=operation.key, actor_id=operator.id
        ).count()
        == 1
    )
    assert retractions(target) == []
    assert Brief.objects.get(pk=brief.pk).status == Brief.Status.RETRACTED
