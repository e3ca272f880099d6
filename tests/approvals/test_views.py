"""Approving and requesting changes through the revision page: permissions, binding to revision and hash."""

from __future__ import annotations

from html import escape

import pytest
from django.urls import reverse
from pytest_django.asserts import assertContains

from approvals.models import Approval
from publishing.models import Brief
from publishing.roles import Role
from tests.web import TO_LOGIN, Outcome, assert_outcome, client_for, db_counts, form_buttons, form_values, refused

pytestmark = pytest.mark.django_db

ROLES = ["editor", "approver", "operator", "no_group", "anonymous"]
NOT_APPROVER = refused("Only members of Approvers can approve or request changes.")
APPROVE = {"decision": "approved", "comment": ""}
REQUEST_CHANGES = {"decision": "changes_requested", "comment": "Cite the union's statement."}


def decide_url(brief: Brief, number: int) -> str:
    return reverse("approvals:decide", args=[brief.public_id, number])


@pytest.mark.parametrize(("action", "decision"), [("approve POST", APPROVE), ("request-changes POST", REQUEST_CHANGES)])
@pytest.mark.parametrize("role", ROLES)
def test_permission_matrix__each_role_each_action(role, action, decision, users, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    path = decide_url(brief, 1)
    outcome = {
        "editor": NOT_APPROVER,
        # Approving also writes the publish operation in the same transaction (docs/invariants.md#i5).
        "approver": Outcome(
            302,
            location=revision.get_absolute_url(),
            writes={"Approval": 1, "AuditEvent": 1, "Operation": 1 if decision is APPROVE else 0},
        ),
        "operator": NOT_APPROVER,
        "no_group": NOT_APPROVER,
        "anonymous": TO_LOGIN,
    }[role]
    before = db_counts()

    response = client_for(users[role]).post(
        path, {"revision_number": "1", "payload_hash": revision.payload_hash, **decision}
    )

    assert_outcome(response, outcome, path=path, before=before)
    brief.refresh_from_db()
    expected_status = decision["decision"] if role == "approver" else Brief.Status.IN_REVIEW
    assert brief.status == expected_status


def test_decide__get__not_allowed(client, approver, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)

    assert client.get(decide_url(brief, 1)).status_code == 405


# --- The decision form on the revision page ----------------------------------------------------


def test_revision_page__decision_form__bound_to_revision_number_and_hash(client, approver, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    revision = revise(brief, "Dockers returned at noon.")
    client.force_login(approver)

    response = client.get(revision.get_absolute_url())

    assert revision.payload_hash in response.content.decode()
    form = form_values(response, containing="payload_hash")
    assert (form["revision_number"], form["payload_hash"]) == ("2", revision.payload_hash)
    assert form_buttons(response, containing="payload_hash") == [
        ("decision", "approved"),
        ("decision", "changes_requested"),
    ]
    assert f'action="{decide_url(brief, 2)}"' in response.content.decode()


@pytest.mark.parametrize("role", ["editor", "operator"])
def test_revision_page__non_approver__no_decision_form(role, users, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")

    content = client_for(users[role]).get(revision.get_absolute_url()).content.decode()

    assert 'id="decision-form"' not in content
    assert 'name="payload_hash"' not in content


def test_revision_page__non_current_revision__no_decision_form(client, approver, brief, revise):
    old = revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers returned at noon.")
    client.force_login(approver)

    content = client.get(old.get_absolute_url()).content.decode()

    assert 'id="decision-form"' not in content
    assert "This revision is not current:" in content
    assert f'<a href="/briefs/{brief.public_id}/revisions/2/">revision 2</a> is.' in content


def test_revision_page__approver_authored_revision__no_approve_button(client, make_user, brief, revise):
    both = make_user("bea", Role.EDITOR, Role.APPROVER)
    revision = revise(brief, "Dockers walked out at dawn.", by=both)
    client.force_login(both)

    response = client.get(revision.get_absolute_url())

    assert form_buttons(response, containing="payload_hash") == [("decision", "changes_requested")]
    assert "You wrote this revision, so another approver must approve it." in response.content.decode()


def test_decide__approver_authored_revision__forged_approve_refused(client, make_user, brief, revise):
    both = make_user("bea", Role.EDITOR, Role.APPROVER)
    revision = revise(brief, "Dockers walked out at dawn.", by=both)
    client.force_login(both)
    before = db_counts()

    response = client.post(
        decide_url(brief, 1), {"revision_number": "1", "payload_hash": revision.payload_hash, **APPROVE}
    )

    assert response.status_code == 403
    assert "You wrote revision 1, so you cannot approve it; another approver must." in response.content.decode()
    assert db_counts() == before


def test_decide__approved__page_shows_approval(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    form = form_values(client.get(revision.get_absolute_url()), containing="payload_hash")

    response = client.post(decide_url(brief, 1), {**form, "decision": "approved", "comment": "Solid."})

    assert response["Location"] == revision.get_absolute_url()
    content = client.get(revision.get_absolute_url()).content.decode()
    assert "Approved: revision 1." in content
    assert "Approved by ava for exactly this text." in content
    assert "<p>Solid.</p>" in content
    assert 'id="decision-form"' not in content  # decisions are final: nothing left to decide
    assert "You decided “Approved” on this revision; decisions are final." in content
    approval = Approval.objects.get()
    assert (approval.revision, approval.payload_hash, approval.approver) == (
        revision,
        revision.payload_hash,
        approver,
    )


# --- Refusals keep the approver's comment and write nothing ------------------------------------


def test_decide__stale_revision__409_names_current_revision_and_keeps_comment(client, approver, brief, revise):
    old = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    form = form_values(client.get(old.get_absolute_url()), containing="payload_hash")
    current = revise(brief, "Dockers returned at noon.")
    comment = 'Good — "ship it" & <go>'
    before = db_counts()

    response = client.post(decide_url(brief, 1), {**form, "decision": "approved", "comment": comment})

    assert response.status_code == 409
    content = response.content.decode()
    assert (
        escape(
            f"Revision 1 is no longer current: revision 2 is. "
            f"Review revision 2 (hash {current.payload_hash[:12]}…) instead."
        )
        in content
    )
    assert escape(comment) in content
    assert form_values(response, containing="comment")["comment"] == comment
    assert 'id="decision-form"' not in content  # nothing to resubmit against a superseded revision
    assert f'<a href="/briefs/{brief.public_id}/revisions/2/">Review revision 2</a>' in content
    assert db_counts() == before
    assert not Approval.objects.exists()


def test_decide__forged_hash__409_and_keeps_comment(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    form = form_values(client.get(revision.get_absolute_url()), containing="payload_hash")
    forged = "0" * 64
    before = db_counts()

    response = client.post(
        decide_url(brief, 1),
        {**form, "payload_hash": forged, "decision": "approved", "comment": "Forged <but> kept"},
    )

    assert response.status_code == 409
    assert (
        escape(
            f"The hash you reviewed ({forged[:12]}…) is not revision 1's ({revision.payload_hash[:12]}…). "
            "Revision 1 is current; review it again."
        )
        in response.content.decode()
    )
    assert form_values(response, containing="comment")["comment"] == "Forged <but> kept"
    assert db_counts() == before


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"revision_number": "one"}, 400, "The revision number is missing or not a number; reload the page."),
        ({"payload_hash": ""}, 400, "The payload hash of the revision you reviewed is missing; reload the page."),
        ({"decision": "published"}, 400, "Unknown decision 'published'; choose approve or request changes."),
    ],
)
def test_decide__forged_fields__refused_with_message(client, approver, brief, revise, fields, status, message):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    before = db_counts()

    response = client.post(
        decide_url(brief, 1),
        {"revision_number": "1", "payload_hash": revision.payload_hash, **APPROVE, **fields},
    )

    assert response.status_code == status
    assert escape(message) in response.content.decode()
    assert db_counts() == before


def test_decide__unknown_revision__404_with_message(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    before = db_counts()

    response = client.post(
        decide_url(brief, 9), {"revision_number": "9", "payload_hash": revision.payload_hash, **APPROVE}
    )

    assertContains(response, f"{brief.public_id} has no revision 9.", status_code=404)
    assert db_counts() == before


# A decision form whose hidden fields are no revision number or hash, or another revision's, is the
# sender's to fix: 400 with the reason, the comment kept. 409 stays for a revision that moved on.
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"payload_hash": "xyz"},
            "The payload hash sent is not a payload hash (64 hexadecimal digits); reload the page.",
        ),
        (
            {"payload_hash": "A" * 64},
            "The payload hash sent is not a payload hash (64 hexadecimal digits); reload the page.",
        ),
        ({"payload_hash": "0" * 63 + "\x00"}, "Null characters are not allowed."),
        ({"revision_number": "-1"}, "The revision number is not a revision's (they start at 1); reload the page."),
        ({"revision_number": "0"}, "The revision number is not a revision's (they start at 1); reload the page."),
        (
            {"revision_number": "99999999999999999999"},
            "The revision number is not a revision's (it is too large); reload the page.",
        ),
        ({"revision_number": "2"}, "This form is for revision 2 but was sent to revision 1's page; reload the page."),
        ({"revision_number": ""}, "The revision number is missing or not a number; reload the page."),
        ({"comment": "Fine\x00"}, "Comment contains a NUL character, which cannot be stored."),
        ({"comment": "x" * 10_001}, "Comment is 10,001 characters long; the limit is 10,000."),
    ],
)
def test_decide__malformed_input__400_not_409_and_comment_kept(client, approver, brief, revise, fields, message):
    revision = revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers returned at noon.")  # revision 2 exists: a forged number could name it
    client.force_login(approver)
    before = db_counts()
    data = {"revision_number": "1", "payload_hash": revision.payload_hash, **APPROVE, "comment": "Keep <me>"}

    response = client.post(decide_url(brief, 1), {**data, **fields})

    assert response.status_code == 400, response.content.decode()[:500]
    assert escape(message) in response.content.decode()
    if "comment" not in fields:
        assert escape("Keep <me>") in response.content.decode()
    assert db_counts() == before


def test_decide__comment_not_utf8__400_with_message_and_nothing_saved(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    before = db_counts()
    body = f"revision_number=1&payload_hash={revision.payload_hash}&decision=approved&comment=Caf%E9".encode()

    response = client.post(decide_url(brief, 1), body, content_type="application/x-www-form-urlencoded")

    assert response.status_code == 400
    assert "Comment: the text sent is not valid UTF-8" in response.content.decode()
    assert db_counts() == before


def test_decide__same_decision_twice__one_approval(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    data = {"revision_number": "1", "payload_hash": revision.payload_hash, **APPROVE}
    client.post(decide_url(brief, 1), data)
    before = db_counts()

    response = client.post(decide_url(brief, 1), data)

    assert response["Location"] == revision.get_absolute_url()
    assert db_counts() == before
    assert (
        "You had already recorded “Approved” on revision 1." in client.get(revision.get_absolute_url()).content.decode()
    )


def test_decide__contrary_decision_after_approval__refused(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    client.post(decide_url(brief, 1), {"revision_number": "1", "payload_hash": revision.payload_hash, **APPROVE})
    before = db_counts()

    response = client.post(
        decide_url(brief, 1),
        {"revision_number": "1", "payload_hash": revision.payload_hash, **REQUEST_CHANGES},
    )

    assert response.status_code == 409
    content = response.content.decode()
    assert "decisions are final. Ask the editor for a new revision." in content
    assert form_values(response, containing="comment")["comment"] == REQUEST_CHANGES["comment"]
    assert 'id="decision-form"' not in content
    assert db_counts() == before


def test_revision_page__other_approver_decided__form_still_offered(client, approver, make_user, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client_for(approver).post(
        decide_url(brief, 1),
        {"revision_number": "1", "payload_hash": revision.payload_hash, **REQUEST_CHANGES},
    )
    client.force_login(make_user("abe", Role.APPROVER))

    response = client.get(revision.get_absolute_url())

    assert form_values(response, containing="payload_hash")["payload_hash"] == revision.payload_hash
    assert ("decision", "approved") in form_buttons(response, containing="payload_hash")
