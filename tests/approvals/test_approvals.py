"""docs/invariants.md#i3, revision-bound approval, and docs/invariants.md#i13, audit.

An approval is a decision on exactly one revision and the payload hash the approver reviewed;
the database refuses any other hash, any change to a decision, and self-approval. Setup goes
through the real actions; decisions are made the way the approval view makes them, inside
`transaction.atomic(durable=True)`.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, connection, transaction

from approvals.actions import check_decide_revision
from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from approvals.models import Approval
from approvals.selectors import get_valid_approval, list_decisions
from publishing.actions.revisions import check_create_revision
from publishing.errors import InvalidInput, NotFound, PermissionRefused
from publishing.models import Brief, Revision
from publishing.roles import Role
from tests.concurrency import run_together
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

APPROVED = Approval.Decision.APPROVED
CHANGES_REQUESTED = Approval.Decision.CHANGES_REQUESTED

INSERT_APPROVAL = (
    "INSERT INTO approvals_approval (revision_id, payload_hash, decision, approver_id, comment, created_at) "
    "VALUES (%s, %s, %s, %s, '', now()) RETURNING id"
)


def decide(
    revision: Revision,
    *,
    by: Any,
    decision: Any = APPROVED,
    payload_hash: Any = None,
    number: Any = None,
    comment: Any = "",
    channels: Any = None,
) -> tuple[Approval, bool]:
    """What the approval view does: one durable transaction around the action; `channels` as the approver
    ticks them (None: the brief's)."""
    with transaction.atomic(durable=True):
        return check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number if number is None else number,
            payload_hash=revision.payload_hash if payload_hash is None else payload_hash,
            decision=decision,
            comment=comment,
            channels=channels,
            acting_user=by,
        )


def raw_insert_approval(revision: Revision, *, payload_hash: str, decision: str, approver: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute(INSERT_APPROVAL, [revision.pk, payload_hash, decision, approver.pk])
        (approval_id,) = cursor.fetchone()
    return approval_id


def counts() -> tuple[int, int]:
    return Approval.objects.count(), AuditEvent.objects.count()


def status_of(brief: Brief) -> str:
    return Brief.objects.values_list("status", flat=True).get(pk=brief.pk)


@pytest.fixture
def editor_approver(make_user):
    """Someone with both roles: the only kind of user who could try to approve their own text."""
    return make_user("edna", Role.EDITOR, Role.APPROVER)


# --- the database binds an approval to its revision's hash ---------------------------------------


@pytest.mark.parametrize("decision", [APPROVED, CHANGES_REQUESTED])
@pytest.mark.parametrize("hash_kind", ["other-revision", "made-up"])
def test_approval_bound_to_hash__raw_sql_insert_other_hash__refused(brief, revise, approver, decision, hash_kind):
    first = revise(brief, "Dockers walked out at dawn.")
    current = revise(brief, "Dockers walked out at dawn; ferries stopped.")
    wrong_hash = first.payload_hash if hash_kind == "other-revision" else "f" * 64
    before = counts()

    with pytest.raises(IntegrityError, match="approval_hash_is_revision_hash"), transaction.atomic():
        raw_insert_approval(current, payload_hash=wrong_hash, decision=decision, approver=approver)

    assert counts() == before
    assert get_valid_approval(current) is None

    # The same statement with the revision's own hash goes in: the refusal above was the hash.
    approval_id = raw_insert_approval(current, payload_hash=current.payload_hash, decision=decision, approver=approver)
    assert Approval.objects.get(pk=approval_id).payload_hash == current.payload_hash


def test_approval_bound_to_hash__orm_create_other_hash__refused(brief, revise, approver):
    current = revise(brief, "Dockers walked out at dawn.")

    with pytest.raises(IntegrityError, match="approval_hash_is_revision_hash"), transaction.atomic():
        Approval.objects.create(revision=current, payload_hash="0" * 64, decision=APPROVED, approver=approver)

    assert not Approval.objects.exists()


# --- approvals are append-only --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("UPDATE approvals_approval SET decision = 'changes_requested' WHERE id = %s", []),
        ("UPDATE approvals_approval SET comment = %s WHERE id = %s", ["edited afterwards"]),
        ("UPDATE approvals_approval SET approver_id = %s WHERE id = %s", ["APPROVER2"]),
    ],
    ids=["decision", "comment", "approver"],
)
def test_approval_append_only__raw_sql_update__refused(brief, revise, approver, approver2, sql, params):
    revision = revise(brief, "Dockers walked out at dawn.")
    approval, _ = decide(revision, by=approver, comment="Looks right.")
    params = [approver2.pk if p == "APPROVER2" else p for p in params]

    with (
        pytest.raises(IntegrityError, match="approvals_approval rows are immutable: UPDATE refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [*params, approval.pk])

    stored = Approval.objects.get(pk=approval.pk)
    assert (stored.decision, stored.comment, stored.approver_id, stored.payload_hash) == (
        APPROVED,
        "Looks right.",
        approver.pk,
        revision.payload_hash,
    )


def test_approval_append_only__raw_sql_delete__refused(brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")
    approval, _ = decide(revision, by=approver)

    with (
        pytest.raises(IntegrityError, match="approvals_approval rows are immutable: DELETE refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM approvals_approval WHERE id = %s", [approval.pk])

    assert list(Approval.objects.values_list("pk", flat=True)) == [approval.pk]
    assert get_valid_approval(revision) == approval


def test_approval_append_only__orm_save_update_delete__refused(brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")
    approval, _ = decide(revision, by=approver)

    approval.decision = CHANGES_REQUESTED
    with pytest.raises(IntegrityError, match="UPDATE refused"), transaction.atomic():
        approval.save()
    with pytest.raises(IntegrityError, match="UPDATE refused"), transaction.atomic():
        Approval.objects.filter(pk=approval.pk).update(comment="x")
    with pytest.raises(IntegrityError, match="DELETE refused"), connection.cursor() as cursor, transaction.atomic():
        # SQL, as the ORM would first refuse it for the completion that protects the approval.
        cursor.execute("DELETE FROM approvals_approval WHERE id = %s", [approval.pk])

    assert list(Approval.objects.values_list("pk", "decision")) == [(approval.pk, APPROVED)]


# --- no self-approval -----------------------------------------------------------------------------


def test_self_approval__action__refused_and_nothing_written(brief, editor_approver, revise):
    revision = revise(brief, "Written and reviewed by Edna.", by=editor_approver)
    before = counts()

    with pytest.raises(SelfApproval) as refused:
        decide(revision, by=editor_approver)

    assert refused.value.message == "You wrote revision 1, so you cannot approve it; another approver must."
    assert counts() == before
    assert get_valid_approval(revision) is None
    assert status_of(brief) == Brief.Status.IN_REVIEW


def test_self_approval__raw_sql_insert__refused_by_database(brief, editor_approver, approver, revise):
    revision = revise(brief, "Written by Edna.", by=editor_approver)

    with pytest.raises(IntegrityError, match="self-approval refused"), transaction.atomic():
        raw_insert_approval(revision, payload_hash=revision.payload_hash, decision=APPROVED, approver=editor_approver)

    assert not Approval.objects.exists()
    # The same insert by someone else is accepted: the refusal above was the author.
    raw_insert_approval(revision, payload_hash=revision.payload_hash, decision=APPROVED, approver=approver)
    assert list(Approval.objects.values_list("approver", flat=True)) == [approver.pk]


def test_self_approval__request_changes_on_own_revision__allowed(brief, editor_approver, revise):
    revision = revise(brief, "Written by Edna, who has second thoughts.", by=editor_approver)

    approval, created = decide(revision, by=editor_approver, decision=CHANGES_REQUESTED, comment="Needs a source.")

    assert created is True
    assert (approval.decision, approval.approver, approval.payload_hash) == (
        CHANGES_REQUESTED,
        editor_approver,
        revision.payload_hash,
    )
    assert Approval.objects.count() == 1
    assert get_valid_approval(revision) is None
    assert status_of(brief) == Brief.Status.CHANGES_REQUESTED


def test_self_approval__earlier_revision_author_may_approve_later_revision(brief, editor, editor_approver, revise):
    revise(brief, "Edna's draft.", by=editor_approver)
    later = revise(brief, "Eddie's rewrite.", by=editor)

    approval, created = decide(later, by=editor_approver)

    assert created is True
    assert get_valid_approval(later) == approval


# --- an approval is for exactly one revision ------------------------------------------------------


def test_approval_revision_bound__approval_of_rev2__does_not_count_for_rev3(brief, revise, approver, approver2):
    revise(brief, "First.")
    second = revise(brief, "Second.")
    approval, _ = decide(second, by=approver)
    assert get_valid_approval(second) == approval
    assert status_of(brief) == Brief.Status.APPROVED

    third = revise(brief, "Third.")

    assert get_valid_approval(third) is None
    assert get_valid_approval(second) == approval  # still a record of what was approved
    assert status_of(brief) == Brief.Status.IN_REVIEW
    before = counts()

    for late_approver in (approver2, approver):
        with pytest.raises(StaleApproval) as refused:
            decide(second, by=late_approver)
        assert refused.value.current_number == 3
        assert refused.value.current_hash == third.payload_hash
        assert "revision 3" in refused.value.message
        assert refused.value.message == (
            f"Revision 2 is no longer current: revision 3 is. "
            f"Review revision 3 (hash {third.payload_hash[:12]}…) instead."
        )
    assert counts() == before
    assert get_valid_approval(third) is None
    assert status_of(brief) == Brief.Status.IN_REVIEW


def test_approval_revision_bound__same_payload_as_approved_revision__still_needs_its_own(brief, revise, approver):
    first = revise(brief, "Version A.")
    decide(first, by=approver)
    revise(brief, "Version B.")
    reverted = revise(brief, "Version A.")
    assert reverted.payload_hash == first.payload_hash

    assert get_valid_approval(reverted) is None

    # Approving revision 1 with the very hash revision 3 has is still an approval of revision 1.
    with pytest.raises(StaleApproval, match="revision 3 is") as refused:
        decide(first, by=approver, payload_hash=reverted.payload_hash)
    assert refused.value.current_number == 3
    assert get_valid_approval(reverted) is None


@pytest.mark.parametrize("hash_kind", ["previous-revision", "made-up", "truncated"])
def test_approval_revision_bound__stale_hash__refused_and_nothing_written(brief, revise, approver, hash_kind):
    first = revise(brief, "First.")
    current = revise(brief, "Second.")
    wrong = {
        "previous-revision": first.payload_hash,
        "made-up": "a" * 64,
        "truncated": current.payload_hash[:12],
    }[hash_kind]
    before = counts()

    with pytest.raises(StaleApproval) as refused:
        decide(current, by=approver, payload_hash=wrong)

    assert refused.value.current_number == 2
    assert refused.value.current_hash == current.payload_hash
    assert refused.value.message == (
        f"The hash you reviewed ({wrong[:12]}…) is not revision 2's ({current.payload_hash[:12]}…). "
        "Revision 2 is current; review it again."
    )
    assert counts() == before
    assert get_valid_approval(current) is None
    assert status_of(brief) == Brief.Status.IN_REVIEW


def test_approval_revision_bound__revision_that_does_not_exist__not_found(brief, revise, approver):
    revision = revise(brief, "First.")
    before = counts()

    with pytest.raises(NotFound) as refused:
        decide(revision, by=approver, number=9)

    assert refused.value.message == f"{brief.public_id} has no revision 9."
    assert counts() == before


# --- one decision per approver per revision -------------------------------------------------------


def test_approval_idempotent__same_approver_twice__one_approval_one_event(brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")

    first, created = decide(revision, by=approver, comment="Good.")
    again, created_again = decide(revision, by=approver, comment="Good, again.")

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert list(Approval.objects.values_list("pk", "comment")) == [(first.pk, "Good.")]
    assert AuditEvent.objects.filter(event_type="revision.approved").count() == 1
    assert status_of(brief) == Brief.Status.APPROVED


def test_approval_idempotent__different_decision_afterwards__refused(brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")
    first, _ = decide(revision, by=approver)
    before = counts()

    with pytest.raises(DecisionAlreadyMade) as refused:
        decide(revision, by=approver, decision=CHANGES_REQUESTED)

    assert refused.value.message == (
        "You already decided “Approved” on revision 1; decisions are final. Ask the editor for a new revision."
    )
    assert counts() == before
    assert list(Approval.objects.values_list("pk", "decision")) == [(first.pk, APPROVED)]
    assert status_of(brief) == Brief.Status.APPROVED


def test_approval_idempotent__request_changes_twice__one_row_then_approve_refused(brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")

    first, created = decide(revision, by=approver, decision=CHANGES_REQUESTED)
    again, created_again = decide(revision, by=approver, decision=CHANGES_REQUESTED)
    assert (created, created_again, again.pk) == (True, False, first.pk)

    with pytest.raises(DecisionAlreadyMade, match="You already decided “Changes requested” on revision 1"):
        decide(revision, by=approver)
    assert list(Approval.objects.values_list("decision", flat=True)) == [CHANGES_REQUESTED]
    assert (
        AuditEvent.objects.filter(event_type__startswith="revision.").exclude(event_type="revision.created").count()
        == 1
    )
    assert get_valid_approval(revision) is None


def test_approval_idempotent__database_refuses_second_row_for_same_approver(brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, by=approver)

    with pytest.raises(IntegrityError, match="approval_one_decision_per_approver"), transaction.atomic():
        raw_insert_approval(revision, payload_hash=revision.payload_hash, decision=CHANGES_REQUESTED, approver=approver)
    assert Approval.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_approval_idempotent__same_approver_concurrently__one_approval_one_event(brief, editor, approver):
    with transaction.atomic(durable=True):
        revision, _ = check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers.", acting_user=editor
        )

    def approve() -> tuple[Approval, bool]:
        return check_decide_revision(
            brief.public_id,
            revision_number=1,
            payload_hash=revision.payload_hash,
            decision=APPROVED,
            acting_user=approver,
        )

    outcomes = run_together(approve, approve)

    assert [kind for kind, _value in outcomes] == ["ok", "ok"], outcomes
    (first, first_created), (second, second_created) = (value for _kind, value in outcomes)
    assert first.pk == second.pk
    assert sorted([first_created, second_created]) == [False, True]
    assert list(Approval.objects.values_list("pk", flat=True)) == [first.pk]
    assert AuditEvent.objects.filter(event_type="revision.approved").count() == 1
    assert status_of(brief) == Brief.Status.APPROVED


def test_approval_two_approvers__two_approvals__brief_approved(brief, revise, approver, approver2):
    revision = revise(brief, "Dockers walked out at dawn.")

    first, first_created = decide(revision, by=approver)
    second, second_created = decide(revision, by=approver2)

    assert (first_created, second_created) == (True, True)
    assert first.pk != second.pk
    assert list(list_decisions(revision).values_list("approver", "decision", "payload_hash")) == [
        (approver.pk, APPROVED, revision.payload_hash),
        (approver2.pk, APPROVED, revision.payload_hash),
    ]
    assert get_valid_approval(revision) == first
    assert status_of(brief) == Brief.Status.APPROVED
    assert AuditEvent.objects.filter(event_type="revision.approved").count() == 2


# --- permissions and bad input --------------------------------------------------------------------


@pytest.fixture(params=["editor", "operator", "no-group", "anonymous", "inactive-approver"])
def non_approver(request, make_user):
    match request.param:
        case "editor":
            return make_user("bea", Role.EDITOR)
        case "operator":
            return make_user("otto", Role.OPERATOR)
        case "no-group":
            return make_user("nobody")
        case "anonymous":
            return AnonymousUser()
        case _:
            user = make_user("ex-approver", Role.APPROVER)
            user.is_active = False
            user.save(update_fields=["is_active"])
            return user


@pytest.mark.parametrize("decision", [APPROVED, CHANGES_REQUESTED])
def test_approval_permission__not_an_approver__refused(brief, revise, non_approver, decision):
    revision = revise(brief, "Dockers walked out at dawn.")
    before = counts()

    with pytest.raises(PermissionRefused) as refused:
        decide(revision, by=non_approver, decision=decision)

    assert refused.value.message == "Only members of Approvers can approve or request changes."
    assert counts() == before
    assert status_of(brief) == Brief.Status.IN_REVIEW


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"decision": "approve"}, "Unknown decision 'approve'; choose approve or request changes."),
        ({"decision": "rejected"}, "Unknown decision 'rejected'; choose approve or request changes."),
        ({"decision": None}, "Unknown decision None; choose approve or request changes."),
        ({"payload_hash": ""}, "The payload hash of the revision you reviewed is missing; reload the page."),
        (
            {"payload_hash": 12345},
            "The payload hash of the revision you reviewed is missing; reload the page.",
        ),
        ({"number": "two"}, "The revision number is missing or not a number; reload the page."),
        ({"number": ""}, "The revision number is missing or not a number; reload the page."),
        ({"comment": "ok\x00"}, "Comment contains a NUL character, which cannot be stored."),
        ({"comment": "x" * 10_001}, "Comment is 10,001 characters long; the limit is 10,000."),
    ],
    ids=[
        "approve",
        "rejected",
        "decision-none",
        "hash-empty",
        "hash-not-text",
        "number-text",
        "number-empty",
        "comment-nul",
        "comment-long",
    ],
)
def test_approval_input__invalid__refused_and_nothing_written(brief, revise, approver, changes, message):
    revision = revise(brief, "Dockers walked out at dawn.")
    before = counts()

    with pytest.raises(InvalidInput) as refused:
        decide(revision, by=approver, **changes)

    assert refused.value.message == message
    assert counts() == before
    assert status_of(brief) == Brief.Status.IN_REVIEW


def test_approval_input__hash_missing__refused(brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")

    with (
        pytest.raises(InvalidInput, match="payload hash of the revision you reviewed is missing"),
        transaction.atomic(durable=True),
    ):
        check_decide_revision(
            brief.public_id, revision_number=1, payload_hash=None, decision=APPROVED, acting_user=approver
        )
    assert get_valid_approval(revision) is None


# --- audit ----------------------------------------------------------------------------------------


def test_audit__decisions__events_with_actor_and_old_new_status(brief, revise, approver, approver2):
    revision = revise(brief, "Dockers walked out at dawn.")
    subject = f"{brief.public_id}/revision-1"

    decide(revision, by=approver2, decision=CHANGES_REQUESTED, comment="Source?")
    decide(revision, by=approver)

    events = list(
        AuditEvent.objects.filter(subject_type="revision", subject_id=subject)
        .exclude(event_type="revision.created")
        .order_by("id")
    )
    assert [(e.event_type, e.actor, e.old_state, e.new_state) for e in events] == [
        (
            "revision.changes_requested",
            approver2,
            {"status": "in_review"},
            {
                "status": "changes_requested",
                "decision": "changes_requested",
                "payload_hash": revision.payload_hash,
            },
        ),
        (
            "revision.approved",
            approver,
            {"status": "changes_requested"},
            {
                "status": "approved",
                "decision": "approved",
                "payload_hash": revision.payload_hash,
                "completes_policy": True,
                "policy": {"desk": "general", "approvals_required": 1, "required_groups": []},
                "channels": ["web"],
            },
        ),
    ]
    assert status_of(brief) == Brief.Status.APPROVED


def test_audit__refused_decision__writes_no_event(brief, revise, approver, editor_approver):
    own = revise(brief, "Edna's.", by=editor_approver)
    before = AuditEvent.objects.count()

    with pytest.raises(SelfApproval):
        decide(own, by=editor_approver)
    with pytest.raises(StaleApproval):
        decide(own, by=approver, payload_hash="b" * 64)

    assert AuditEvent.objects.count() == before
