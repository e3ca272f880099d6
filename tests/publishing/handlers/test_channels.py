"""One approval, several channels: each exactly once and verified, each on its own (docs/invariants.md#i14).

Every channel is a real reference target of its own (in a thread, real HTTP), the primary channel `web`
the settings' target: "applied exactly once" is read from each target's ledger, not from Galley's rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from approvals.actions import check_also_publish, check_decide_revision
from approvals.errors import DecisionAlreadyMade, SelfApproval
from approvals.models import Approval, ApprovalChannel
from galley.reference_target import Faults, ReferenceTarget
from publishing.errors import InvalidInput
from publishing.identities import PUBLISH, VERIFY, publish_key, verify_key
from publishing.models import Brief, Channel, Publication, Revision
from workers.drain import drain
from workers.models import AuditEvent, Conflict, Operation, OperationStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]


@pytest.fixture
def channels(target, add_channel) -> dict[str, ReferenceTarget]:
    """Three channels, each its own target: web (the settings' target), partner-feed and app."""
    return {"web": target, "partner-feed": add_channel("partner-feed"), "app": add_channel("app")}


def approve(revision: Revision, *, by: Any, channels: list[str] | None = None) -> Approval:
    with transaction.atomic(durable=True):
        approval, _created = check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            channels=channels,
            acting_user=by,
        )
    return approval


def also_publish(revision: Revision, channel: str, *, by: Any) -> bool:
    with transaction.atomic(durable=True):
        return check_also_publish(
            revision.brief.public_id, revision_number=revision.number, channel=channel, acting_user=by
        )


def run_worker(idle_wait: float = 0.5):
    return drain(worker_id="w-test", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=idle_wait)


def applied(target: ReferenceTarget) -> list[tuple[str, int]]:
    return [(row["operation_key"], row["revision"]) for row in target.ledger()]


def verified_on(revision: Revision) -> set[str]:
    return set(
        Publication.objects.filter(revision=revision, verified_at__isnull=False).values_list("channel__slug", flat=True)
    )


def test_identity__primary_channel_key_unchanged__another_channel_extends_it_with_its_slug():
    assert publish_key("brief-042", 3) == "publish:brief-042:revision-3"
    assert publish_key("brief-042", 3, "web") == "publish:brief-042:revision-3"
    assert publish_key("brief-042", 3, "partner-feed") == "publish:brief-042:revision-3:channel-partner-feed"
    assert verify_key("brief-042", 3, "partner-feed") == "verify:brief-042:revision-3:channel-partner-feed"


def test_invariant_14__approval_freezes_the_channel_set__one_publish_per_channel__each_applied_once_and_verified(
    channels, brief, revise, approver
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approval = approve(revision, by=approver)

    frozen = set(ApprovalChannel.objects.filter(approval=approval).values_list("channel__slug", flat=True))
    assert frozen == {"web", "partner-feed", "app"}
    publishes = Operation.objects.filter(kind=PUBLISH, subject_id=brief.public_id)
    assert {(op.channel, op.key) for op in publishes} == {
        ("web", f"publish:{brief.public_id}:revision-1"),
        ("partner-feed", f"publish:{brief.public_id}:revision-1:channel-partner-feed"),
        ("app", f"publish:{brief.public_id}:revision-1:channel-app"),
    }

    run_worker()
    run_worker()  # a second drain finds nothing to do again

    for slug, target in channels.items():
        assert applied(target) == [(publish_key(brief.public_id, 1, slug), 1)], slug
    assert verified_on(revision) == {"web", "partner-feed", "app"}
    brief.refresh_from_db()
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, 1)
    verified_events = AuditEvent.objects.filter(event_type="publication.verified", subject_id=brief.public_id)
    assert sorted(event.new_state["channel"] for event in verified_events) == ["app", "partner-feed", "web"]


def test_invariant_14__approver_names_the_channels__only_those_receive_it(channels, brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver, channels=["partner-feed"])
    run_worker()
    assert applied(channels["web"]) == [] and applied(channels["app"]) == []
    assert applied(channels["partner-feed"]) == [(publish_key(brief.public_id, 1, "partner-feed"), 1)]
    assert verified_on(revision) == {"partner-feed"}


@pytest.mark.parametrize(
    ("channels_asked", "message"),
    [
        ([], "at least one channel"),
        (["nowhere"], "No channel is called 'nowhere'"),
        ("web", "list of channel slugs"),
    ],
)
def test_invariant_14__bad_channel_set__refused_with_a_message_and_nothing_written(
    channels, brief, revise, approver, channels_asked, message
):
    revision = revise(brief, "Dockers walked out at dawn.")
    with pytest.raises(InvalidInput, match=message):
        approve(revision, by=approver, channels=channels_asked)
    assert not Approval.objects.exists()
    assert not Operation.objects.filter(kind=PUBLISH).exists()


def test_invariant_14__channel_added_after_the_approval__nothing_until_also_publish__then_exactly_once(
    target, add_channel, brief, revise, approver
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    run_worker()
    late = add_channel("newsletter")  # configured (and default) after the approval

    run_worker()
    assert applied(late) == []
    assert not Operation.objects.filter(channel="newsletter").exists()

    assert also_publish(revision, "newsletter", by=approver) is True
    assert also_publish(revision, "newsletter", by=approver) is False  # already there: nothing more
    run_worker()
    assert applied(late) == [(publish_key(brief.public_id, 1, "newsletter"), 1)]
    assert verified_on(revision) == {"web", "newsletter"}
    assert applied(target) == [(publish_key(brief.public_id, 1), 1)]  # the primary channel: once, still
    added = AuditEvent.objects.get(event_type="revision.channel_added")
    assert (added.actor, added.old_state["channels"], added.new_state["added"]) == (approver, ["web"], "newsletter")
    assert ApprovalChannel.objects.get(channel__slug="newsletter").added_by == approver


def test_invariant_14__also_publish__refused_when_unapproved_by_the_author_disabled_or_older(
    target, add_channel, brief, revise, approver, editor, make_user
):
    from publishing.roles import Role

    first = revise(brief, "Dockers walked out at dawn.")
    with pytest.raises(InvalidInput, match="not approved"):
        also_publish(first, "web", by=approver)
    approve(first, by=approver)
    add_channel("newsletter")
    Channel.objects.filter(slug="newsletter").update(enabled=False)
    with pytest.raises(InvalidInput, match="disabled"):
        also_publish(first, "newsletter", by=approver)
    Channel.objects.filter(slug="newsletter").update(enabled=True)
    writer = make_user("wanda", Role.EDITOR, Role.APPROVER)
    own = revise(brief, "Dockers walked out at dawn, said the union.", by=writer)
    approve(own, by=approver)
    with pytest.raises(SelfApproval):
        also_publish(own, "newsletter", by=writer)
    also_publish(own, "newsletter", by=approver)
    with pytest.raises(DecisionAlreadyMade, match="newer"):
        also_publish(first, "newsletter", by=approver)
    assert not Operation.objects.filter(channel="newsletter", subject_version=first.number).exists()


def test_invariant_14__one_channel_down__the_others_publish_and_verify__then_it_catches_up(
    channels, brief, revise, approver
):
    down = channels["partner-feed"]
    down.faults = Faults(rate_503=1.0, retry_after=1)
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    run_worker(idle_wait=0.2)
    assert verified_on(revision) == {"web", "app"}
    assert applied(down) == []
    waiting = Operation.objects.get(kind=PUBLISH, channel="partner-feed")
    assert waiting.status == OperationStatus.RETRY_WAIT
    assert waiting.attempts == waiting.waits  # waiting on a throttled channel spends no attempt

    down.faults = Faults()
    run_worker(idle_wait=1.5)
    assert applied(down) == [(publish_key(brief.public_id, 1, "partner-feed"), 1)]
    assert verified_on(revision) == {"web", "partner-feed", "app"}


def test_invariant_14__stale_revision_on_one_channel__the_others_published__that_one_in_conflict(
    channels, brief, revise, approver
):
    from publishing.clients.target import TargetClient
    from publishing.hashing import payload_hash
    from tests.reference_target import TOKEN

    foreign = {"title": "Harbour strike", "body": "Someone else's revision five."}
    with TargetClient(base_url=channels["app"].url, token=TOKEN, timeout=5) as client:
        client.publish(
            operation_key="elsewhere-5",
            brief_id=brief.public_id,
            revision=5,
            payload_hash=payload_hash(foreign),
            payload=foreign,
        )
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    run_worker()

    assert verified_on(revision) == {"web", "partner-feed"}
    stuck = Operation.objects.get(kind=PUBLISH, channel="app")
    assert stuck.status == OperationStatus.CONFLICT
    assert Conflict.objects.get(operation=stuck).kind == Conflict.Kind.STALE_REVISION
    assert {op.channel for op in Operation.objects.filter(status=OperationStatus.CONFLICT)} == {"app"}


def test_invariant_4__per_channel__a_newer_revision_for_one_channel_never_touches_the_others_older_publish(
    channels, brief, revise, approver
):
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver, channels=["web", "partner-feed"])
    second = revise(brief, "Dockers walked out at dawn, the union said.")
    approve(second, by=approver, channels=["web"])

    superseded = Operation.objects.filter(status=OperationStatus.SUPERSEDED).values_list("channel", "subject_version")
    assert list(superseded) == [("web", 1)]
    run_worker()
    assert applied(channels["web"]) == [(publish_key(brief.public_id, 2), 2)]
    assert applied(channels["partner-feed"]) == [(publish_key(brief.public_id, 1, "partner-feed"), 1)]
    assert verified_on(first) == {"partner-feed"} and verified_on(second) == {"web"}
    brief.refresh_from_db()
    assert brief.published_revision_number == 2


def test_invariant_4__per_channel__an_older_revision_never_replaces_a_newer_one_on_a_channel(
    channels, brief, revise, approver
):
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver, channels=["web"])
    second = revise(brief, "Dockers walked out at dawn, the union said.")
    approve(second, by=approver, channels=["web", "partner-feed"])
    run_worker()
    # Revision 1 added to partner-feed now would regress it below revision 2: refused, nothing written.
    with pytest.raises(DecisionAlreadyMade, match="newer"):
        also_publish(first, "partner-feed", by=approver)
    run_worker()
    assert applied(channels["partner-feed"]) == [(publish_key(brief.public_id, 2, "partner-feed"), 2)]
    assert verified_on(second) == {"web", "partner-feed"}
