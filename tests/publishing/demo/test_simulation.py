"""The `simulate` command and its module: concurrent briefs, revisions approved in order per brief.

Real threads on real connections, so these tests commit (transaction=True).
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from approvals.models import Approval
from publishing.demo.simulation import SimulationError, run_simulation
from publishing.identities import PUBLISH, publish_key
from publishing.models import Brief, Revision
from publishing.roles import Role
from workers.models import Operation

pytestmark = pytest.mark.django_db(transaction=True)


def approved_revisions() -> set[tuple[str, int]]:
    return set(
        Approval.objects.filter(decision=Approval.Decision.APPROVED).values_list(
            "revision__brief__public_id", "revision__number"
        )
    )


def assert_latest_approved_and_one_publish_per_approval(brief_ids: list[str]) -> None:
    approved = approved_revisions()
    for public_id in brief_ids:
        latest = Revision.objects.filter(brief__public_id=public_id).order_by("-number").first()
        assert (public_id, latest.number) in approved, f"{public_id} revision {latest.number} is not approved"
    publish_keys = list(Operation.objects.filter(kind=PUBLISH).values_list("key", flat=True))
    assert len(publish_keys) == len(set(publish_keys))
    assert set(publish_keys) == {publish_key(public_id, number) for public_id, number in approved}


def test_simulate__briefs_interleaved__every_revision_approved_in_order_with_one_publish_each():
    summary = run_simulation(briefs=8, revisions=3, concurrency=4, seed=7)

    assert (summary.briefs, summary.revisions, summary.approvals, summary.refused_as_stale) == (8, 24, 24, 0)
    assert summary.elapsed_seconds > 0
    assert len(set(summary.brief_ids)) == 8
    assert Brief.objects.count() == 8
    assert Revision.objects.count() == 24
    assert Approval.objects.count() == 24
    assert_latest_approved_and_one_publish_per_approval(summary.brief_ids)
    # Per brief, approvals landed in revision order (each one on the then-latest revision).
    order: dict[str, list[int]] = defaultdict(list)
    for public_id, number in Approval.objects.order_by("id").values_list(
        "revision__brief__public_id", "revision__number"
    ):
        order[public_id].append(number)
    assert all(numbers == [1, 2, 3] for numbers in order.values()), order
    # Nobody claimed anything, so each approval superseded the brief's older waiting publish.
    statuses = defaultdict(set)
    for key, status in Operation.objects.filter(kind=PUBLISH).values_list("key", "status"):
        statuses[key.rsplit("-", 1)[1]].add(status)
    assert statuses == {"1": {"superseded"}, "2": {"superseded"}, "3": {"pending"}}


def test_simulate__stale_reviews__refused_then_the_newer_revision_is_approved():
    summary = run_simulation(briefs=5, revisions=3, concurrency=3, seed=1, stale_rate=1.0)

    # Every brief: revision 1 reviewed, revision 2 saved meanwhile, 1 refused, 2 approved; then 3.
    assert (summary.revisions, summary.approvals, summary.refused_as_stale) == (15, 10, 5)
    assert {number for _, number in approved_revisions()} == {2, 3}
    assert_latest_approved_and_one_publish_per_approval(summary.brief_ids)
    assert not Operation.objects.filter(key__endswith=":revision-1").exists()


def test_simulate__one_revision_per_brief__concurrency_above_briefs():
    summary = run_simulation(briefs=2, revisions=1, concurrency=6, seed=3)

    assert (summary.briefs, summary.revisions, summary.approvals) == (2, 2, 2)
    assert_latest_approved_and_one_publish_per_approval(summary.brief_ids)


def test_simulate_command__named_users__prints_summary(make_user, capsys):
    make_user("ed", Role.EDITOR)
    make_user("apple", Role.APPROVER)

    call_command(
        "simulate", "--briefs", "3", "--revisions", "2", "--seed", "5", "--editor", "ed", "--approver", "apple"
    )

    out = capsys.readouterr().out
    assert "simulation: briefs=3 revisions=6 approvals=6 refused_as_stale=0" in out
    assert set(Revision.objects.values_list("author__username", flat=True)) == {"ed"}
    assert set(Approval.objects.values_list("approver__username", flat=True)) == {"apple"}


def test_simulate_command__default_users__created_in_their_groups_and_reused(capsys):
    call_command("simulate", "--briefs", "1", "--revisions", "1")
    call_command("simulate", "--briefs", "1", "--revisions", "1")

    assert set(Revision.objects.values_list("author__username", flat=True)) == {"sim-editor"}
    assert set(Approval.objects.values_list("approver__username", flat=True)) == {"sim-approver"}
    assert Brief.objects.count() == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--editor", "ghost"], "There is no user 'ghost'."),
        (["--approver", "ed"], "'ed' is not in the Approvers group, so cannot act as one."),
        (["--editor", "ed", "--approver", "ed"], "'ed' is not in the Approvers group"),
        (["--concurrency", "0"], "--briefs, --revisions and --concurrency must be at least 1."),
    ],
)
def test_simulate_command__bad_arguments__clear_error_and_nothing_written(make_user, arguments, message):
    make_user("ed", Role.EDITOR)

    with pytest.raises(CommandError, match=message):
        call_command("simulate", "--briefs", "2", "--revisions", "2", *arguments)

    assert Brief.objects.count() == 0


def test_simulate__same_user_as_editor_and_approver__refused(make_user):
    make_user("both", Role.EDITOR, Role.APPROVER)

    with pytest.raises(SimulationError, match="must be different users"):
        run_simulation(briefs=1, revisions=1, editor="both", approver="both")
