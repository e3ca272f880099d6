"""docs/invariants.md#i15 for schedules (docs/schedules.md): an approval publishes now or at a time T, given as
a date, a time and an IANA zone; nothing of the revision reaches any channel before T by the database clock,
and then each channel's publish fires once. Reschedule and cancel move every channel's publish or none, and
are refused once any has fired; a newer revision's approval supersedes a waiting one (#i4); the policy's
completing approval decides T (#i17).

Decisions go through the action as the approval view calls it (one durable transaction); drains run the real
worker against real reference targets (two channels: web and partner-feed), so these tests use
`transaction=True` and the database clock is the real one.
"""

from __future__ import annotations

import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import ProgrammingError, transaction

from approvals.actions import check_decide_revision
from approvals.errors import DecisionAlreadyMade, ScheduleFired, SelfApproval
from approvals.models import Approval, ApprovalCompletion, PublicationSchedule
from approvals.schedules import check_cancel_schedule, check_reschedule_publication, database_now
from approvals.selectors import ScheduleState, get_revision_schedule, get_schedule
from galley.reference_target import ReferenceTarget
from publishing.actions.briefs import check_create_brief
from publishing.errors import InvalidInput, PermissionRefused
from publishing.identities import PUBLISH
from publishing.models import Brief, Desk, Publication, Revision
from tests.concurrency import run_together
from tests.publishing.handlers.test_publications import applied, run_worker
from workers.actions.claims import claim_operations
from workers.models import AuditEvent, Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

BODY = "Dockers walked out at dawn."
AMSTERDAM = "Europe/Amsterdam"
CHANNELS = ["partner-feed", "web"]


def approve(revision: Revision, *, by: Any, publish_at: Any = None, zone: Any = None) -> Approval:
    with transaction.atomic(durable=True):
        approval, _created = check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            publish_at=publish_at,
            zone=zone,
            acting_user=by,
        )
    return approval


def reschedule(revision: Revision, *, by: Any, publish_at: Any, zone: Any = "UTC") -> bool:
    with transaction.atomic(durable=True):
        _schedule, changed = check_reschedule_publication(
            revision.brief.public_id, revision_number=revision.number, publish_at=publish_at, zone=zone, acting_user=by
        )
    return changed


def cancel(revision: Revision, *, by: Any, reason: Any = "Embargo lifted by the source: hold it.") -> bool:
    with transaction.atomic(durable=True):
        _schedule, changed = check_cancel_schedule(
            revision.brief.public_id, revision_number=revision.number, reason=reason, acting_user=by
        )
    return changed


def in_minutes(minutes: float) -> str:
    """An ISO 8601 time with offset, `minutes` from the database's now."""
    return (database_now() + datetime.timedelta(minutes=minutes)).isoformat()


def publishes(revision: Revision) -> list[Operation]:
    return list(
        Operation.objects.filter(
            kind=PUBLISH, subject_id=revision.brief.public_id, subject_version=revision.number
        ).order_by("channel")
    )


def ledgers(targets: dict[str, ReferenceTarget]) -> dict[str, list[int]]:
    """Which revisions each channel's target applied, in order."""
    return {slug: [revision for _key, revision, _hash in applied(t)] for slug, t in sorted(targets.items())}


def pass_time(revision: Revision, *, minutes: float) -> None:
    """As if the workers had all been down until `minutes` after T: T (and the due time it set) moved back."""
    moved = database_now() - datetime.timedelta(minutes=minutes)
    Operation.objects.filter(kind=PUBLISH, subject_version=revision.number, status="pending").update(
        scheduled_for=moved, next_attempt_at=moved
    )


def refused(call: Any, error: type[Exception], match: str) -> None:
    """`call` raises `error` matching `match` and leaves Galley's rows and audit as they were."""
    before = (
        Approval.objects.count(),
        PublicationSchedule.objects.count(),
        list(Operation.objects.order_by("id").values_list("id", "status", "scheduled_for", "next_attempt_at")),
        AuditEvent.objects.count(),
    )
    with pytest.raises(error, match=match):
        call()
    after = (
        Approval.objects.count(),
        PublicationSchedule.objects.count(),
        list(Operation.objects.order_by("id").values_list("id", "status", "scheduled_for", "next_attempt_at")),
        AuditEvent.objects.count(),
    )
    assert after == before


# --- what an approver may ask for -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("publish_at", "zone", "match"),
    [
        ("2027-01-15T10:00", "Mars/Olympus_Mons", "is not a time zone Galley knows"),
        ("2027-01-15T10:00", "../../etc/passwd", "is not a time zone Galley knows"),
        ("next tuesday", AMSTERDAM, "is not a date and time"),
        ("2027-02-30T10:00", AMSTERDAM, "is not a date and time"),
        # 28 March 2027, 02:00 → 03:00 in Amsterdam: 02:30 never happens there.
        ("2027-03-28T02:30", AMSTERDAM, "does not exist in Europe/Amsterdam: the clocks skip it"),
        # 31 October 2027, 03:00 → 02:00: 02:30 happens twice; refused rather than guessed.
        ("2027-10-31T02:30", AMSTERDAM, r"happens twice in Europe/Amsterdam .* at \+0200 and at \+0100"),
        ("2020-01-01T10:00", AMSTERDAM, "has passed"),
        ("2099-01-01T10:00+00:00", AMSTERDAM, "more than 366 days ahead"),
    ],
    ids=["unknown-zone", "path-as-zone", "not-a-time", "no-such-day", "dst-gap", "dst-fold", "past", "too-far"],
)
def test_invariant_15__approve_at__bad_time_or_zone__refused_clearly__nothing_written(
    story, revise, approver, publish_at, zone, match
):
    revision = revise(story, BODY)
    refused(lambda: approve(revision, by=approver, publish_at=publish_at, zone=zone), InvalidInput, match)
    assert not ApprovalCompletion.objects.exists()


def test_invariant_15__request_for_changes_with_a_time__refused(story, revise, approver):
    revision = revise(story, BODY)
    with pytest.raises(InvalidInput, match="takes no publish time"), transaction.atomic(durable=True):
        check_decide_revision(
            story.public_id,
            revision_number=1,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.CHANGES_REQUESTED,
            publish_at=in_minutes(60),
            acting_user=approver,
        )


@pytest.mark.parametrize(
    ("local", "utc"),
    [
        ("2027-03-27T10:00", datetime.datetime(2027, 3, 27, 9, 0, tzinfo=datetime.UTC)),  # CET, +01:00
        ("2027-03-28T10:00", datetime.datetime(2027, 3, 28, 8, 0, tzinfo=datetime.UTC)),  # CEST, +02:00
        ("2027-10-31T03:30", datetime.datetime(2027, 10, 31, 2, 30, tzinfo=datetime.UTC)),  # CET again
        ("2027-10-31T02:30+02:00", datetime.datetime(2027, 10, 31, 0, 30, tzinfo=datetime.UTC)),  # the fold, said
    ],
    ids=["before-spring", "after-spring", "after-autumn", "fold-with-offset"],
)
def test_invariant_15__amsterdam_across_a_dst_change__t_is_the_right_utc_instant_on_every_channel(
    story, revise, approver, local, utc
):
    """The workers run in UTC and compare T with the database clock: T must be the zone's instant, stored
    as such on every channel's operation, and shown back in the zone it was given in."""
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=local, zone=AMSTERDAM)

    assert [(op.channel, op.scheduled_for, op.next_attempt_at) for op in publishes(revision)] == [
        (channel, utc, utc) for channel in CHANNELS
    ]
    schedule = get_revision_schedule(revision)
    assert (schedule.publish_at, schedule.zone, schedule.state) == (utc, AMSTERDAM, ScheduleState.WAITING)
    assert schedule.local == utc.astimezone(ZoneInfo(AMSTERDAM))
    assert schedule.local.strftime("%Y-%m-%dT%H:%M") == local[:16]
    assert claim_operations(worker_id="w-utc", limit=10, kinds=[PUBLISH]) == []


# --- the embargo and the firing --------------------------------------------------------------------------


def test_invariant_15__embargo__nothing_claimable_nor_sent_before_t__then_once_per_channel(
    targets, story, revise, approver, approver2
):
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=in_minutes(60), zone=AMSTERDAM)

    # Before T: no claim takes it, a drain sends nothing, no channel's target holds anything.
    assert claim_operations(worker_id="w-early", limit=10, kinds=[PUBLISH]) == []
    assert run_worker(worker_id="w-early") == {}
    assert ledgers(targets) == {"partner-feed": [], "web": []}
    assert not Publication.objects.exists()
    assert get_schedule(story).state == ScheduleState.WAITING

    # T comes (brought forward by a reschedule to a moment just past): each channel fires once.
    assert reschedule(revision, by=approver2, publish_at=in_minutes(-0.05))
    assert run_worker(worker_id="w-1") == {"succeeded": 2}
    assert run_worker(worker_id="w-2") == {}
    assert ledgers(targets) == {"partner-feed": [1], "web": [1]}
    schedule = get_schedule(story)
    assert schedule.state == ScheduleState.FIRED
    for firing in schedule.channels:
        assert firing.status == "succeeded"
        assert firing.fired_at >= firing.scheduled_for  # never before T, by the database clock
        assert firing.lateness == firing.fired_at - firing.scheduled_for


def test_invariant_15__a_time_just_passed__publishes_now__t_recorded_and_its_lateness(targets, story, revise, approver):
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=in_minutes(-5), zone="UTC")

    audit = AuditEvent.objects.get(event_type="revision.approved")
    assert audit.new_state["due_now"] is True and audit.new_state["zone"] == "UTC"
    assert run_worker() == {"succeeded": 2}
    assert ledgers(targets) == {"partner-feed": [1], "web": [1]}
    schedule = get_schedule(story)
    assert schedule.state == ScheduleState.FIRED
    assert all(firing.lateness >= datetime.timedelta(minutes=4) for firing in schedule.channels)


def test_invariant_15__workers_down_across_t__one_publication_per_channel__lateness_recorded(
    targets, story, revise, approver
):
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=in_minutes(30), zone=AMSTERDAM)
    pass_time(revision, minutes=90)  # nobody ran until 90 minutes after T

    assert run_worker(worker_id="w-back") == {"succeeded": 2}
    assert run_worker(worker_id="w-again") == {}
    assert ledgers(targets) == {"partner-feed": [1], "web": [1]}
    assert Publication.objects.filter(revision=revision).count() == 2
    schedule = get_schedule(story)
    assert [f.channel for f in schedule.channels] == CHANNELS
    assert all(f.lateness >= datetime.timedelta(minutes=90) for f in schedule.channels)
    # One firing each: missed time is never replayed as several.
    assert [op.attempts for op in publishes(revision)] == [1, 1]


# --- reschedule ------------------------------------------------------------------------------------------


def test_invariant_15__reschedule__moves_every_channel__audited_old_and_new(story, revise, approver, approver2):
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at="2027-01-15T10:00", zone=AMSTERDAM)
    old = datetime.datetime(2027, 1, 15, 9, 0, tzinfo=datetime.UTC)

    assert reschedule(revision, by=approver2, publish_at="2027-01-16T18:30", zone="America/New_York")
    new = datetime.datetime(2027, 1, 16, 23, 30, tzinfo=datetime.UTC)
    operations = publishes(revision)
    assert [(op.scheduled_for, op.next_attempt_at, op.status) for op in operations] == [(new, new, "pending")] * 2
    assert all(op.deadline > new for op in operations)  # the deadline runs from the new T
    schedule = get_revision_schedule(revision)
    assert (schedule.publish_at, schedule.zone) == (new, "America/New_York")
    event = AuditEvent.objects.get(event_type="revision.rescheduled")
    assert (event.actor, event.subject_id) == (approver2, f"{story.public_id}/revision-1")
    assert event.old_state == {"publish_at": old.isoformat(), "zone": AMSTERDAM}
    assert event.new_state["publish_at"] == new.isoformat()
    assert event.new_state["channels"] == CHANNELS

    # The same time again changes nothing and writes nothing.
    count = AuditEvent.objects.count()
    assert not reschedule(revision, by=approver2, publish_at="2027-01-16T18:30", zone="America/New_York")
    assert AuditEvent.objects.count() == count


def test_invariant_15__reschedule__by_the_author_or_an_editor__refused(story, revise, approver, editor, make_user):
    from publishing.roles import Role

    both = make_user("edna", Role.EDITOR, Role.APPROVER)
    revision = revise(story, BODY, by=both)
    approve(revision, by=approver, publish_at=in_minutes(60), zone="UTC")

    refused(lambda: reschedule(revision, by=editor, publish_at=in_minutes(90)), PermissionRefused, "Approvers")
    refused(lambda: reschedule(revision, by=both, publish_at=in_minutes(5)), SelfApproval, "you cannot reschedule")


def test_invariant_15__reschedule_or_cancel_after_the_claim_took_one_channel__refused_whole(
    story, revise, approver, approver2
):
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=in_minutes(60), zone=AMSTERDAM)
    pass_time(revision, minutes=0.1)
    web = Operation.objects.get(kind=PUBLISH, channel="web")
    # One claim of web's publish only: the other channel's is still unclaimed.
    (claimed,) = claim_operations(worker_id="w-web", limit=1, kinds=[PUBLISH])
    assert claimed.operation_id == web.id

    refused(
        lambda: reschedule(revision, by=approver2, publish_at=in_minutes(120)),
        ScheduleFired,
        r"already fired on web at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d CE",
    )
    refused(lambda: cancel(revision, by=approver2), ScheduleFired, "already fired on web")
    assert get_schedule(story).state == ScheduleState.FIRED


def test_invariant_15__reschedule_racing_the_claim__exactly_one_of_the_two_outcomes(story, revise, approver, approver2):
    """Reschedule (to an hour later) and a worker's claim of the due publishes, at the same moment on two
    connections: either the claim took them (the reschedule refused, nothing moved) or the reschedule moved
    them all (the claim got none) — never both times, never neither."""
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=in_minutes(60), zone="UTC")
    for round_number in range(4):
        pass_time(revision, minutes=1)
        later = in_minutes(60)
        (moved, claimed) = run_together(
            lambda later=later: check_reschedule_publication(
                story.public_id, revision_number=1, publish_at=later, zone="UTC", acting_user=approver2
            ),
            lambda worker=f"w-race-{round_number}": claim_operations(worker_id=worker, limit=10, kinds=[PUBLISH]),
        )
        assert claimed[0] == "ok"
        statuses = sorted(op.status for op in publishes(revision))
        if moved[0] == "ok":
            assert claimed[1] == []
            assert statuses == ["pending", "pending"]
            assert all(op.scheduled_for > database_now() for op in publishes(revision))
        else:
            assert isinstance(moved[1], ScheduleFired), moved[1]
            assert len(claimed[1]) >= 1
            assert "running" in statuses
            return  # fired: nothing more can race
    # Every round the reschedule won (its lock taken first); the last one leaves them pending for later.
    assert sorted(op.status for op in publishes(revision)) == ["pending", "pending"]


# --- cancel ----------------------------------------------------------------------------------------------


def test_invariant_15__cancel__every_channel_cancelled__audited__nothing_ever_sent(
    targets, story, revise, approver, approver2
):
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=in_minutes(60), zone=AMSTERDAM)
    refused(lambda: cancel(revision, by=approver2, reason="  "), InvalidInput, "Reason")

    assert cancel(revision, by=approver2)
    assert not cancel(revision, by=approver2)  # cancelled already: nothing more written

    assert [op.status for op in publishes(revision)] == ["cancelled", "cancelled"]
    assert Brief.objects.get(pk=story.pk).status == Brief.Status.CHANGES_REQUESTED
    schedule = get_schedule(story)
    assert (schedule.state, schedule.cancelled_by, schedule.cancel_reason) == (
        ScheduleState.CANCELLED,
        approver2.username,
        "Embargo lifted by the source: hold it.",
    )
    event = AuditEvent.objects.get(event_type="revision.schedule_cancelled")
    assert event.old_state["status"] == "approved" and event.new_state["status"] == "changes_requested"
    assert event.new_state["reason"] == "Embargo lifted by the source: hold it."
    pass_time(revision, minutes=90)
    assert run_worker() == {}
    assert ledgers(targets) == {"partner-feed": [], "web": []}
    refused(lambda: reschedule(revision, by=approver2, publish_at=in_minutes(5)), DecisionAlreadyMade, "cancelled")

    # Published after all: a new revision (identical text is no new revision), approved again.
    second = revise(story, BODY + " The port is closed.")
    assert second.number == 2
    approve(second, by=approver)
    assert run_worker() == {"succeeded": 2}
    assert ledgers(targets) == {"partner-feed": [2], "web": [2]}


def test_cancel__database__a_cancelled_schedule_is_final(story, revise, approver, approver2):
    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at=in_minutes(60), zone="UTC")
    cancel(revision, by=approver2)
    schedule = PublicationSchedule.objects.get()
    for change in (
        lambda: PublicationSchedule.objects.filter(pk=schedule.pk).update(publish_at=schedule.publish_at),
        lambda: PublicationSchedule.objects.filter(pk=schedule.pk).delete(),
    ):
        with pytest.raises(ProgrammingError, match="publication schedule"), transaction.atomic():
            change()


# --- a newer revision, and the policy --------------------------------------------------------------------


def test_invariant_4__older_revisions_schedule_never_fires_after_a_newer_one_was_published(
    targets, story, revise, approver, approver2
):
    first = revise(story, BODY)
    approve(first, by=approver, publish_at=in_minutes(60), zone=AMSTERDAM)
    second = revise(story, "Dockers walked out at dawn; the port is closed.")
    approve(second, by=approver2)  # now: the newest approval wins, on every channel

    assert [op.status for op in publishes(first)] == ["superseded", "superseded"]
    assert get_revision_schedule(first).state == ScheduleState.SUPERSEDED
    assert run_worker() == {"succeeded": 2}
    # T of revision 1 comes and goes: it never fires.
    pass_time(first, minutes=90)
    assert run_worker() == {}
    assert ledgers(targets) == {"partner-feed": [2], "web": [2]}
    refused(lambda: reschedule(first, by=approver2, publish_at=in_minutes(5)), DecisionAlreadyMade, "no longer applies")


def test_invariant_4__newer_revision_scheduled_later__supersedes_the_waiting_older_one(
    targets, story, revise, approver, approver2
):
    first = revise(story, BODY)
    approve(first, by=approver, publish_at=in_minutes(30), zone="UTC")
    second = revise(story, "Dockers walked out at dawn; the port is closed.")
    approve(second, by=approver2, publish_at=in_minutes(60), zone="UTC")

    assert [op.status for op in publishes(first)] == ["superseded", "superseded"]
    assert get_schedule(story).revision == 2
    pass_time(first, minutes=1)
    pass_time(second, minutes=1)
    assert run_worker() == {"succeeded": 2}
    assert ledgers(targets) == {"partner-feed": [2], "web": [2]}


@pytest.fixture
def two_approvals_desk(targets, editor) -> Brief:
    desk = Desk.objects.create(slug="politics", name="Politics", approvals_required=2)
    return check_create_brief(title="Harbour strike", source_material=BODY, desk=desk.slug, acting_user=editor)


def test_invariant_17__the_completing_approval_decides_t__earlier_and_later_times_only_audited(
    two_approvals_desk, revise, approver, approver2, make_user
):
    from publishing.roles import Role

    revision = revise(two_approvals_desk, BODY)
    approve(revision, by=approver, publish_at="2027-01-15T10:00", zone=AMSTERDAM)
    assert publishes(revision) == [] and not PublicationSchedule.objects.exists()

    approve(revision, by=approver2, publish_at="2027-02-01T07:00", zone="UTC")
    chosen = datetime.datetime(2027, 2, 1, 7, 0, tzinfo=datetime.UTC)
    assert [op.scheduled_for for op in publishes(revision)] == [chosen, chosen]
    first, second = AuditEvent.objects.filter(event_type="revision.approved").order_by("id")
    assert (first.new_state["completes_policy"], first.new_state["zone"]) == (False, AMSTERDAM)
    assert (second.new_state["completes_policy"], second.new_state["zone"]) == (True, "UTC")

    # An approval after completion is recorded and changes no time and writes no intent.
    approve(revision, by=make_user("ada", Role.APPROVER), publish_at=in_minutes(5), zone="UTC")
    assert [op.scheduled_for for op in publishes(revision)] == [chosen, chosen]
    assert PublicationSchedule.objects.get().publish_at == chosen


def test_invariant_17__earlier_approval_at_t__completing_approval_now__publishes_now(
    targets, two_approvals_desk, revise, approver, approver2
):
    revision = revise(two_approvals_desk, BODY)
    approve(revision, by=approver, publish_at=in_minutes(60), zone="UTC")
    approve(revision, by=approver2)

    assert [op.scheduled_for for op in publishes(revision)] == [None, None]
    assert get_revision_schedule(revision) is None
    assert run_worker() == {"succeeded": 2}
    assert ledgers(targets) == {"partner-feed": [1], "web": [1]}


def test_invariant_15__also_publish_while_embargoed__the_added_channel_waits_for_the_same_t(
    story, revise, approver, approver2, add_channel
):
    from approvals.actions import check_also_publish

    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at="2027-01-15T10:00", zone=AMSTERDAM)
    add_channel("app", is_default=False)
    with transaction.atomic(durable=True):
        assert check_also_publish(story.public_id, revision_number=1, channel="app", acting_user=approver2)

    t = datetime.datetime(2027, 1, 15, 9, 0, tzinfo=datetime.UTC)
    assert [(op.channel, op.scheduled_for) for op in publishes(revision)] == [
        ("app", t),
        ("partner-feed", t),
        ("web", t),
    ]
    assert claim_operations(worker_id="w-early", limit=10, kinds=[PUBLISH]) == []
    # A reschedule moves the added channel with the others.
    assert reschedule(revision, by=approver2, publish_at="2027-01-16T10:00", zone=AMSTERDAM)
    assert {op.scheduled_for for op in publishes(revision)} == {t + datetime.timedelta(days=1)}


def test_invariant_15__an_operator_cancelled_one_channel__reschedule_moves_the_others(
    story, revise, approver, approver2, operator
):
    from workers.actions.operator import do_cancel_operation

    revision = revise(story, BODY)
    approve(revision, by=approver, publish_at="2027-01-15T10:00", zone=AMSTERDAM)
    web = Operation.objects.get(kind=PUBLISH, channel="web")
    with transaction.atomic(durable=True):
        do_cancel_operation(web, reason="web is being retired", acting_user=operator)

    assert reschedule(revision, by=approver2, publish_at="2027-01-16T10:00", zone=AMSTERDAM)
    moved = datetime.datetime(2027, 1, 16, 9, 0, tzinfo=datetime.UTC)
    assert [(op.channel, op.status, op.scheduled_for) for op in publishes(revision)] == [
        ("partner-feed", "pending", moved),
        ("web", "cancelled", datetime.datetime(2027, 1, 15, 9, 0, tzinfo=datetime.UTC)),
    ]
    assert get_revision_schedule(revision).state == ScheduleState.WAITING
