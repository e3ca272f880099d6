"""A brief's legal-review flag: editors and approvers raise it, only active members of Legal lift it;
each change is audited, the same flag again writes nothing, and the brief page shows the badge and
only the buttons its viewer may use."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from pytest_django.asserts import assertContains, assertNotContains

from approvals.policies import get_policy
from publishing.actions.legal import check_flag_legal_review, check_lift_legal_review
from publishing.errors import NotFound, PermissionRefused
from publishing.models import Brief
from publishing.roles import LEGAL_GROUP, Role
from tests.web import client_for
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

LIFT_REFUSED = "Only members of Legal can lift a legal-review flag."


def legal_audit(brief: Brief) -> list[tuple[str, dict, dict, int]]:
    events = AuditEvent.objects.filter(subject_id=brief.public_id, event_type__startswith="brief.legal_review")
    return [(e.event_type, e.old_state, e.new_state, e.actor_id) for e in events.order_by("id")]


def flag(brief: Brief, user) -> bool:
    with transaction.atomic():
        return check_flag_legal_review(brief.public_id, acting_user=user)


def lift(brief: Brief, user) -> bool:
    with transaction.atomic():
        return check_lift_legal_review(brief.public_id, acting_user=user)


@pytest.mark.parametrize("role", ["editor", "approver"])
def test_flag__editor_or_approver__flagged_once_audited_legal_required(brief, users, role):
    user = users[role]

    assert flag(brief, user) is True
    assert flag(brief, user) is False

    brief.refresh_from_db()
    assert brief.legal_review is True
    assert legal_audit(brief) == [
        ("brief.legal_review_flagged", {"legal_review": False}, {"legal_review": True}, user.pk)
    ]
    assert LEGAL_GROUP in get_policy(brief).required_groups


@pytest.mark.parametrize("role", ["operator", "no_group"])
def test_flag__neither_editor_nor_approver__refused_nothing_written(brief, users, role):
    with pytest.raises(PermissionRefused, match="Only members of Editors or Approvers can flag a brief"):
        flag(brief, users[role])

    brief.refresh_from_db()
    assert brief.legal_review is False and legal_audit(brief) == []


@pytest.mark.parametrize("role", ["editor", "approver", "operator", "no_group"])
def test_lift__not_in_legal__refused_nothing_written(brief, users, role):
    flag(brief, users["editor"])

    with pytest.raises(PermissionRefused, match=re.escape(LIFT_REFUSED)):
        lift(brief, users[role])

    brief.refresh_from_db()
    assert brief.legal_review is True and len(legal_audit(brief)) == 1


def test_lift__inactive_legal_member__refused(brief, legal, editor):
    flag(brief, editor)
    legal.is_active = False
    legal.save(update_fields=["is_active"])

    with pytest.raises(PermissionRefused, match=re.escape(LIFT_REFUSED)):
        lift(brief, legal)


def test_lift__legal_member__lifted_once_audited(brief, legal, editor):
    flag(brief, editor)

    assert lift(brief, legal) is True
    assert lift(brief, legal) is False

    brief.refresh_from_db()
    assert brief.legal_review is False
    assert legal_audit(brief)[-1] == (
        "brief.legal_review_lifted",
        {"legal_review": True},
        {"legal_review": False},
        legal.pk,
    )
    assert len(legal_audit(brief)) == 2
    assert LEGAL_GROUP not in get_policy(brief).required_groups


def test_flag__unknown_brief__not_found(editor):
    with pytest.raises(NotFound):
        check_flag_legal_review("brief-999", acting_user=editor)


def test_legal_member_without_a_role__cannot_see_the_brief(brief, editor, make_user):
    outsider = make_user("lou")
    outsider.groups.add(Group.objects.get(name=LEGAL_GROUP))
    flag(brief, editor)

    with pytest.raises(PermissionRefused, match="to see briefs"):
        lift(brief, outsider)


# --- The brief page -----------------------------------------------------------------------------------


def test_brief_page__editor_flags__badge_shown__lift_offered_to_legal_only(brief, editor, approver, legal):
    url = brief.get_absolute_url()
    editor_client = client_for(editor)

    before = editor_client.get(url)
    response = editor_client.post(f"{url}legal-review/", follow=True)

    assertContains(before, "Needs legal review")
    assertNotContains(before, "Legal review required")
    assertContains(response, "Flagged as needing legal review")
    assertContains(response, "Legal review required")
    assertNotContains(response, "Needs legal review</button>")
    assertNotContains(response, "Lift legal review")
    assertNotContains(client_for(approver).get(url), "Lift legal review")
    assertContains(client_for(legal).get(url), "Lift legal review")


def test_brief_page__approver_lifts__refused_with_message_nothing_written(brief, editor, approver):
    flag(brief, editor)
    url = brief.get_absolute_url()

    response = client_for(approver).post(f"{url}legal-review/lift/", follow=True)

    assertContains(response, LIFT_REFUSED)
    assertContains(response, "Legal review required")
    brief.refresh_from_db()
    assert brief.legal_review is True and len(legal_audit(brief)) == 1


def test_brief_page__legal_lifts__badge_gone(brief, editor, legal):
    flag(brief, editor)
    url = brief.get_absolute_url()

    response = client_for(legal).post(f"{url}legal-review/lift/", follow=True)

    assertContains(response, "Legal review lifted")
    assertNotContains(response, "Legal review required")
    brief.refresh_from_db()
    assert brief.legal_review is False


def test_brief_page__flag_needs_post_and_csrf(brief, editor):
    url = f"{brief.get_absolute_url()}legal-review/"
    checked = client_for(editor)
    checked.handler.enforce_csrf_checks = True

    assert client_for(editor).get(url).status_code == 405
    assert checked.post(url).status_code == 403
    brief.refresh_from_db()
    assert brief.legal_review is False


def test_brief_page__operator_sees_no_flag_button(brief, make_user):
    watcher = make_user("olga", Role.OPERATOR)

    assertNotContains(client_for(watcher).get(brief.get_absolute_url()), "Needs legal review")
