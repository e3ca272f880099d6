"""Notifications: written with each event (submit, assignment, decisions, comments, publication,
a publish problem needing an operator), shown in the app, and emailed by a worker — never inside
a request or a transaction, and once however often the handler runs."""

from __future__ import annotations

import dataclasses
import datetime
import time

import pytest
from django.core import mail
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from approvals.actions import APPROVERS_GROUP, check_assign_brief
from approvals.handlers import handle_notification_email
from approvals.models import Approval, Notification
from approvals.notifications import NOTIFICATION_EMAIL, notification_email_key
from publishing.actions import publications
from publishing.actions.briefs import check_create_brief
from publishing.actions.legal import check_flag_legal_review
from publishing.identities import PUBLISH, publish_key
from publishing.models import Brief, Desk
from tests.approvals.test_approvals import decide
from tests.approvals.test_comments import post
from tests.web import client_for
from workers.actions.claims import claim_operations, fail_operation
from workers.actions.enqueue import enqueue_operation
from workers.actions.housekeeping import reconcile_expired_leases
from workers.attempts import run_operation
from workers.drain import drain
from workers.errors import FailureKind, OperationFailed
from workers.models import Operation, OperationStatus

Event = Notification.Event


def with_email(*users) -> None:
    for user in users:
        user.email = f"{user.username}@newsroom.example"
        user.save(update_fields=["email"])


def notified(event: str) -> list[str]:
    return sorted(n.recipient.username for n in Notification.objects.filter(event=event).select_related("recipient"))


def email_operations() -> list[Operation]:
    return list(Operation.objects.filter(kind=NOTIFICATION_EMAIL).order_by("id"))


def assign(brief: Brief, assignee: str, *, by) -> None:
    with transaction.atomic(durable=True):
        check_assign_brief(brief.public_id, assignee=assignee, acting_user=by)


def drain_emails():
    return drain(worker_id="w-mail", kinds=[NOTIFICATION_EMAIL], time_budget=30, idle_wait=0.3)


# --- one notification per event, in the event's transaction -----------------------------------------


@pytest.mark.django_db
def test_submit__unassigned__every_approver_but_not_the_author(editor, approver, approver2, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")

    assert notified(Event.SUBMITTED) == ["abe", "ava"]
    note = Notification.objects.filter(event=Event.SUBMITTED).first()
    assert note.revision_number == revision.number and note.brief == brief
    assert note.get_absolute_url() == revision.get_absolute_url()


@pytest.mark.django_db
def test_submit__assigned__only_the_assignee(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    assign(brief, str(approver.pk), by=editor)
    Notification.objects.all().delete()

    revise(brief, "Dockers returned at noon.")

    assert notified(Event.SUBMITTED) == ["ava"]


@pytest.mark.django_db
def test_assign__to_group__every_approver_but_the_assigner(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")

    assign(brief, APPROVERS_GROUP, by=approver)

    assert notified(Event.ASSIGNED) == ["abe"]


@pytest.mark.django_db
@pytest.mark.parametrize("decision", [Approval.Decision.APPROVED, Approval.Decision.CHANGES_REQUESTED])
def test_decision__the_author_is_told(decision, editor, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")

    decide(revision, decision=decision, by=approver)

    assert notified(decision) == ["eddie"]


@pytest.mark.django_db
def test_comment_and_reply__author_and_thread_but_never_the_commenter(editor, approver, approver2, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    thread = post(revision, "Which union?", by=approver)
    assert notified(Event.COMMENTED) == ["eddie"]

    post(revision, "The dockers'.", by=editor, reply_to=thread)
    post(revision, "Agreed.", by=approver2, reply_to=thread)

    # Each recipient's unread comment notifications on the brief are one, counting the comments.
    assert notified(Event.COMMENTED) == ["ava", "eddie"]
    counts = dict(Notification.objects.filter(event=Event.COMMENTED).values_list("recipient__username", "count"))
    assert counts == {"ava": 2, "eddie": 2}


@pytest.mark.django_db
def test_publication_verified__author_and_approver_told_in_the_verify_finalize(editor, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, decision=Approval.Decision.APPROVED, by=approver)
    publish = Operation.objects.get(key=publish_key(brief.public_id, revision.number))

    with transaction.atomic(durable=True):
        publication = publications.do_record_publication(
            revision,
            channel="web",
            publish_operation_id=publish.id,
            external_id="post-1",
            permalink="https://example.test/p/1",
        )
    assert notified(Event.PUBLISHED) == []
    with transaction.atomic(durable=True):
        publications.do_record_verification(publication)
        publications.do_record_verification(publication)  # a second run advances nothing, tells no one

    assert notified(Event.PUBLISHED) == ["ava", "eddie"]
    assert "https://example.test/p/1" in Notification.objects.get(event=Event.PUBLISHED, recipient=editor).message


@pytest.mark.django_db(transaction=True)
def test_publish_dead_letter__operators_and_author_told_with_the_reason(editor, approver, operator, brief, revise):
    with_email(operator)
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, decision=Approval.Decision.APPROVED, by=approver)
    (claimed,) = claim_operations(worker_id="w-test", limit=1, kinds=[PUBLISH])

    fail_operation(
        claimed, OperationFailed(FailureKind.AUTH, "the target refused Galley's token"), started=time.monotonic()
    )

    assert Operation.objects.get(id=claimed.operation_id).needs_operator
    assert notified(Event.PUBLISH_FAILED) == ["eddie", "otto"]
    note = Notification.objects.get(event=Event.PUBLISH_FAILED, recipient=operator)
    assert note.message == (
        f"Publishing revision 1 of {brief.public_id} needs an operator (dead): the target refused Galley's token"
    )
    # Only the operator has an address: one email intent, emailed by the worker.
    (operation,) = email_operations()
    assert operation.key == notification_email_key(note.pk)
    drain_emails()
    assert [m.to for m in mail.outbox] == [["otto@newsroom.example"]]


@pytest.mark.django_db(transaction=True)
def test_publish_dead_letter_by_the_reconciler__operators_and_author_told(editor, approver, operator, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, decision=Approval.Decision.APPROVED, by=approver)
    (claimed,) = claim_operations(worker_id="w-gone", limit=1, kinds=[PUBLISH])
    # The worker died on its last attempt: once its lease expires, the reconciler makes a dead letter.
    Operation.objects.filter(id=claimed.operation_id).update(
        max_attempts=1, lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )

    assert reconcile_expired_leases()["dead"] == 1

    assert Operation.objects.get(id=claimed.operation_id).status == OperationStatus.DEAD
    assert notified(Event.PUBLISH_FAILED) == ["eddie", "otto"]
    note = Notification.objects.get(event=Event.PUBLISH_FAILED, recipient=operator)
    assert note.message == (
        f"Publishing revision 1 of {brief.public_id} needs an operator (dead): "
        "lease of w-gone expired before an outcome"
    )


@pytest.mark.django_db
def test_recipient_without_address__notified_in_app_no_email_intent(editor, approver, brief, revise):
    revise(brief, "Dockers walked out at dawn.")

    assert notified(Event.SUBMITTED) == ["ava"]
    assert email_operations() == []


# --- email: through the outbox, never in the request, exactly once ----------------------------------


@pytest.mark.django_db(transaction=True)
def test_email__not_sent_in_the_request__sent_once_when_the_worker_drains(editor, approver, brief, revise):
    with_email(editor, approver)
    revision = revise(brief, "Dockers walked out at dawn.")
    mail.outbox.clear()

    response = client_for(approver).post(
        f"/briefs/{brief.public_id}/revisions/{revision.number}/comments/", {"body": "Which union called it?"}
    )

    assert response.status_code == 302
    assert mail.outbox == []
    (note,) = Notification.objects.filter(event=Event.COMMENTED)
    assert note.recipient == editor and note.emailed_at is None
    assert drain_emails()["succeeded"] >= 1
    sent = [m for m in mail.outbox if "Which union called it?" in m.body]
    assert len(sent) == 1
    assert sent[0].to == ["eddie@newsroom.example"]
    assert sent[0].subject == f"[Galley] Commented: {brief.public_id}"
    assert f"/briefs/{brief.public_id}/revisions/1/" in sent[0].body
    note.refresh_from_db()
    assert note.emailed_at is not None


@pytest.mark.django_db(transaction=True)
def test_email__handler_run_twice__sent_once(editor, approver, brief, revise):
    with_email(approver)
    revise(brief, "Dockers walked out at dawn.")
    mail.outbox.clear()
    (claimed,) = claim_operations(worker_id="w-mail", limit=1, kinds=[NOTIFICATION_EMAIL])

    assert run_operation(claimed) == "succeeded"
    again = handle_notification_email(
        dataclasses.replace(claimed, attempt_number=2, fencing_token=claimed.fencing_token + 1)
    )

    assert len(mail.outbox) == 1
    assert again.result["sent"] is False
    assert Operation.objects.get(id=claimed.operation_id).status == OperationStatus.SUCCEEDED
    assert drain_emails().total() == 0
    assert len(mail.outbox) == 1


@pytest.mark.django_db(transaction=True)
def test_email__intent_written_again__same_operation(editor, approver, brief, revise):
    with_email(approver)
    revise(brief, "Dockers walked out at dawn.")
    (operation,) = email_operations()

    with transaction.atomic(durable=True):
        again = enqueue_operation(
            key=operation.key,
            kind=NOTIFICATION_EMAIL,
            payload_hash=operation.payload_hash,
            subject_type="notification",
            subject_id=operation.subject_id,
        )

    assert not again.created and again.operation.id == operation.id


# --- the notifications page and the nav's unread count -------------------------------------------------


@pytest.mark.django_db
def test_page__lists_mine_with_unread_count_and_marks_read(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    other = check_create_brief(title="Tram fares", source_material="", acting_user=editor)
    revise(other, "Fares go up.", title="Tram fares")
    client = client_for(approver)

    page = client.get("/notifications/")

    assertContains(page, 'data-testid="nav-notifications">Notifications <span class="count">2</span>', html=False)
    assert len(page.context["page"]) == 2
    assertContains(page, f"Revision 1 of {brief.public_id}")
    first = Notification.objects.filter(recipient=approver).order_by("id").first()

    client.post("/notifications/read/", {"notification": str(first.pk)})
    assertContains(client.get("/notifications/"), '<span class="count">1</span>', html=False)

    client.post("/notifications/read/", {})
    page = client.get("/notifications/")
    assertNotContains(page, '<span class="count">')
    assert not Notification.objects.filter(recipient=approver, read_at__isnull=True).exists()
    # Another approver's notifications are theirs alone.
    assert Notification.objects.filter(recipient=approver2, read_at__isnull=True).count() == 2


@pytest.mark.django_db
def test_mark_read__another_users_notification__changes_nothing(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    theirs = Notification.objects.get(recipient=approver2)

    client_for(approver).post("/notifications/read/", {"notification": str(theirs.pk)})

    theirs.refresh_from_db()
    assert theirs.read_at is None


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["abc", "-1", "99999999999999999999"])
def test_mark_read__not_an_id__refused_or_nothing(value, approver):
    response = client_for(approver).post("/notifications/read/", {"notification": value})

    assert response.status_code in (302, 400)


@pytest.mark.django_db
@pytest.mark.parametrize(("role", "status"), [("editor", 200), ("approver", 200), ("operator", 200), ("no_group", 403)])
def test_page__roles(role, status, users):
    assert client_for(users[role]).get("/notifications/").status_code == status


@pytest.mark.django_db
def test_query_count__page__independent_of_how_many(editor, approver, revise, django_assert_num_queries):
    client = client_for(approver)
    brief = check_create_brief(title="Story 0", source_material="", acting_user=editor)
    revise(brief, "Text.", title="Story 0")
    with CaptureQueriesContext(connection) as one:
        client.get("/notifications/")
    for n in range(1, 60):
        other = check_create_brief(title=f"Story {n}", source_material="", acting_user=editor)
        revise(other, "Text.", title=f"Story {n}")

    with django_assert_num_queries(len(one)):
        response = client.get("/notifications/?page=2")
    assert len(response.context["page"]) == 10


# --- coalesced per brief: one notification per submission, never a superseded one --------------------


@pytest.mark.django_db
def test_one_notification_per_submission__later_revisions_update_the_unread_one(editor, approver, brief, revise):
    for text in ["Dockers walked out.", "Dockers walked out at dawn.", "Dockers walked out at dawn, again."]:
        revise(brief, text)

    (note,) = Notification.objects.filter(recipient=approver, event=Event.SUBMITTED)
    assert note.revision_number == 3 and note.count == 3
    assert note.message.startswith("Revision 3 of")


@pytest.mark.django_db
def test_superseded_submission__never_notified_twice__the_read_one_stays_history(editor, approver, brief, revise):
    revise(brief, "Dockers walked out.")
    client_for(approver).post("/notifications/read/", {})
    revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers walked out at dawn, again.")

    notes = Notification.objects.filter(recipient=approver, event=Event.SUBMITTED).order_by("id")

    assert [(n.revision_number, n.read_at is not None, n.count) for n in notes] == [(1, True, 1), (3, False, 2)]


@pytest.mark.django_db
def test_coalescing__per_brief_and_event__other_briefs_and_events_stay_apart(editor, approver, brief, revise):
    revise(brief, "Dockers walked out.")
    other = check_create_brief(title="Tram fares", source_material="", acting_user=editor)
    revise(other, "Fares go up.", title="Tram fares")
    revise(brief, "Dockers walked out at dawn.")

    unread = Notification.objects.filter(recipient=approver, read_at__isnull=True)

    assert sorted((n.brief.public_id, n.event, n.count) for n in unread) == sorted(
        [(brief.public_id, Event.SUBMITTED, 2), (other.public_id, Event.SUBMITTED, 1)]
    )


@pytest.mark.django_db
def test_one_unread_per_brief_and_event__held_by_the_database(editor, approver, brief, revise):
    revise(brief, "Dockers walked out.")
    note = Notification.objects.get(recipient=approver)

    with pytest.raises(IntegrityError), transaction.atomic():
        Notification.objects.create(
            recipient=approver, event=note.event, brief=brief, revision_number=2, message="a second one"
        )


@pytest.mark.django_db(transaction=True)
def test_superseded_submission__emailed_once_naming_the_latest_revision(editor, approver, brief, revise):
    with_email(approver)
    revise(brief, "Dockers walked out.")
    revise(brief, "Dockers walked out at dawn.")
    mail.outbox.clear()

    drain_emails()

    (operation,) = email_operations()
    assert operation.status == OperationStatus.SUCCEEDED
    (sent,) = mail.outbox
    assert "Revision 2 of" in sent.body and "Revision 1 of" not in sent.body
    assert f"/briefs/{brief.public_id}/revisions/2/" in sent.body


@pytest.mark.django_db(transaction=True)
def test_superseded_submission__read_before_its_email__never_emailed_and_recorded_skipped(
    editor, approver, brief, revise
):
    with_email(approver)
    revise(brief, "Dockers walked out.")
    client_for(approver).post("/notifications/read/", {})  # read in the app before its email went out
    revise(brief, "Dockers walked out at dawn.")
    mail.outbox.clear()

    drain_emails()

    first, second = email_operations()
    assert first.status == OperationStatus.SUPERSEDED
    assert "revision 1 was superseded by revision 2" in first.last_error_message
    assert second.status == OperationStatus.SUCCEEDED
    (sent,) = mail.outbox
    assert "Revision 2 of" in sent.body
    assert Notification.objects.get(recipient=approver, revision_number=1).emailed_at is None


# --- approval policies: who is told their approval is needed (docs/policies.md) ---------------------


@pytest.mark.django_db
def test_flagged_for_legal_review__revision_in_review__legal_reviewers_told_once(
    editor, approver, legal, brief, revise
):
    revise(brief, "Dockers walked out at dawn.")

    with transaction.atomic(durable=True):
        assert check_flag_legal_review(brief.public_id, acting_user=approver)
    with transaction.atomic(durable=True):
        assert not check_flag_legal_review(brief.public_id, acting_user=editor)  # already flagged: nothing new

    assert notified(Event.REVIEW_NEEDED) == ["lena"]
    note = Notification.objects.get(event=Event.REVIEW_NEEDED)
    assert "needs an approval from Legal" in note.message and note.revision_number == 1


@pytest.mark.django_db
def test_flagged_for_legal_review__nothing_in_review__nobody_told(editor, approver, legal, brief):
    with transaction.atomic(durable=True):
        assert check_flag_legal_review(brief.public_id, acting_user=editor)

    assert notified(Event.REVIEW_NEEDED) == []


@pytest.mark.django_db
def test_first_of_two_approvals__the_next_reviewers_told__not_the_approver_nor_the_author(
    editor, approver, approver2, legal, brief, revise
):
    politics = Desk.objects.create(slug="politics", name="Politics", approvals_required=2)
    Brief.objects.filter(pk=brief.pk).update(desk=politics)
    brief.refresh_from_db()
    revision = revise(brief, "Dockers walked out at dawn.")

    decide(revision, by=approver)

    assert notified(Event.REVIEW_NEEDED) == ["abe", "lena"]
    assert "1 more approval" in Notification.objects.filter(event=Event.REVIEW_NEEDED).first().message
    decide(revision, by=approver2)  # completes: nobody else is told their approval is needed
    assert notified(Event.REVIEW_NEEDED) == ["abe", "lena"]
