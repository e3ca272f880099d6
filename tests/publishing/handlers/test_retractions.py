"""Retraction end to end (docs/retractions.md): the approver's request → one retract operation per channel
holding the brief → the real reference targets (in threads, real HTTP) → observed (read-back retracted,
permalink 410) → recorded. Test names say which invariant of docs/invariants.md they guard; "taken down
exactly once" is read from each target's own record of retractions (/_retractions), not from Galley's rows.
"""

from __future__ import annotations

import datetime
from typing import Any

import httpx
import pytest
from django.db import transaction
from django.utils import timezone

from approvals.actions import check_also_publish, check_decide_revision
from approvals.errors import DecisionAlreadyMade
from approvals.models import Approval
from galley.reference_target import Faults, ReferenceTarget
from publishing.actions.drift import do_enqueue_drift_checks
from publishing.actions.retractions import check_retract_brief
from publishing.clients.target import TargetClient, TargetStaleRevision
from publishing.errors import InvalidInput, PermissionRefused
from publishing.hashing import payload_hash
from publishing.identities import DRIFT_CHECK, PUBLISH, RETRACT, VERIFY, publish_key, retract_key
from publishing.models import Brief, Publication, Revision, WebhookEvent, WebhookSubscriber
from tests.late_pages import serve_pages_late
from tests.reference_target import TOKEN
from tests.workers.test_admin import OPERATIONS, messages_of, run_action
from workers.actions.enqueue import enqueue_operation
from workers.drain import drain
from workers.models import Attempt, AuditEvent, Conflict, Operation, OperationStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

REASON = "The source withdrew the claim; legal asked for a takedown."


@pytest.fixture
def channels(target, add_channel) -> dict[str, ReferenceTarget]:
    """Two channels, each its own target: web (the settings' target) and partner-feed."""
    return {"web": target, "partner-feed": add_channel("partner-feed")}


def approve(revision: Revision, *, by: Any, channels: list[str] | None = None) -> None:
    with transaction.atomic(durable=True):
        check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            channels=channels,
            acting_user=by,
        )


def retract(brief: Brief, *, by: Any, reason: str = REASON, confirm: bool = True, retract_at=None) -> list[Operation]:
    """What the retraction view and the API do: one durable transaction around the action."""
    with transaction.atomic(durable=True):
        enqueued = check_retract_brief(
            brief.public_id, reason=reason, confirm=confirm, acting_user=by, retract_at=retract_at
        )
    return [one.operation for one in enqueued]


def run_worker(kinds: tuple[str, ...] = (PUBLISH, VERIFY, RETRACT)) -> dict[str, int]:
    return drain(worker_id="w-test", kinds=list(kinds), time_budget=30, idle_wait=0.5)


def retractions(target: ReferenceTarget) -> list[tuple[str, int]]:
    rows = httpx.get(f"{target.url}/_retractions", timeout=5).json()["retractions"]
    return [(row["operation_key"], row["revision"]) for row in rows]


def retractions_at(target: ReferenceTarget) -> list[str]:
    return [row["retracted_at"] for row in httpx.get(f"{target.url}/_retractions", timeout=5).json()["retractions"]]


def target_client(target: ReferenceTarget) -> TargetClient:
    return TargetClient(base_url=target.url, token=TOKEN, timeout=5)


def land_at_target(target: ReferenceTarget, revision: Revision) -> None:
    """Revision's publish applied at the target under Galley's key, as one in flight would land."""
    public_id = revision.brief.public_id
    with target_client(target) as client:
        client.publish(
            operation_key=publish_key(public_id, revision.number),
            brief_id=public_id,
            revision=revision.number,
            payload_hash=revision.payload_hash,
            payload=revision.payload,
        )


def retracted_unseen(target: ReferenceTarget, operation: Operation) -> None:
    """The retraction applied at the target under the operation's key by a request whose answer Galley never
    saw (it was lost, or the worker died waiting)."""
    publication = Publication.objects.get(operation_key=operation.arguments["publish_key"])
    with target_client(target) as client:
        client.retract(
            publication_id=publication.external_id,
            operation_key=operation.key,
            brief_id=operation.subject_id,
            revision=operation.subject_version,
            reason=str(operation.arguments["reason"]),
        )


def published(brief: Brief, revise, approver, body: str = "Dockers walked out at dawn.") -> Revision:
    revision = revise(brief, body)
    approve(revision, by=approver)
    run_worker()
    return revision


def fresh(brief: Brief) -> Brief:
    return Brief.objects.get(pk=brief.pk)


def test_identity__retract_key__primary_unchanged_another_channel_extended():
    assert retract_key("brief-042", 3) == "retract:brief-042:revision-3"
    assert retract_key("brief-042", 3, "web") == "retract:brief-042:revision-3"
    assert retract_key("brief-042", 3, "partner-feed") == "retract:brief-042:revision-3:channel-partner-feed"


# --- docs/invariants.md#i16: a retraction reaches every holder, once, verified ---------------------------


def test_i16__two_channels_hold_the_brief__one_retraction_each__observed_by_read_back_and_410(
    channels, brief, revise, approver
):
    revision = published(brief, revise, approver)
    assert fresh(brief).status == Brief.Status.PUBLISHED

    operations = retract(brief, by=approver)

    assert {(op.channel, op.key, op.subject_version) for op in operations} == {
        ("web", retract_key(brief.public_id, 1), 1),
        ("partner-feed", retract_key(brief.public_id, 1, "partner-feed"), 1),
    }
    assert fresh(brief).status == Brief.Status.RETRACTED
    assert run_worker(kinds=(RETRACT,)) == {"succeeded": 2}
    assert run_worker(kinds=(RETRACT,)) == {}  # nothing left: a second drain sends nothing
    for slug, target in channels.items():
        assert retractions(target) == [(retract_key(brief.public_id, 1, slug), 1)], slug
        publication = Publication.objects.get(revision=revision, channel__slug=slug)
        assert publication.retracted_at is not None
        with target_client(target) as client:
            assert client.read_back(publication.external_id).retracted is True
            assert httpx.get(publication.permalink, timeout=5).status_code == 410
        operation = Operation.objects.get(key=retract_key(brief.public_id, 1, slug))
        assert operation.status == OperationStatus.SUCCEEDED
        assert operation.result["permalink_status"] == 410


def test_i16__newest_revision_per_channel__the_one_each_holds_is_named(channels, brief, revise, approver):
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver, channels=["web", "partner-feed"])
    run_worker()
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver, channels=["web"])
    run_worker()

    operations = retract(brief, by=approver)
    run_worker(kinds=(RETRACT,))

    assert {(op.channel, op.subject_version) for op in operations} == {("web", 2), ("partner-feed", 1)}
    assert retractions(channels["web"]) == [(retract_key(brief.public_id, 2), 2)]
    assert retractions(channels["partner-feed"]) == [(retract_key(brief.public_id, 1, "partner-feed"), 1)]
    # Revision 1 on web went down with revision 2 (the target takes the brief's article down): marked too.
    assert not Publication.objects.filter(brief=brief, retracted_at__isnull=True).exists()
    assert fresh(brief).retracted_revision_number == 2


def test_i16__asked_twice__the_same_operations_one_audit_record(target, brief, revise, approver):
    published(brief, revise, approver)
    first = retract(brief, by=approver)
    again = retract(brief, by=approver)
    run_worker(kinds=(RETRACT,))
    assert [op.id for op in first] == [op.id for op in again]
    assert retract(brief, by=approver) == []  # taken down: nothing is left to retract, nothing is written
    assert AuditEvent.objects.filter(event_type="brief.retraction_requested").count() == 1
    assert retractions(target) == [(retract_key(brief.public_id, 1), 1)]


def test_i16__commit_then_drop__the_next_attempt_reads_back_and_adopts__one_retraction(target, brief, revise, approver):
    published(brief, revise, approver)
    (operation,) = retract(brief, by=approver)
    target.faults = Faults(rate_drop=1.0)
    run_worker(kinds=(RETRACT,))  # the first try is ambiguous; the retry reads back before sending again
    operation.refresh_from_db()
    assert operation.status == OperationStatus.SUCCEEDED
    attempts = list(Attempt.objects.filter(operation=operation).order_by("number"))
    assert [(a.error_kind, a.ambiguous) for a in attempts] == [("connection", False), ("", True)]
    assert retractions(target) == [(retract_key(brief.public_id, 1), 1)]


def test_i16__race__the_target_holds_a_newer_revision__stale_revision_needs_an_operator(
    target, brief, revise, approver
):
    """docs/retractions.md#race: revision 2's publish landed at the target after the retraction of 1 was decided."""
    WebhookSubscriber.objects.create(name="Wire", url="http://127.0.0.1:9/hook", events=["publication.problem"])
    first = published(brief, revise, approver)
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    (operation,) = retract(brief, by=approver)
    land_at_target(target, second)  # the newer publish in flight, landing first

    run_worker(kinds=(RETRACT,))

    operation.refresh_from_db()
    assert operation.status == OperationStatus.CONFLICT
    assert "holds revision 2" in operation.last_error_message and "an operator decides" in operation.last_error_message
    conflict = Conflict.objects.get(operation=operation)
    assert conflict.kind == Conflict.Kind.STALE_REVISION
    assert conflict.target_state["revision"] == 2
    assert conflict.conflicting_payload_hash == second.payload_hash
    assert retractions(target) == []
    assert Publication.objects.get(revision=first).retracted_at is None
    problem = WebhookEvent.objects.get(type="publication.problem")
    assert (problem.data["kind"], problem.data["status"], problem.data["operation_key"]) == (
        RETRACT,
        "conflict",
        operation.key,
    )


def test_i16__scheduled__due_at_t_on_the_database_clock__not_before(target, brief, revise, approver):
    published(brief, revise, approver)
    at = timezone.now() + datetime.timedelta(hours=2)
    (operation,) = retract(brief, by=approver, retract_at=at)
    assert operation.scheduled_for == at
    assert run_worker(kinds=(RETRACT,)) == {}
    assert retractions(target) == []
    Operation.objects.filter(id=operation.id).update(scheduled_for=timezone.now() - datetime.timedelta(seconds=1))
    Operation.objects.filter(id=operation.id).update(next_attempt_at=timezone.now() - datetime.timedelta(seconds=1))
    assert run_worker(kinds=(RETRACT,)) == {"succeeded": 1}
    assert retractions(target) == [(retract_key(brief.public_id, 1), 1)]


def test_retract__refused__no_approver_no_reason_not_confirmed_nothing_published(
    target, brief, revise, approver, editor
):
    with pytest.raises(InvalidInput, match="nothing to retract"):
        retract(brief, by=approver)
    published(brief, revise, approver)
    with pytest.raises(PermissionRefused, match="Approvers can retract a brief"):
        retract(brief, by=editor)
    with pytest.raises(InvalidInput, match="reason for the retraction is required"):
        retract(brief, by=approver, reason="   ")
    with pytest.raises(InvalidInput, match="Confirm the retraction"):
        retract(brief, by=approver, confirm=False)
    assert not Operation.objects.filter(kind=RETRACT).exists()
    assert fresh(brief).status == Brief.Status.PUBLISHED


def test_retract__webhook_event_per_channel_in_the_finalize(target, brief, revise, approver):
    WebhookSubscriber.objects.create(name="Wire", url="http://127.0.0.1:9/hook", events=["publication.retracted"])
    published(brief, revise, approver)
    retract(brief, by=approver)
    assert not WebhookEvent.objects.exists()  # only an observed retraction is an event
    run_worker(kinds=(RETRACT,))
    event = WebhookEvent.objects.get()
    assert event.type == "publication.retracted"
    assert (event.data["brief"], event.data["channel"], event.data["revision"]) == (brief.public_id, "web", 1)
    assert event.data["reason"] == REASON


def test_retract__drift_checks_skip_a_retracted_publication(target, brief, revise, approver):
    published(brief, revise, approver)
    retract(brief, by=approver)
    run_worker(kinds=(RETRACT,))
    with transaction.atomic(durable=True):
        assert do_enqueue_drift_checks(limit=10, interval=datetime.timedelta(0)) == 0
    assert not Operation.objects.filter(kind=DRIFT_CHECK).exists()


# --- docs/invariants.md#i4: what was taken down is never published again; a newer revision is ---------------


def test_i4__retracted_revision__target_fence_refuses_it_galley_refuses_its_approval_newer_publishes_again(
    target, brief, revise, approver, approver2
):
    first = published(brief, revise, approver)
    retract(brief, by=approver)
    run_worker(kinds=(RETRACT,))

    with target_client(target) as client, pytest.raises(TargetStaleRevision) as stale:
        client.publish(
            operation_key=f"{publish_key(brief.public_id, 1)}:late",
            brief_id=brief.public_id,
            revision=1,
            payload_hash=payload_hash(first.payload),
            payload=first.payload,
        )
    assert stale.value.current_revision == 1
    with pytest.raises(DecisionAlreadyMade, match="was retracted"):
        approve(first, by=approver2)
    with transaction.atomic(durable=True), pytest.raises(DecisionAlreadyMade, match="was retracted"):
        check_also_publish(brief.public_id, revision_number=1, channel="web", acting_user=approver2)

    second = published(brief, revise, approver, body="Dockers walked out at dawn. Corrected.")

    brief = fresh(brief)
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, 2)
    publication = Publication.objects.get(revision=second)
    assert publication.verified_at is not None and publication.retracted_at is None
    with target_client(target) as client:
        assert client.read_back(publication.external_id).retracted is False
    assert Publication.objects.get(revision=first).retracted_at is not None


def test_i4__unclaimed_publish_of_the_retracted_revision__superseded_never_sent(channels, brief, revise, approver):
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver, channels=["web"])
    run_worker()
    with transaction.atomic(durable=True):
        check_also_publish(brief.public_id, revision_number=1, channel="partner-feed", acting_user=approver)
    pending = Operation.objects.get(key=publish_key(brief.public_id, 1, "partner-feed"))

    retract(brief, by=approver)
    run_worker()

    pending.refresh_from_db()
    assert pending.status == OperationStatus.SUPERSEDED
    assert channels["partner-feed"].ledger() == []
    assert retractions(channels["web"]) == [(retract_key(brief.public_id, 1), 1)]


def test_i4__publish_claimed_after_the_retraction__galley_fence_supersedes_it(target, brief, revise, approver):
    revision = published(brief, revise, approver)
    retract(brief, by=approver)
    run_worker(kinds=(RETRACT,))
    # An intent for the retracted revision written behind the approvals' back: its handler refuses it.
    with transaction.atomic(durable=True):
        operation = enqueue_operation(
            key=f"{publish_key(brief.public_id, 1)}:stray",
            kind=PUBLISH,
            channel="web",
            payload_hash=revision.payload_hash,
            subject_type="brief",
            subject_id=brief.public_id,
            subject_version=1,
            arguments={"revision": 1},
        ).operation
    run_worker(kinds=(PUBLISH,))
    operation.refresh_from_db()
    assert operation.status == OperationStatus.SUPERSEDED
    assert "retracted" in operation.last_error_message
    assert len(target.ledger()) == 1


# --- docs/invariants.md#i13: audit ---------------------------------------------------------------------------


def test_i13__retraction__request_and_each_observation_audited_with_who_and_old_new_state(
    channels, brief, revise, approver
):
    published(brief, revise, approver)
    retract(brief, by=approver)
    run_worker(kinds=(RETRACT,))

    requested = AuditEvent.objects.get(event_type="brief.retraction_requested")
    assert (requested.actor_id, requested.subject_id) == (approver.id, brief.public_id)
    assert requested.old_state == {"status": Brief.Status.PUBLISHED, "retracted_revision": None, "reason": ""}
    assert requested.new_state["status"] == Brief.Status.RETRACTED
    assert requested.new_state["reason"] == REASON
    assert requested.new_state["channels"] == {"web": 1, "partner-feed": 1}
    observed = AuditEvent.objects.filter(event_type="publication.retracted").order_by("id")
    assert sorted(event.new_state["channel"] for event in observed) == ["partner-feed", "web"]
    for event in observed:
        assert event.actor_id is None and event.subject_id == f"{brief.public_id}/revision-1"
        assert event.old_state["retracted_at"] is None and event.new_state["retracted_at"]


# --- §7.2: the operations admin's actions work for retractions ------------------------------------------------


def test_operator__admin_reconcile__the_next_attempt_reads_back_and_adopts_what_the_target_holds(
    target, brief, revise, approver, operator_client
):
    revision = published(brief, revise, approver)
    (operation,) = retract(brief, by=approver)
    target.faults = Faults(rate_500=1.0)
    run_worker(kinds=(RETRACT,))  # server errors until its attempts are spent: a dead letter
    operation.refresh_from_db()
    assert operation.status == OperationStatus.DEAD
    target.faults = Faults()
    retracted_unseen(target, operation)
    answer = run_action(operator_client, OPERATIONS, "reconcile_with_target", [operation])
    assert messages_of(answer) == ["1 operation(s) queued for reconciliation."]

    run_worker(kinds=(RETRACT,))

    operation.refresh_from_db()
    assert operation.status == OperationStatus.SUCCEEDED
    assert Attempt.objects.filter(operation=operation).order_by("number").last().ambiguous
    assert operation.result["retracted_at"] == retractions_at(target)[0]
    assert retractions(target) == [(operation.key, 1)]
    assert Publication.objects.get(revision=revision).retracted_at is not None


def conflicted_retraction(target: ReferenceTarget, brief: Brief, revise, approver) -> Operation:
    """Revision 1 published and retracted while revision 2's publish, in flight, landed first: the retraction
    is in conflict (docs/retractions.md#race)."""
    published(brief, revise, approver)
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    (operation,) = retract(brief, by=approver)
    land_at_target(target, second)
    run_worker(kinds=(RETRACT,))
    operation.refresh_from_db()
    assert operation.status == OperationStatus.CONFLICT
    return operation


def test_operator__admin_race_conflict__retry_now_asks_again__cancel_with_reason_ends_it(
    target, brief, revise, approver, operator, operator_client
):
    operation = conflicted_retraction(target, brief, revise, approver)

    assert messages_of(run_action(operator_client, OPERATIONS, "retry_now", [operation]))
    run_worker(kinds=(RETRACT,))
    operation.refresh_from_db()
    assert operation.status == OperationStatus.CONFLICT  # the target still holds revision 2: the same answer

    reason = "revision 2 is the correction; it stays"
    assert messages_of(run_action(operator_client, OPERATIONS, "cancel_with_reason", [operation], reason=reason))
    operation.refresh_from_db()
    assert operation.status == OperationStatus.CANCELLED
    assert not Conflict.objects.filter(operation=operation, resolved_at__isnull=True).exists()
    assert AuditEvent.objects.filter(event_type="operation.cancelled", actor_id=operator.id).exists()
    assert retractions(target) == []


def test_i16__verification_under_way_when_taken_down__superseded_not_a_problem(target, brief, revise, approver):
    serve_pages_late(target)  # the page comes late: a verify operation reads it back
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    run_worker(kinds=(PUBLISH,))  # applied; its verification waits
    verify = Operation.objects.get(kind=VERIFY)
    # The verification already claimed when the retraction came: it cannot be superseded before it runs.
    Operation.objects.filter(id=verify.id).update(attempts=1)
    retract(brief, by=approver)
    run_worker(kinds=(RETRACT,))
    Operation.objects.filter(id=verify.id).update(attempts=0)

    run_worker(kinds=(VERIFY,))

    verify.refresh_from_db()
    assert verify.status == OperationStatus.SUPERSEDED
    assert "retracted at the target" in verify.last_error_message
