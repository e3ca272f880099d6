"""Approval policies where people read them: the revision page's policy card and its decision form, the
inbox and the nav's count, the notifications of "your approval is needed", and the JSON API's
revision and decision (docs/policies.md, docs/editorial.md#inbox, docs/api.md)."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.urls import reverse
from pytest_django.asserts import assertContains, assertNotContains

from approvals.actions import APPROVERS_GROUP, check_assign_brief
from approvals.models import Notification
from approvals.policies import get_policy
from approvals.selectors import get_nav_counts, get_superseding_revision_number, list_inbox
from approvals.sql import current_policy
from publishing.models import Brief, Desk
from publishing.roles import LEGAL_GROUP, Role
from tests.approvals.test_approvals import decide
from tests.publishing.api.support import ApiClient, token_for
from tests.web import client_for, form_buttons

pytestmark = pytest.mark.django_db

APPROVE_BUTTON = ("decision", "approved")


@pytest.fixture
def amy(make_user):
    return make_user("amy", Role.APPROVER)


def on_desk(brief: Brief, *, approvals: int = 1, groups: tuple[str, ...] = (), legal_review: bool = False) -> Desk:
    desk = Desk.objects.create(slug="politics", name="Politics", approvals_required=approvals)
    desk.required_groups.add(*Group.objects.filter(name__in=groups))
    Brief.objects.filter(pk=brief.pk).update(desk=desk, legal_review=legal_review)
    return desk


def assign_to_approvers(brief: Brief, *, by) -> None:
    with transaction.atomic(durable=True):
        check_assign_brief(brief.public_id, assignee=APPROVERS_GROUP, acting_user=by)


def text_of(response, name: str) -> str:
    """The text of the element with data-testid `name`, tags stripped and spaces collapsed."""
    match = re.search(rf'data-testid="{name}"[^>]*>(.*?)</(p|div|td)>', response.content.decode(), re.S)
    assert match, f"no data-testid={name!r}"
    return " ".join(re.sub(r"<[^>]+>", "", match.group(1)).split())


def inbox_ids(user) -> list[str]:
    return [brief.public_id for brief in list_inbox(user)]


# --- the revision page's policy card and decision form ----------------------------------------------


def test_revision_page__two_of_three_desk__policy_approvers_and_still_needed(
    editor, approver, approver2, amy, brief, revise
):
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, by=approver)

    page = client_for(approver2).get(revision.get_absolute_url())

    assert text_of(page, "policy-described") == "Politics desk: 2 approvals from distinct approvers."
    assert text_of(page, "policy-approvals").startswith("Approved by ava ")
    assert text_of(page, "policy-needed") == "Still needed: 1 more approval."
    assert APPROVE_BUTTON in form_buttons(page, containing="payload_hash")

    decide(revision, by=approver2)
    page = client_for(amy).get(revision.get_absolute_url())

    approvals = text_of(page, "policy-approvals")
    assert approvals.startswith("Approved by ava ") and ", abe " in approvals
    assert text_of(page, "policy-complete") == (
        "Completed by abe’s approval under: 2 approvals from distinct approvers (Politics desk)."  # noqa: RUF001
    )
    assertNotContains(page, 'data-testid="policy-needed"')
    assertNotContains(page, 'id="decision-form"')
    assertContains(page, "Its approval policy is complete: there is nothing left to approve on this revision.")


def test_revision_page__author__no_approve_button_and_says_why(make_user, brief, revise):
    both = make_user("bea", Role.EDITOR, Role.APPROVER)
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.", by=both)

    page = client_for(both).get(revision.get_absolute_url())

    assert form_buttons(page, containing="payload_hash") == [("decision", "changes_requested")]
    assertContains(page, "You wrote this revision, so another approver must approve it.")


def test_revision_page__decided_already__no_form_and_says_decisions_are_final(editor, approver, brief, revise):
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, by=approver)

    page = client_for(approver).get(revision.get_absolute_url())

    assertNotContains(page, 'id="decision-form"')
    assertContains(page, "You decided “Approved” on this revision; decisions are final.")
    assert text_of(page, "policy-needed") == "Still needed: 1 more approval."


def test_revision_page__only_legal_missing__others_not_offered_approve(
    editor, approver, approver2, legal, brief, revise
):
    on_desk(brief, approvals=1, groups=(LEGAL_GROUP,))
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, by=approver)

    theirs = client_for(approver2).get(revision.get_absolute_url())
    legal_page = client_for(legal).get(revision.get_absolute_url())

    assert text_of(theirs, "policy-needed") == "Still needed: an approval from Legal."
    assert APPROVE_BUTTON not in form_buttons(theirs, containing="payload_hash")
    assertContains(theirs, "Only an approval from Legal counts now: the policy has every other approval it needs.")
    assert APPROVE_BUTTON in form_buttons(legal_page, containing="payload_hash")


def test_revision_page__flagged_for_legal_review__said_in_the_card(editor, approver, brief, revise):
    on_desk(brief, approvals=1, legal_review=True)
    revision = revise(brief, "Dockers walked out at dawn.")

    page = client_for(approver).get(revision.get_absolute_url())

    assert text_of(page, "policy-described") == (
        "Politics desk: 1 approval from distinct approvers, including one from Legal — flagged for legal review."
    )
    assert text_of(page, "policy-needed") == "Still needed: 1 more approval and an approval from Legal."


def test_revision_live__a_second_approval_redraws_the_policy_card(editor, approver, approver2, brief, revise):
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.")
    live = reverse("publishing:revision_live", args=[brief.public_id, revision.number])
    decide(revision, by=approver)
    decide(revision, by=approver2)

    response = client_for(editor).get(live, HTTP_HX_REQUEST="true")

    assertContains(response, 'id="policy" data-testid="policy" hx-swap-oob="true"')
    assert text_of(response, "policy-complete").startswith("Completed by abe’s approval under:")  # noqa: RUF001


# --- the inbox and the nav's count ------------------------------------------------------------------


def test_inbox__second_approver_sees_it_after_the_first_approval__the_first_does_not(
    editor, approver, approver2, brief, revise
):
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.")
    assign_to_approvers(brief, by=editor)
    assert inbox_ids(approver) == inbox_ids(approver2) == [brief.public_id]

    decide(revision, by=approver)

    assert inbox_ids(approver) == []
    assert inbox_ids(approver2) == [brief.public_id]
    assert get_nav_counts(approver, with_inbox=True).inbox == 0
    assert get_nav_counts(approver2, with_inbox=True).inbox == 1
    page = client_for(approver2).get("/inbox/")
    assert text_of(page, "inbox-policy") == "1 of 2 approvals"
    assertContains(page, 'data-testid="nav-inbox">Inbox <span class="count">1</span></a>', html=False)

    decide(revision, by=approver2)  # completes the policy

    assert inbox_ids(approver2) == [] and get_nav_counts(approver2, with_inbox=True).inbox == 0


def test_inbox__legal_member_sees_a_flagged_brief_without_an_assignment(editor, approver, legal, brief, revise):
    on_desk(brief, approvals=1, legal_review=True)
    revision = revise(brief, "Dockers walked out at dawn.")

    assert inbox_ids(legal) == [brief.public_id]
    assert inbox_ids(approver) == []  # not assigned, and not in Legal
    assert get_nav_counts(legal, with_inbox=True).inbox == 1
    assert text_of(client_for(legal).get("/inbox/"), "inbox-policy") == "needs Legal"

    decide(revision, by=approver)  # the approval, not Legal's: Legal is still needed

    assert inbox_ids(legal) == [brief.public_id]
    decide(revision, by=legal)
    assert inbox_ids(legal) == [] and get_nav_counts(legal, with_inbox=True).inbox == 0


def test_inbox__approvals_given_and_only_another_group_missing__not_mine(
    editor, approver, approver2, legal, brief, revise
):
    on_desk(brief, approvals=1, groups=(LEGAL_GROUP,))
    revision = revise(brief, "Dockers walked out at dawn.")
    assign_to_approvers(brief, by=editor)
    decide(revision, by=approver)

    assert inbox_ids(approver2) == []  # assigned, but only Legal's approval counts now
    assert inbox_ids(legal) == [brief.public_id]


def test_inbox__the_current_revisions_author__never_sees_it(make_user, editor, brief, revise):
    both = make_user("bea", Role.EDITOR, Role.APPROVER)
    revise(brief, "Dockers walked out at dawn.", by=both)
    assign_to_approvers(brief, by=editor)

    assert inbox_ids(both) == []


@pytest.mark.parametrize(
    ("groups", "legal_review"),
    [((), False), ((), True), ((LEGAL_GROUP,), True), ((Role.OPERATOR.value, LEGAL_GROUP), False)],
)
def test_current_policy__sql_fragment_equals_get_policy(groups, legal_review, editor, brief):
    on_desk(brief, approvals=3, groups=groups, legal_review=legal_review)
    approvals_required, required_groups = current_policy(desk_id="b.desk_id", legal_review="b.legal_review")

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {approvals_required}, {required_groups} FROM publishing_brief b WHERE b.id = %s",
            [brief.pk],
        )
        row = cursor.fetchone()

    policy = get_policy(Brief.objects.select_related("desk").get(pk=brief.pk))
    assert row == (policy.approvals_required, list(policy.required_groups))


# --- "your approval is needed" -------------------------------------------------------------------------


def test_review_needed__shown_on_the_notifications_page(editor, approver, approver2, brief, revise):
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, by=approver)

    page = client_for(approver2).get("/notifications/")

    assertContains(page, "Your approval is needed")
    assertContains(page, "it still needs 1 more approval (Politics desk: 2 approvals from distinct approvers).")


def test_review_needed__of_a_superseded_revision__its_email_is_superseded(editor, approver, approver2, brief, revise):
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, by=approver)
    note = Notification.objects.get(recipient=approver2, event=Notification.Event.REVIEW_NEEDED)
    assert get_superseding_revision_number(note) is None

    revise(brief, "Dockers returned at noon.")

    assert get_superseding_revision_number(note) == 2


# --- the JSON API ------------------------------------------------------------------------------------------


def test_api__revision_and_decisions__policy_approvals_and_completion(editor, approver, approver2, brief, revise):
    on_desk(brief, approvals=2)
    revision = revise(brief, "Dockers walked out at dawn.")
    path = f"/briefs/{brief.public_id}/revisions/1"
    body = {"decision": "approved", "payload_hash": revision.payload_hash, "comment": ""}

    first = json.loads(ApiClient(token_for(approver)).post(f"{path}/decisions", body).content)
    got = json.loads(ApiClient(token_for(editor)).get(path).content)

    policy = {
        "desk": "politics",
        "approvals_required": 2,
        "required_groups": [],
        "legal_review": False,
        "described": "2 approvals from distinct approvers",
    }
    for answer in (first, got):
        assert answer["policy"] == policy
        assert [a["approver"] for a in answer["approvals"]] == ["ava"]
        assert (answer["still_needed"], answer["complete"], answer["completed_by"]) == ("1 more approval", False, None)
    assert first["channels"] == []

    second = json.loads(ApiClient(token_for(approver2)).post(f"{path}/decisions", body).content)

    assert [a["approver"] for a in second["approvals"]] == ["ava", "abe"]
    assert (second["still_needed"], second["complete"], second["completed_by"]) == ("", True, "abe")
    assert second["channels"] == ["web"]
