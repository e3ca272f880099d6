"""Settling publication problems (publishing.actions.resolutions): no action can publish an
unapproved or stale revision, each is audited and idempotent, and only operators act."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import transaction
from django.test import Client

from publishing.actions.resolutions import (
    Outcome,
    check_adopt_target_revision,
    check_cancel_publication,
    check_publish_as_next_revision,
    check_retry_publication,
)
from publishing.errors import InvalidInput, PermissionRefused
from publishing.hashing import payload_hash
from publishing.identities import PUBLISH, publish_key
from publishing.models import Publication, Revision
from publishing.selectors.problems import get_publication_problem
from tests.late_pages import serve_pages_late
from tests.publishing.handlers import test_publications as delivery
from tests.publishing.handlers.test_publications import (
    OTHER_PAYLOAD,
    applied,
    approve,
    assert_not_published,
    publish_op,
    run_worker,
    seed_target,
    verify_op,
)
from workers.actions.claims import claim_operations
from workers.attempts import run_operation
from workers.models import AuditEvent, Conflict

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]


def stale_conflict(target, brief, revise, approver, *, approve_second: bool):
    """Revision 1 in flight while the target already holds revision 2 under Galley's key: its
    fence refuses revision 1, a stale-revision conflict that records what the target holds."""
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    (claimed,) = claim_operations(worker_id="w-test", limit=1, kinds=[PUBLISH])
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    if approve_second:
        approve(second, by=approver)
    seed_target(
        target, key=publish_key(brief.public_id, 2), brief_id=brief.public_id, revision=2, payload=second.payload
    )
    assert run_operation(claimed) == "conflict"
    return first, second


def test_revision_bound_approval__adopting_an_unapproved_revision_the_target_holds__refused(
    target, brief, revise, approver, operator
):
    first, second = stale_conflict(target, brief, revise, approver, approve_second=False)
    operation = publish_op(first)
    problem = get_publication_problem(operation)
    assert problem.held is not None and problem.held.revision == second
    assert problem.adoptable is None
    assert problem.adopt_refusal == "The target holds revision 2, which nobody approved: it cannot be adopted."
    events = AuditEvent.objects.count()

    with transaction.atomic(durable=True):
        outcome = check_adopt_target_revision(operation, acting_user=operator)

    assert (outcome.changed, outcome.message) == (False, problem.adopt_refusal)
    assert AuditEvent.objects.count() == events
    assert publish_op(first).status == "conflict"
    assert run_worker() == {}
    assert_not_published(brief)


def test_no_regression__newer_revision_published__closes_the_older_problem_for_good(
    target, brief, revise, approver, operator
):
    first, _second = stale_conflict(target, brief, revise, approver, approve_second=True)
    operation = publish_op(first)

    assert run_worker() == {"succeeded": 1}  # revision 2's publish (a replay), verified in its attempt

    operation.refresh_from_db()
    assert (operation.status, operation.last_error_message) == ("cancelled", "revision 2 was published instead")
    assert Conflict.objects.get(operation=operation).resolution == "cancelled: revision 2 was published instead"
    with transaction.atomic(durable=True):
        outcome = check_adopt_target_revision(operation, acting_user=operator)
    assert (outcome.changed, outcome.message) == (False, f"Nothing to do: {operation.key} is cancelled now.")


def test_no_regression__adopting_a_revision_older_than_the_published_one__refused(
    target, brief, revise, approver, operator
):
    """Revision 2 is published; revision 3's read-back shows revision 1's content (restored at the
    target by hand): adopting it would publish backwards, so it is refused."""
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    assert run_worker() == {"succeeded": 1}
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)
    assert run_worker() == {"succeeded": 1}
    serve_pages_late(target)  # revision 3's page comes late: its verify operation reads back
    third = revise(brief, "Dockers walked out at dawn. The port reopens on Monday.")
    approve(third, by=approver)
    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    external_id = Publication.objects.get(revision=third).external_id
    with sqlite3.connect(target.store.path) as db:
        db.execute("DROP TRIGGER publications_immutable")
        db.execute("UPDATE publications SET payload_hash = ? WHERE id = ?", (first.payload_hash, external_id))
    db.close()
    assert run_worker() == {"conflict": 1}
    operation = verify_op(third)

    problem = get_publication_problem(operation)
    assert problem.held is not None and problem.held.revision == first
    assert problem.adoptable is None
    assert problem.adopt_refusal == "The target holds revision 1, older than the published revision 2."
    with transaction.atomic(durable=True):
        outcome = check_adopt_target_revision(operation, acting_user=operator)
    assert (outcome.changed, outcome.message) == (False, problem.adopt_refusal)
    assert verify_op(third).status == "conflict"
    assert run_worker() == {}
    assert delivery.fresh(brief).published_revision_number == second.number


def test_audit__operator_actions_on_a_publication_problem__audited_once_and_idempotent(
    target, brief, revise, approver, operator
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    seed_target(
        target, key=publish_key(brief.public_id, 1), brief_id=brief.public_id, revision=1, payload=OTHER_PAYLOAD
    )
    assert run_worker() == {"conflict": 1}
    operation = publish_op(revision)

    with transaction.atomic(durable=True), pytest.raises(InvalidInput, match=r"The reason .* is required"):
        check_cancel_publication(operation, reason="  ", acting_user=operator)
    with transaction.atomic(durable=True):
        first = check_cancel_publication(operation, reason="the old system's article stays", acting_user=operator)
    events = AuditEvent.objects.count()
    with transaction.atomic(durable=True):
        again = check_cancel_publication(operation, reason="the old system's article stays", acting_user=operator)
    with transaction.atomic(durable=True):
        retry = check_retry_publication(operation, acting_user=operator)

    assert first.changed and not again.changed and not retry.changed
    assert again.message == f"Nothing to do: {operation.key} is cancelled now."
    assert AuditEvent.objects.count() == events
    assert publish_op(revision).status == "cancelled"
    assert run_worker() == {}
    assert applied(target) == [(operation.key, 1, payload_hash(OTHER_PAYLOAD))]


def test_audit__only_operators_settle_publication_problems(target, brief, revise, approver, editor, users):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    seed_target(
        target, key=publish_key(brief.public_id, 1), brief_id=brief.public_id, revision=1, payload=OTHER_PAYLOAD
    )
    assert run_worker() == {"conflict": 1}
    operation = publish_op(revision)

    with transaction.atomic(durable=True), pytest.raises(PermissionRefused):
        check_retry_publication(operation, acting_user=editor)

    client = Client()
    client.force_login(users["operator"])
    listing = client.get("/admin/publishing/publicationproblem/?state=open")
    assert listing.status_code == 200
    assert operation.key in listing.content.decode()
    page = client.get(f"/admin/publishing/publicationproblem/{operation.id}/change/")
    assert page.status_code == 200
    assert "Cancel with this reason" in page.content.decode()
    assert client.get(f"/admin/publishing/publicationproblem/{operation.id}/resolve/").status_code == 405
    unknown = client.post("/admin/publishing/publicationproblem/999999/resolve/", {"action": "retry"})
    assert unknown.status_code == 404
    assert publish_op(revision).status == "conflict"


# --- "publish as the next revision" (a stale revision) ----------------------------------------------


def target_holds_another_revision(target, brief, revise, approver, *, held: int):
    """Revision 1 approved while the target already holds revision `held` of the brief, written by
    another system under a key Galley never used: its fence refuses revision 1 (a stale revision)."""
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    seed_target(
        target, key=f"elsewhere:{brief.public_id}", brief_id=brief.public_id, revision=held, payload=OTHER_PAYLOAD
    )
    assert run_worker() == {"conflict": 1}
    operation = publish_op(first)
    assert Conflict.objects.get(operation=operation).kind == "stale_revision"
    return first, operation


def publish_as_next(operation, user):
    with transaction.atomic(durable=True):
        return check_publish_as_next_revision(operation, acting_user=user)


def test_revision_bound_approval__publish_as_next_revision__new_revision_needs_its_own_approval_then_publishes(
    target, brief, revise, approver, operator
):
    first, operation = target_holds_another_revision(target, brief, revise, approver, held=1)
    assert get_publication_problem(operation).next_revision_number == 2

    outcome = publish_as_next(operation, operator)

    assert outcome == Outcome(
        True, "Wrote revision 2 with revision 1's approved content; it is published once an approver approves it."
    )
    second = Revision.objects.get(brief=brief, number=2)
    assert (second.payload, second.payload_hash, second.author) == (first.payload, first.payload_hash, operator)
    operation.refresh_from_db()
    assert operation.status == "cancelled"
    assert operation.last_error_message == (
        "the target holds revision 1; an operator wrote revision 1's approved content as revision 2, "
        "published once it is approved"
    )
    event = AuditEvent.objects.get(event_type="publication.republished_as_next_revision")
    assert (event.actor, event.subject_id, event.new_state["revision"]) == (operator, brief.public_id, 2)
    assert delivery.fresh(brief).status == "in_review"
    # docs/invariants.md#i3: revision 1's approval does not count for revision 2, though the content is the same.
    assert run_worker() == {}
    assert applied(target) == [(f"elsewhere:{brief.public_id}", 1, payload_hash(OTHER_PAYLOAD))]
    assert_not_published(brief)

    approve(second, by=approver)
    assert run_worker() == {"succeeded": 1}
    delivery.assert_published(brief, second)
    assert applied(target)[-1] == delivery.application_of(second)


def test_audit__publish_as_next_revision__repeated__writes_nothing_more(target, brief, revise, approver, operator):
    _first, operation = target_holds_another_revision(target, brief, revise, approver, held=1)
    assert publish_as_next(operation, operator).changed
    events, revisions = AuditEvent.objects.count(), Revision.objects.count()

    again = publish_as_next(operation, operator)

    assert again == Outcome(False, f"Nothing to do: {operation.key} is cancelled now.")
    assert (AuditEvent.objects.count(), Revision.objects.count()) == (events, revisions)


def test_no_regression__publish_as_next_revision__not_above_the_target_revision__refused_nothing_written(
    target, brief, revise, approver, operator
):
    _first, operation = target_holds_another_revision(target, brief, revise, approver, held=7)
    events, revisions = AuditEvent.objects.count(), Revision.objects.count()

    outcome = publish_as_next(operation, operator)

    assert not outcome.changed
    assert outcome.message.startswith(
        "The target holds revision 7, and Galley's next revision would be 2, which its fence refuses too"
    )
    assert (AuditEvent.objects.count(), Revision.objects.count()) == (events, revisions)
    assert publish_op(_first).status == "conflict"


def test_publish_as_next_revision__a_newer_revision_exists__refused_approve_that_one(
    target, brief, revise, approver, operator
):
    _first, operation = target_holds_another_revision(target, brief, revise, approver, held=1)
    revise(brief, "Dockers walked out at dawn. The port is closed.")

    outcome = publish_as_next(operation, operator)

    assert outcome == Outcome(
        False,
        "Revision 2 is newer than revision 1, and the editors' newer work is not overwritten: "
        "approve and publish revision 2 instead (the target accepts only revisions above 1).",
    )
    assert Revision.objects.filter(brief=brief).count() == 2


def test_publish_as_next_revision__only_operators(target, brief, revise, approver, editor):
    _first, operation = target_holds_another_revision(target, brief, revise, approver, held=1)

    with pytest.raises(PermissionRefused):
        publish_as_next(operation, editor)
    assert Revision.objects.filter(brief=brief).count() == 1


def test_publish_as_next_revision__admin_offers_it_on_the_problem_page_and_does_it(
    target, brief, revise, approver, users
):
    _first, operation = target_holds_another_revision(target, brief, revise, approver, held=1)
    client = Client()
    client.force_login(users["operator"])
    page = client.get(f"/admin/publishing/publicationproblem/{operation.id}/change/").content.decode()
    assert "Publish as the next revision: write revision 1's approved content as revision 2" in page

    response = client.post(
        f"/admin/publishing/publicationproblem/{operation.id}/resolve/",
        {"action": "publish_as_next_revision"},
        follow=True,
    )

    assert "Wrote revision 2 with revision 1&#x27;s approved content" in response.content.decode()
    assert Revision.objects.filter(brief=brief, number=2).exists()
    again = client.get(f"/admin/publishing/publicationproblem/{operation.id}/change/").content.decode()
    assert "Publish as the next revision" not in again


def test_publish_as_next_revision__target_holds_an_approved_revision__adopting_is_the_one_way_offered(
    target, brief, revise, approver
):
    first, second = stale_conflict(target, brief, revise, approver, approve_second=True)

    problem = get_publication_problem(publish_op(first))

    assert problem.adoptable == second
    assert (problem.next_revision_number, problem.next_revision_refusal) == (None, "")
