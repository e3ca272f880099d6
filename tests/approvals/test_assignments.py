"""Assigning a brief's review to an approver or to the Approvers group, and the "Awaiting my review"
inbox: who may assign, whose inbox shows what, the database's guards, and the inbox's query count."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from approvals.actions import APPROVERS_GROUP, check_assign_brief, check_decide_revision
from approvals.models import Approval, Assignment
from approvals.selectors import get_nav_counts, list_inbox
from publishing.actions.briefs import check_create_brief
from publishing.errors import InvalidInput, PermissionRefused
from publishing.models import Brief, Revision
from publishing.roles import Role
from publishing.selectors.desks import get_default_desk
from tests.web import TO_LOGIN, Outcome, assert_outcome, client_for, db_counts, refused
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

INBOX = "/inbox/"


def assign_url(brief: Brief) -> str:
    return reverse("approvals:assign", args=[brief.public_id])


def assign(brief: Brief, assignee: object, *, by: object) -> Assignment:
    """What the assign view does: one durable transaction around the action."""
    with transaction.atomic(durable=True):
        assignment, _changed = check_assign_brief(brief.public_id, assignee=assignee, acting_user=by)
    return assignment


def inbox_ids(user: object) -> list[str]:
    return [brief.public_id for brief in list_inbox(user)]


@pytest.mark.parametrize("role", ["editor", "approver", "operator", "no_group", "anonymous"])
def test_assign__permission_matrix(role, users, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    path = assign_url(brief)
    outcome = {
        "editor": Outcome(302, location=brief.get_absolute_url(), writes={"AuditEvent": 1}),
        "approver": Outcome(302, location=brief.get_absolute_url(), writes={"AuditEvent": 1}),
        "operator": refused("Only members of Editors or Approvers can assign a brief for review."),
        "no_group": refused("Only members of Editors or Approvers can assign a brief for review."),
        "anonymous": TO_LOGIN,
    }[role]
    before = db_counts()

    response = client_for(users[role]).post(path, {"assignee": str(users["approver"].pk)})

    assert_outcome(response, outcome, path=path, before=before)
    assert Assignment.objects.count() == (1 if role in ("editor", "approver") else 0)


def test_assign__to_an_approver__in_their_inbox_only(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")

    assignment = assign(brief, str(approver.pk), by=editor)

    assert assignment.assignee == approver and assignment.group is None
    assert inbox_ids(approver) == [brief.public_id]
    assert inbox_ids(approver2) == []
    event = AuditEvent.objects.get(event_type="brief.assigned")
    assert (event.actor, event.subject_id, event.new_state) == (editor, brief.public_id, {"assignee": "ava"})


def test_assign__to_the_approvers_group__in_every_approvers_inbox(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")

    assignment = assign(brief, APPROVERS_GROUP, by=editor)

    assert assignment.group == Group.objects.get(name=Role.APPROVER.value) and assignment.assignee is None
    assert inbox_ids(approver) == inbox_ids(approver2) == [brief.public_id]


def test_assign__again__ends_the_open_assignment_and_keeps_history(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    first = assign(brief, str(approver.pk), by=editor)

    assign(brief, str(approver2.pk), by=approver)

    first.refresh_from_db()
    assert first.ended_at is not None
    assert inbox_ids(approver) == [] and inbox_ids(approver2) == [brief.public_id]
    assert Assignment.objects.filter(brief=brief).count() == 2
    event = AuditEvent.objects.filter(event_type="brief.assigned").latest("id")
    assert (event.old_state, event.new_state) == ({"assignee": "ava"}, {"assignee": "abe"})


def test_assign__same_assignee_again__writes_nothing(editor, approver, brief):
    assign(brief, str(approver.pk), by=editor)
    before = db_counts(), Assignment.objects.count()

    with transaction.atomic(durable=True):
        _assignment, changed = check_assign_brief(brief.public_id, assignee=str(approver.pk), acting_user=editor)

    assert not changed
    assert (db_counts(), Assignment.objects.count()) == before


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "Choose an approver or the Approvers group to assign the brief to."),
        ("abc", "Choose an approver or the Approvers group to assign the brief to."),
        ("99999999999999999999", "The person chosen is not an active approver; choose another or the Approvers group."),
        ("-1", "The person chosen is not an active approver; choose another or the Approvers group."),
    ],
)
def test_assign__not_an_approver__refused_with_message(value, message, editor, brief):
    response = client_for(editor).post(assign_url(brief), {"assignee": value})

    assertContains(response, message, status_code=400)
    assert not Assignment.objects.exists()


def test_assign__an_editor_who_is_no_approver__refused(editor, brief):
    with pytest.raises(InvalidInput, match="not an active approver"), transaction.atomic():
        check_assign_brief(brief.public_id, assignee=str(editor.pk), acting_user=editor)


def test_assign__operator__refused_before_anything_is_read(operator, brief):
    with pytest.raises(PermissionRefused), transaction.atomic():
        check_assign_brief(brief.public_id, assignee=APPROVERS_GROUP, acting_user=operator)


def test_brief_page__shows_assignment_and_form_to_reviewers_only(users, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    assign(brief, str(users["approver"].pk), by=users["editor"])

    for role in ("editor", "approver"):
        response = client_for(users[role]).get(brief.get_absolute_url())
        assertContains(response, "Assigned to <strong>ava</strong>", html=False)
        assertContains(response, 'id="assign-form"')
    response = client_for(users["operator"]).get(brief.get_absolute_url())
    assertContains(response, "Assigned to <strong>ava</strong>", html=False)
    assertNotContains(response, 'id="assign-form"')


# --- the database's guards -----------------------------------------------------------------------------


def test_db__assignment_naming_both_user_and_group__refused(editor, approver, brief):
    group = Group.objects.get(name=Role.APPROVER.value)
    with pytest.raises(IntegrityError, match="assignment_names_user_or_group"), transaction.atomic():
        Assignment.objects.create(brief=brief, assignee=approver, group=group, assigned_by=editor)


def test_db__assignment_naming_neither__refused(editor, brief):
    with pytest.raises(IntegrityError, match="assignment_names_user_or_group"), transaction.atomic():
        Assignment.objects.create(brief=brief, assigned_by=editor)


def test_db__two_open_assignments_of_one_brief__refused(editor, approver, brief):
    Assignment.objects.create(brief=brief, assignee=approver, assigned_by=editor)
    with pytest.raises(IntegrityError, match="assignment_one_open_per_brief"), transaction.atomic():
        Assignment.objects.create(brief=brief, assignee=approver, assigned_by=editor)


# --- the inbox -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "status"), [("approver", 200), ("editor", 403), ("operator", 403), ("no_group", 403), ("anonymous", 302)]
)
def test_inbox__approvers_only(role, status, users):
    response = client_for(users[role]).get(INBOX)

    assert response.status_code == status
    if status == 403:
        assertContains(response, "Only members of Approvers can see the review inbox.", status_code=403)


def test_inbox__lists_briefs_in_review_with_current_revision_and_wait(editor, approver, approver2, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers returned at noon.")
    assign(brief, APPROVERS_GROUP, by=editor)
    decided = check_create_brief(title="Tram fares", source_material="", acting_user=editor)
    first = revise(decided, "Fares go up in May.", title="Tram fares")
    assign(decided, str(approver.pk), by=editor)
    unassigned = check_create_brief(title="Bridge closed", source_material="", acting_user=editor)
    revise(unassigned, "The bridge closes for a month.", title="Bridge closed")
    with transaction.atomic(durable=True):
        check_decide_revision(
            decided.public_id,
            revision_number=first.number,
            payload_hash=first.payload_hash,
            decision=Approval.Decision.CHANGES_REQUESTED,
            acting_user=approver2,
        )

    response = client_for(approver).get(INBOX)

    assert [b.public_id for b in response.context["page"]] == [brief.public_id]
    row = response.context["page"][0]
    assert row.current_number == 2
    assertContains(response, f'href="/briefs/{brief.public_id}/revisions/2/">Revision 2</a>', html=False)
    assertContains(response, "0\xa0minutes")
    assertNotContains(response, decided.public_id)
    assertNotContains(response, unassigned.public_id)


def test_inbox__longest_waiting_first(editor, approver, revise):
    briefs = [check_create_brief(title=f"Story {n}", source_material="", acting_user=editor) for n in range(3)]
    for brief in reversed(briefs):
        revise(brief, "Text.", title=brief.title)
        assign(brief, APPROVERS_GROUP, by=editor)

    assert inbox_ids(approver) == [b.public_id for b in reversed(briefs)]


def test_nav__approver_sees_inbox_count_editor_sees_no_inbox(editor, approver, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    assign(brief, str(approver.pk), by=editor)

    response = client_for(approver).get("/")

    assertContains(response, 'data-testid="nav-inbox">Inbox <span class="count">1</span></a>', html=False)
    assert get_nav_counts(approver, with_inbox=True).inbox == 1
    assertNotContains(client_for(editor).get("/"), 'data-testid="nav-inbox"')


def _thousand_briefs_in_review(editor, approver) -> None:
    """1,000 briefs in review assigned to the group (or to `approver`): rows written in bulk (the
    actions would take minutes), with the columns the actions would give them."""
    start = (Brief.objects.aggregate(top=Max("id"))["top"] or 0) + 1000
    now = timezone.now()
    desk = get_default_desk()
    briefs = Brief.objects.bulk_create(
        Brief(
            public_id=f"brief-{start + n}",
            title=f"Bulk story {n}",
            author=editor,
            status=Brief.Status.IN_REVIEW,
            desk=desk,
            created_at=now - timedelta(minutes=n),
        )
        for n in range(1000)
    )
    Revision.objects.bulk_create(
        Revision(
            brief=brief,
            number=1,
            payload={"title": brief.title, "body": "Text."},
            payload_hash=hashlib.sha256(brief.public_id.encode()).hexdigest(),
            author=editor,
            created_at=brief.created_at,
        )
        for brief in briefs
    )
    group = Group.objects.get(name=Role.APPROVER.value)
    Assignment.objects.bulk_create(
        Assignment(
            brief=brief,
            assignee=approver if n % 2 else None,
            group=None if n % 2 else group,
            assigned_by=editor,
        )
        for n, brief in enumerate(briefs)
    )


def test_query_count__inbox_with_1000_briefs__pinned_and_as_for_one(
    editor, approver, brief, revise, django_assert_num_queries
):
    revise(brief, "Dockers walked out at dawn.")
    assign(brief, str(approver.pk), by=editor)
    client = client_for(approver)
    with CaptureQueriesContext(transaction.get_connection()) as one:
        assert client.get(INBOX).status_code == 200
    _thousand_briefs_in_review(editor, approver)

    for path in (INBOX, f"{INBOX}?page=2", f"{INBOX}?page=21", f"{INBOX}?page=999"):
        with django_assert_num_queries(len(one)):
            response = client.get(path)
        assert response.status_code == 200
    assert response.context["page"].paginator.count == 1001
    # Session and user, the roles, the page's count and rows, and the nav's counts.
    assert len(one) <= 6
