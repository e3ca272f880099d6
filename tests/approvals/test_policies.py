"""docs/invariants.md#i17, policy before publish: a revision is published only when approvals of exactly that
revision and hash meet the approval policy that applied (its desk's, with Legal when the brief is flagged).

The approval that completes the policy records it (ApprovalCompletion) and writes the publish intents in its
own transaction; two completing at once write one set; an author, a superuser and an operator are held to it
like anyone; a policy changed before completion counts, after completion changes nothing; and the worker
refuses an intent whose recorded policy the approvals do not meet. Decisions are made the way the approval
view makes them (tests.approvals.test_approvals.decide); desks and the legal flag are set on their rows, as
an operator's admin change would leave them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, connection, transaction

from approvals import actions
from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from approvals.models import Approval, ApprovalChannel, ApprovalCompletion
from approvals.selectors import get_valid_approval
from approvals.sql import COMPLETE_POLICY_SQL
from publishing.actions.briefs import check_create_brief
from publishing.actions.publications import do_request_publication
from publishing.errors import PermissionRefused
from publishing.identities import PUBLISH, publish_key
from publishing.models import Brief, Channel, Desk, Revision
from publishing.roles import LEGAL_GROUP, Role
from publishing.selectors.publish_checks import get_publish_checks
from tests.approvals.test_approvals import INSERT_APPROVAL, decide, status_of
from tests.concurrency import WAIT_SECONDS, Session, raw_connection, wait_until_blocked_or_done
from tests.publishing.handlers.test_invariant_guards import requests_to
from tests.publishing.handlers.test_publications import application_of, applied, assert_not_published, run_worker
from workers.models import AuditEvent, Operation

pytestmark = pytest.mark.django_db

APPROVED = Approval.Decision.APPROVED
CHANGES_REQUESTED = Approval.Decision.CHANGES_REQUESTED
BODY = "Dockers walked out at dawn."


@pytest.fixture
def approver3(make_user):
    return make_user("ada", Role.APPROVER)


@pytest.fixture
def legal(make_user):
    """legal(name, *roles): a member of Legal (and of `roles`, Approvers by default)."""

    def make(name: str, *roles: Role) -> Any:
        user = make_user(name, *(roles or (Role.APPROVER,)))
        user.groups.add(Group.objects.get(name=LEGAL_GROUP))
        return user

    return make


@pytest.fixture
def desk() -> Desk:
    """The politics desk: two approvals from distinct approvers, no required group."""
    return Desk.objects.create(slug="politics", name="Politics", approvals_required=2)


@pytest.fixture
def politics(desk, editor) -> Brief:
    """A brief of the politics desk going to two channels: web (the primary) and partner-feed."""
    Channel.objects.create(slug="partner-feed", name="Partner feed", base_url="http://127.0.0.1:9", is_default=True)
    return check_create_brief(
        title="Harbour strike", source_material="Dockers walked out at dawn.", desk=desk.slug, acting_user=editor
    )


def set_policy(desk: Desk, *, approvals_required: int | None = None, groups: list[str] | None = None) -> None:
    """An operator's change of the desk's policy, as the admin leaves it."""
    if approvals_required is not None:
        Desk.objects.filter(pk=desk.pk).update(approvals_required=approvals_required)
    if groups is not None:
        desk.required_groups.set(Group.objects.filter(name__in=groups))


def flag_for_legal(brief: Brief, *, flagged: bool = True) -> None:
    Brief.objects.filter(pk=brief.pk).update(legal_review=flagged)


def publishes(revision: Revision) -> list[tuple[int, str, str]]:
    """The revision's publish operations as (id, channel, key), by channel."""
    operations = Operation.objects.filter(
        kind=PUBLISH, subject_id=revision.brief.public_id, subject_version=revision.number
    )
    return sorted((op.id, op.channel, op.key) for op in operations)


def channels_of(revision: Revision) -> list[str]:
    return sorted(channel for _id, channel, _key in publishes(revision))


def counts() -> tuple[int, int, int, int]:
    return (
        Approval.objects.count(),
        ApprovalCompletion.objects.count(),
        Operation.objects.count(),
        AuditEvent.objects.count(),
    )


def assert_not_completed(revision: Revision) -> None:
    assert not ApprovalCompletion.objects.filter(revision=revision).exists()
    assert publishes(revision) == []
    assert get_valid_approval(revision) is None


def completion_of(revision: Revision) -> tuple[int, str, int, list[str], str]:
    """The completion as (approval, desk, approvals required, required groups, hash)."""
    c = ApprovalCompletion.objects.select_related("desk").get(revision=revision)
    return c.approval_id, c.desk.slug, c.approvals_required, c.required_groups, c.payload_hash


# --- the count -------------------------------------------------------------------------------------


def test_invariant_17__two_of_three_desk__second_approval_completes_with_one_set_of_intents(
    politics, revise, approver, approver2, approver3
):
    revision = revise(politics, BODY)

    first, _ = decide(revision, by=approver)
    assert_not_completed(revision)
    assert status_of(politics) == Brief.Status.IN_REVIEW
    assert not ApprovalChannel.objects.exists()

    second, _ = decide(revision, by=approver2)
    intents = publishes(revision)
    assert channels_of(revision) == ["partner-feed", "web"]
    assert completion_of(revision) == (second.pk, "politics", 2, [], revision.payload_hash)
    assert get_valid_approval(revision) == second
    assert status_of(politics) == Brief.Status.APPROVED
    assert sorted(ApprovalChannel.objects.filter(approval=second).values_list("channel__slug", flat=True)) == [
        "partner-feed",
        "web",
    ]

    third, created = decide(revision, by=approver3)
    assert created and third.decision == APPROVED
    assert Approval.objects.filter(revision=revision, decision=APPROVED).count() == 3
    assert ApprovalCompletion.objects.count() == 1
    assert publishes(revision) == intents
    assert not ApprovalChannel.objects.filter(approval=third).exists()
    audited = AuditEvent.objects.filter(event_type="revision.approved").order_by("id")
    assert [event.new_state["completes_policy"] for event in audited] == [False, True, False]
    assert first.pk < second.pk < third.pk


def test_invariant_17__changes_requested_after_completion__refused__nothing_written(
    politics, revise, approver, approver2, approver3
):
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    decide(revision, by=approver2)
    before = counts()

    with pytest.raises(DecisionAlreadyMade, match="which completed its approval policy, and it is being published"):
        decide(revision, by=approver3, decision=CHANGES_REQUESTED)

    assert counts() == before
    assert status_of(politics) == Brief.Status.APPROVED


# --- refused, nothing written --------------------------------------------------------------------


def test_invariant_17__same_approver_twice__first_approval_returned__counts_once(politics, revise, approver):
    revision = revise(politics, BODY)
    first, created = decide(revision, by=approver)
    assert created
    before = counts()

    again, created = decide(revision, by=approver)

    assert (again, created) == (first, False)
    assert counts() == before
    assert_not_completed(revision)


def test_invariant_17__author_who_is_an_approver__self_approval_refused__nothing_written(
    politics, revise, make_user, approver
):
    author = make_user("edna", Role.EDITOR, Role.APPROVER)
    revision = revise(politics, BODY, by=author)
    decide(revision, by=approver)
    before = counts()

    with pytest.raises(SelfApproval, match="You wrote revision 1, so you cannot approve it; another approver must"):
        decide(revision, by=author)

    assert counts() == before
    assert_not_completed(revision)


@pytest.mark.parametrize(
    ("who", "refusal", "message"),
    [
        ("superuser_author_in_approvers", SelfApproval, "You wrote revision 1, so you cannot approve it"),
        ("superuser_outside_approvers", PermissionRefused, "Only members of Approvers can approve or request changes"),
        ("operator", PermissionRefused, "Only members of Approvers can approve or request changes"),
    ],
)
def test_invariant_17__superuser_or_operator__held_to_the_policy_like_anyone(
    politics, revise, make_user, approver, operator, who, refusal, message
):
    """A superuser who wrote the revision cannot approve it; a superuser or an operator outside Approvers
    cannot approve at all: roles come from groups only, and neither grants an exemption."""
    user = operator
    if who.startswith("superuser"):
        user = make_user("root", Role.EDITOR, *([Role.APPROVER] if who.endswith("in_approvers") else []))
        user.is_superuser = user.is_staff = True
        user.save(update_fields=["is_superuser", "is_staff"])
    revision = revise(politics, BODY, by=user if refusal is SelfApproval else None)
    decide(revision, by=approver)
    before = counts()

    with pytest.raises(refusal, match=message):
        decide(revision, by=user)

    assert counts() == before
    assert_not_completed(revision)


def test_invariant_17__approval_of_revision_1_after_revision_2__stale__counts_for_neither(
    politics, revise, approver, approver2
):
    first = revise(politics, BODY)
    decide(first, by=approver)
    second = revise(politics, "Dockers walked out at dawn; ferries stopped.")
    before = counts()

    with pytest.raises(StaleApproval, match="Revision 1 is no longer current: revision 2 is") as refused:
        decide(first, by=approver2)

    assert (refused.value.current_number, refused.value.current_hash) == (2, second.payload_hash)
    assert counts() == before
    assert_not_completed(first)
    # Revision 1's approval does not count for revision 2: its first approval there does not complete it.
    decide(second, by=approver2)
    assert_not_completed(second)


# --- required groups ----------------------------------------------------------------------------------


@pytest.mark.parametrize("why", ["desk_requires_legal", "brief_flagged"])
def test_invariant_17__legal_approval_missing__count_met_but_no_intent__legal_member_completes(
    politics, desk, revise, approver, approver2, legal, why
):
    if why == "desk_requires_legal":
        set_policy(desk, groups=[LEGAL_GROUP])
    else:
        flag_for_legal(politics)
    revision = revise(politics, BODY)

    decide(revision, by=approver)
    decide(revision, by=approver2)
    assert_not_completed(revision)
    assert status_of(politics) == Brief.Status.IN_REVIEW

    # In Legal but not in Approvers: Legal's approval is an approver's, so it is refused.
    with pytest.raises(PermissionRefused, match="Only members of Approvers"):
        decide(revision, by=legal("lou", Role.EDITOR))
    assert_not_completed(revision)

    counsel, _ = decide(revision, by=legal("lea"))
    assert completion_of(revision) == (counsel.pk, "politics", 2, [LEGAL_GROUP], revision.payload_hash)
    assert channels_of(revision) == ["partner-feed", "web"]
    assert status_of(politics) == Brief.Status.APPROVED


def test_invariant_17__legal_member_requests_changes__blocks_until_another_legal_member_approves(
    politics, revise, approver, approver2, legal
):
    flag_for_legal(politics)
    revision = revise(politics, BODY)
    objector, counsel = legal("lea"), legal("lou")

    decide(revision, by=objector, decision=CHANGES_REQUESTED, comment="The union's claim needs a source.")
    decide(revision, by=approver)
    decide(revision, by=approver2)
    # Two approvals from distinct approvers: the count is met, but Legal's latest decision is a request.
    assert_not_completed(revision)
    assert status_of(politics) == Brief.Status.CHANGES_REQUESTED

    approval, _ = decide(revision, by=counsel)

    assert completion_of(revision) == (approval.pk, "politics", 2, [LEGAL_GROUP], revision.payload_hash)
    assert channels_of(revision) == ["partner-feed", "web"]
    assert status_of(politics) == Brief.Status.APPROVED


def test_invariant_17__legal_approval_then_legal_request__blocks_again(politics, revise, approver, legal):
    """The group's latest decision counts, not its first: an approval from Legal followed by a request for
    changes from Legal leaves Legal missing."""
    flag_for_legal(politics)
    revision = revise(politics, BODY)

    decide(revision, by=legal("lea"))
    decide(revision, by=legal("lou"), decision=CHANGES_REQUESTED, comment="Not yet.")
    decide(revision, by=approver)

    assert_not_completed(revision)


# --- a policy changed between approvals -------------------------------------------------------------------


def test_invariant_17__policy_tightened_2_to_3_after_one_approval__second_waits__third_completes(
    politics, desk, revise, approver, approver2, approver3
):
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    set_policy(desk, approvals_required=3)

    decide(revision, by=approver2)
    assert_not_completed(revision)

    third, _ = decide(revision, by=approver3)
    assert completion_of(revision) == (third.pk, "politics", 3, [], revision.payload_hash)
    assert channels_of(revision) == ["partner-feed", "web"]


def test_invariant_17__policy_loosened_3_to_2_after_two_approvals__change_publishes_nothing__next_approval_completes(
    politics, desk, revise, approver, approver2, approver3
):
    set_policy(desk, approvals_required=3)
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    decide(revision, by=approver2)
    before = counts()

    set_policy(desk, approvals_required=2)

    assert counts() == before
    assert_not_completed(revision)
    third, _ = decide(revision, by=approver3)
    assert completion_of(revision) == (third.pk, "politics", 2, [], revision.payload_hash)
    assert channels_of(revision) == ["partner-feed", "web"]


def test_invariant_17__legal_flag_lifted_after_the_approvals__change_publishes_nothing__next_approval_completes(
    politics, revise, approver, approver2, approver3
):
    flag_for_legal(politics)
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    decide(revision, by=approver2)
    before = counts()

    flag_for_legal(politics, flagged=False)

    assert counts() == before
    assert_not_completed(revision)
    third, _ = decide(revision, by=approver3)
    assert completion_of(revision) == (third.pk, "politics", 2, [], revision.payload_hash)


def test_invariant_17__legal_flag_set_after_a_legal_members_approval__that_approval_counts(
    politics, revise, approver, legal
):
    revision = revise(politics, BODY)
    decide(revision, by=legal("lea"))
    flag_for_legal(politics)

    approval, _ = decide(revision, by=approver)

    assert completion_of(revision) == (approval.pk, "politics", 2, [LEGAL_GROUP], revision.payload_hash)


def test_invariant_17__policy_tightened_after_completion__changes_nothing_for_that_revision(
    politics, desk, revise, approver, approver2, approver3
):
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    second, _ = decide(revision, by=approver2)
    intents = publishes(revision)

    set_policy(desk, approvals_required=3, groups=[LEGAL_GROUP])
    flag_for_legal(politics)

    # The worker counts against the policy recorded with the completion, not the desk's new one.
    assert [get_publish_checks(politics.public_id, 1, channel=c).approved for c in ("web", "partner-feed")] == [
        True,
        True,
    ]
    assert get_valid_approval(revision) == second
    decide(revision, by=approver3)
    assert completion_of(revision) == (second.pk, "politics", 2, [], revision.payload_hash)
    assert publishes(revision) == intents


# --- concurrency: one completion, one set of intents ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_invariant_17__two_completing_approvals_at_once__one_completion_one_set_of_intents(
    politics, revise, approver, approver2, approver3, monkeypatch
):
    """The worst interleaving the brief's row lock allows: one completing approval has written its completion
    and intents and is held before its commit while the other, started then, waits for the brief; let go,
    the other commits its approval and writes nothing more."""
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    held, release = threading.Event(), threading.Event()
    notify = actions.do_notify_decided

    def hold_first(*args: Any, **kwargs: Any) -> None:
        notify(*args, **kwargs)
        if threading.current_thread().name == "first":
            held.set()
            assert release.wait(WAIT_SECONDS), "the first approval was never released"

    monkeypatch.setattr(actions, "do_notify_decided", hold_first)
    first = Session("first", lambda: decide(revision, by=approver2)).begin()
    assert held.wait(WAIT_SECONDS), f"the first approval did not get past its checks: {first.error!r}"
    second = Session("second", lambda: decide(revision, by=approver3)).begin()
    wait_until_blocked_or_done(second)
    assert second.is_alive(), f"the second approval did not wait for the brief: {second.error!r}"

    release.set()
    for session in (first, second):
        session.finish()
        assert session.error is None, f"{session.name}: {session.error!r}"

    by_approver = dict(Approval.objects.filter(revision=revision).values_list("approver_id", "id"))
    assert set(by_approver) == {approver.pk, approver2.pk, approver3.pk}
    assert ApprovalCompletion.objects.count() == 1
    assert completion_of(revision)[:3] == (by_approver[approver2.pk], "politics", 2)
    assert channels_of(revision) == ["partner-feed", "web"]


def complete_policy(cursor: Any, revision: Revision, approval_id: int, desk: Desk) -> Any:
    cursor.execute(
        COMPLETE_POLICY_SQL,
        {
            "revision_id": revision.pk,
            "approval_id": approval_id,
            "desk_id": desk.pk,
            "approvals_required": 2,
            "required_groups": [],
        },
    )
    return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_invariant_17__database_alone__two_completions_without_the_brief_lock__one_row(
    politics, desk, revise, approver, approver2, approver3
):
    """No brief lock, two raw connections: each inserts its approval, then both try to complete; the second
    waits on the unique index of the revision and, once the first commits, writes nothing (ON CONFLICT)."""
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    one, two = raw_connection(), raw_connection()
    try:
        ids = []
        for conn, user in ((one, approver2), (two, approver3)):
            with conn.cursor() as cursor:
                cursor.execute(INSERT_APPROVAL, [revision.pk, revision.payload_hash, APPROVED, user.pk])
                ids.append(cursor.fetchone()[0])
        with one.cursor() as cursor:
            assert complete_policy(cursor, revision, ids[0], desk) is not None
        pid = two.info.backend_pid
        outcome: list[Any] = []

        def second_completes() -> None:
            with two.cursor() as cursor:
                outcome.append(complete_policy(cursor, revision, ids[1], desk))

        waiter = threading.Thread(target=second_completes)
        waiter.start()
        with connection.cursor() as cursor:
            for _ in range(WAIT_SECONDS * 100):
                cursor.execute("SELECT %s = ANY(pg_blocking_pids(%s))", [one.info.backend_pid, pid])
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the second completion did not wait for the first")
        one.commit()
        waiter.join(WAIT_SECONDS)
        assert not waiter.is_alive()
        two.commit()
    finally:
        one.close()
        two.close()

    assert outcome == [None]
    assert list(ApprovalCompletion.objects.values_list("approval_id", flat=True)) == [ids[0]]
    assert Approval.objects.filter(revision=revision).count() == 3


# --- the worker checks again ------------------------------------------------------------------------------


def forge_completion(revision: Revision, approval: Approval, *, approvals_required: int, groups: list[str]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO approvals_approvalcompletion (revision_id, payload_hash, approval_id, desk_id, "
            "approvals_required, required_groups, created_at) VALUES (%s, %s, %s, %s, %s, %s::text[], now())",
            [revision.pk, revision.payload_hash, approval.pk, revision.brief.desk_id, approvals_required, groups],
        )


def forge_publish(revision: Revision, channel: str) -> None:
    """A publish intent no completing approval wrote, through the real enqueue action under the brief's lock."""
    with transaction.atomic(durable=True):
        Brief.objects.select_for_update(no_key=True).get(pk=revision.brief_id)
        assert do_request_publication(revision, channel=channel).created


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("approvals_required", "groups"), [(2, []), (1, [LEGAL_GROUP])], ids=["count_not_met", "group_not_met"]
)
def test_invariant_17__forged_completion_and_intent__worker_refuses__nothing_sent(
    target, politics, revise, approver, caplog, approvals_required, groups
):
    revision = revise(politics, BODY)
    approval, _ = decide(revision, by=approver)
    with transaction.atomic(durable=True):
        forge_completion(revision, approval, approvals_required=approvals_required, groups=groups)
        # With the channel row a completing approval writes: only the recorded policy is left to refuse.
        ApprovalChannel.objects.create(approval=approval, channel=Channel.objects.get(slug="web"))
    forge_publish(revision, "web")

    with requests_to(caplog) as served:
        assert run_worker() == {"dead": 1}

    operation = Operation.objects.get(key=publish_key(politics.public_id, 1))
    assert (operation.status, operation.last_error_kind) == ("dead", "invalid")
    assert operation.last_error_message == (
        f"no approval of revision 1 with hash {revision.payload_hash[:12]}… exists; refusing to publish"
    )
    assert served == []
    assert applied(target) == []
    assert_not_published(politics)


@pytest.mark.django_db(transaction=True)
def test_invariant_14__intent_forged_for_a_channel_outside_the_approvals_set__worker_refuses__nothing_sent(
    target, add_channel, editor, revise, approver, caplog
):
    feed = add_channel("partner-feed")
    brief = check_create_brief(title="Harbour strike", source_material=BODY, acting_user=editor)
    revision = revise(brief, BODY)
    decide(revision, by=approver, channels=["web"])
    forge_publish(revision, "partner-feed")

    assert run_worker() == {"succeeded": 1, "dead": 1}

    forged = Operation.objects.get(key=publish_key(brief.public_id, 1, "partner-feed"))
    assert (forged.status, forged.last_error_kind) == ("dead", "invalid")
    assert applied(feed) == []
    assert applied(target) == [application_of(revision)]


# --- database guards ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE approvals_approvalcompletion SET approvals_required = 1 WHERE revision_id = %s",
        "DELETE FROM approvals_approvalcompletion WHERE revision_id = %s",
    ],
    ids=["update", "delete"],
)
def test_invariant_17__completion_append_only__raw_sql__refused(politics, revise, approver, approver2, sql):
    revision = revise(politics, BODY)
    decide(revision, by=approver)
    decide(revision, by=approver2)
    recorded = completion_of(revision)
    operation = sql.split()[0]

    with (
        pytest.raises(IntegrityError, match=f"approvals_approvalcompletion rows are immutable: {operation} refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [revision.pk])

    assert completion_of(revision) == recorded


def test_invariant_17__completion_naming_an_approval_of_another_revision__refused(
    politics, revise, approver, approver2
):
    first = revise(politics, BODY)
    approval, _ = decide(first, by=approver)
    second = revise(politics, "Dockers walked out at dawn; ferries stopped.")

    with pytest.raises(IntegrityError, match="approval_completion_approval_of_revision"), transaction.atomic():
        forge_completion(second, approval, approvals_required=1, groups=[])

    assert not ApprovalCompletion.objects.exists()


def test_invariant_17__completion_with_another_payload_hash__refused(politics, revise, approver):
    revision = revise(politics, BODY)
    approval, _ = decide(revision, by=approver)

    with pytest.raises(IntegrityError, match="approval_completion_hash_is_revision_hash"), transaction.atomic():
        ApprovalCompletion.objects.create(
            revision=revision,
            payload_hash="f" * 64,
            approval=approval,
            desk=politics.desk,
            approvals_required=1,
        )

    assert not ApprovalCompletion.objects.exists()
