"""Restoring an older revision: a new revision with its content, written the way an edit is
(optimistic concurrency, idempotent resubmission), needing approval like any other."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from approvals.models import Approval
from approvals.selectors import get_valid_approval
from publishing.actions.revisions import check_restore_revision
from publishing.errors import InvalidInput, NotFound, PermissionRefused, RevisionConflict
from publishing.hashing import payload_hash
from publishing.models import Brief, Revision
from publishing.roles import Role
from tests.publishing.handlers.test_publications import approve
from tests.web import client_for, db_counts, form_values
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def three(brief, revise) -> list[Revision]:
    return [
        revise(brief, "Dockers walked out at dawn.", title="Harbour strike"),
        revise(brief, "Dockers returned at noon.", title="Harbour strike ends"),
        revise(brief, "Dockers returned at noon; talks resume.", title="Harbour strike ends"),
    ]


def restore(brief: Brief, number: int, *, base: object, by) -> tuple[Revision, bool]:
    """What the restore view does: one durable transaction around the action."""
    with transaction.atomic(durable=True):
        return check_restore_revision(brief.public_id, number=number, base_number=base, acting_user=by)


# --- the action ------------------------------------------------------------------------------------


def test_restore__older_revision__next_number_with_its_content_and_hash(brief, three, make_user):
    restorer = make_user("edna", Role.EDITOR)

    restored, created = restore(brief, 1, base=3, by=restorer)

    assert created
    assert restored.number == 4
    assert restored.payload == three[0].payload == {"title": "Harbour strike", "body": "Dockers walked out at dawn."}
    assert restored.payload_hash == three[0].payload_hash == payload_hash(three[0].payload)
    assert restored.author == restorer
    event = AuditEvent.objects.get(event_type="revision.created", subject_id=f"{brief.public_id}/revision-4")
    assert event.actor == restorer
    assert event.new_state == {
        "status": "in_review",
        "latest_revision": 4,
        "payload_hash": three[0].payload_hash,
        "restores_revision": 1,
    }


def test_restore__approved_current_revision__new_revision_in_review_with_no_approval(brief, three, editor, approver):
    approve(three[2], by=approver)
    brief.refresh_from_db()
    assert brief.status == Brief.Status.APPROVED

    restored, _created = restore(brief, 2, base=3, by=editor)

    brief.refresh_from_db()
    assert brief.status == Brief.Status.IN_REVIEW
    assert get_valid_approval(restored) is None
    assert not Approval.objects.filter(revision=restored).exists()


def test_restore__a_newer_revision_written_meanwhile__conflict_and_nothing_written(brief, three, editor, revise):
    revise(brief, "Someone else's fourth revision.")
    before = db_counts()

    with pytest.raises(RevisionConflict) as raised:
        restore(brief, 1, base=3, by=editor)

    assert (raised.value.newer.number, raised.value.base_number) == (4, 3)
    assert db_counts() == before


def test_restore__sent_twice__one_new_revision(brief, three, editor):
    first, created = restore(brief, 1, base=3, by=editor)
    again, created_again = restore(brief, 1, base=3, by=editor)

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert brief.revisions.count() == 4


def test_restore__content_equal_to_the_current_revision__nothing_written(brief, editor, revise):
    revise(brief, "Same text.")
    revise(brief, "Other text.")
    revise(brief, "Same text.")
    before = db_counts()

    current, created = restore(brief, 1, base=3, by=editor)

    assert (current.number, created) == (3, False)
    assert db_counts() == before


@pytest.mark.parametrize("role", ["approver", "operator", "no_group"])
def test_restore__not_an_editor__refused_and_nothing_written(brief, three, users, role):
    before = db_counts()

    with pytest.raises(PermissionRefused, match=r"Only members of Editors can restore revisions\."):
        restore(brief, 1, base=3, by=users[role])

    assert db_counts() == before


@pytest.mark.parametrize("base", [None, "", "abc", "0", "-2"])
def test_restore__base_missing_or_not_a_number__refused_with_message(brief, three, editor, base):
    with pytest.raises(InvalidInput, match="The current revision you saw is missing or not a valid number"):
        restore(brief, 1, base=base, by=editor)


def test_restore__unknown_revision__not_found(brief, three, editor):
    with pytest.raises(NotFound, match=f"{brief.public_id} has no revision 9."):
        restore(brief, 9, base=3, by=editor)


# --- the revision page and the restore view ---------------------------------------------------------------


def _restore_path(brief: Brief, number: int) -> str:
    return f"/briefs/{brief.public_id}/revisions/{number}/restore/"


def test_revision_page__older_revision__editor_gets_the_restore_form_based_on_the_current(brief, three, editor):
    response = client_for(editor).get(f"/briefs/{brief.public_id}/revisions/1/")

    assertContains(response, "Restore this revision")
    assertContains(response, f'action="{_restore_path(brief, 1)}"')
    assert form_values(response, containing="base_number")["base_number"] == "3"


def test_revision_page__current_revision__no_restore_form(brief, three, editor):
    response = client_for(editor).get(f"/briefs/{brief.public_id}/revisions/3/")

    assertNotContains(response, "Restore this revision")


@pytest.mark.parametrize("role", ["approver", "operator"])
def test_revision_page__not_an_editor__no_restore_form(brief, three, users, role):
    response = client_for(users[role]).get(f"/briefs/{brief.public_id}/revisions/1/")

    assert response.status_code == 200
    assertNotContains(response, "Restore this revision")


def test_restore_view__post__new_revision_page_notes_what_it_restores_and_asks_approval(brief, three, editor, approver):
    response = client_for(editor).post(_restore_path(brief, 1), {"base_number": "3"}, follow=True)

    assertContains(response, "Revision 1 restored as revision 4; it needs approval like any other.")
    assert response.redirect_chain == [(f"/briefs/{brief.public_id}/revisions/4/", 302)]
    assertContains(response, f'Restores <a href="/briefs/{brief.public_id}/revisions/1/">revision 1</a>.')
    assertContains(response, "Changes against revision 3")
    assertContains(client_for(approver).get(f"/briefs/{brief.public_id}/revisions/4/"), "Approve revision 4")


def test_restore_view__double_submit__second_writes_nothing_and_says_so(brief, three, editor):
    client = client_for(editor)
    client.post(_restore_path(brief, 1), {"base_number": "3"})
    before = db_counts()

    response = client.post(_restore_path(brief, 1), {"base_number": "3"}, follow=True)

    assertContains(response, "Nothing new was saved: revision 4 already holds this text.")
    assert db_counts() == before


def test_restore_view__newer_revision_meanwhile__409_names_it_and_offers_restore_over_it(brief, three, editor, revise):
    revise(brief, "A fourth revision, saved meanwhile.")
    before = db_counts()

    response = client_for(editor).post(_restore_path(brief, 1), {"base_number": "3"})

    assertContains(
        response,
        "Revision 4 was saved after revision 3, the latest you saw. Nothing was restored: see what revision 4 "
        "changed, then restore again if you still want to.",
        status_code=409,
    )
    assert form_values(response, containing="base_number")["base_number"] == "4"
    assert db_counts() == before


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        ({}, 400, "The current revision you saw is missing or not a valid number; reload the page."),
        (
            {"base_number": "abc"},
            400,
            "The current revision you saw is missing or not a valid number; reload the page.",
        ),
        ({"base_number": "99"}, 409, "Revision 99 does not exist; the latest revision is 3."),
    ],
)
def test_restore_view__bad_base__refused_with_message_and_nothing_written(brief, three, editor, data, status, message):
    before = db_counts()

    response = client_for(editor).post(_restore_path(brief, 1), data)

    assertContains(response, message, status_code=status)
    assert db_counts() == before


@pytest.mark.parametrize(
    ("role", "status", "message"),
    [
        ("approver", 403, "Only members of Editors can restore revisions."),
        ("operator", 403, "Only members of Editors can restore revisions."),
        ("no_group", 403, "Only members of Editors can restore revisions."),
    ],
)
def test_restore_view__not_an_editor__403_and_nothing_written(brief, three, users, role, status, message):
    before = db_counts()

    response = client_for(users[role]).post(_restore_path(brief, 1), {"base_number": "3"})

    assertContains(response, message, status_code=status)
    assert db_counts() == before


def test_restore_view__anonymous__to_login_and_nothing_written(brief, three, users):
    before = db_counts()

    response = Client().post(_restore_path(brief, 1), {"base_number": "3"})

    assert (response.status_code, response["Location"]) == (302, f"/login/?next={_restore_path(brief, 1)}")
    assert db_counts() == before


def test_restore_view__get__405(brief, three, editor):
    assert client_for(editor).get(_restore_path(brief, 1)).status_code == 405


def test_restore_view__without_csrf_token__403_and_nothing_written(brief, three, editor):
    client = Client(enforce_csrf_checks=True)
    client.force_login(editor)
    before = db_counts()

    response = client.post(_restore_path(brief, 1), {"base_number": "3"})

    assert response.status_code == 403
    assert db_counts() == before


def test_restore_view__unknown_revision__404_with_message(brief, three, editor):
    response = client_for(editor).post(_restore_path(brief, 9), {"base_number": "3"})

    assertContains(response, f"{brief.public_id} has no revision 9.", status_code=404)
