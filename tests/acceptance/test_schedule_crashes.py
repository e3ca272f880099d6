"""docs/invariants.md#i15 with real processes: a schedule's T survives a worker killed on either side of the
claim, and workers stopped across T (docs/schedules.md#lateness).

Each test approves one revision to two channels for T a few seconds ahead, through check_decide_revision's
`publish_at` as the approval view calls it: `web` is a reference target process of its own (the settings'
target), `partner-feed` a reference target served from a thread of this process (real HTTP; the workers are
other processes). Then a `run_worker` process dies, or stops, around T, and a fresh one finishes:

- killed at T before it claimed (crash point `due_before_claim`: its own timer woke it for T, it had not
  claimed yet), or killed right after it claimed a channel's publish at T, before sending (`after_claim`);
- stopped (SIGTERM) before T, started again three sweep periods after it.

What must hold at the end, per channel: one application at its target (the ledger), at or after T; every
attempt of the publish started at or after T, on the database clock, which the target shares (the same
host); the publish succeeded and verified (in its attempt or by its verify operation), nothing unfinished;
and the schedule's firing recorded with its lateness (fired_at - T, PostgreSQL's timestamps). Missed time
is one firing per channel, never several.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from approvals.schedules import database_now
from approvals.selectors import ScheduleState, get_revision_schedule
from publishing.identities import (
    PRIMARY_CHANNEL,
    PUBLISH,
    SCHEDULE_OVERDUE,
    publish_key,
    schedule_overdue_key,
    verify_key,
)
from publishing.models import Brief, Publication, Revision
from publishing.tasks import alert_overdue_schedules
from tests.acceptance.test_crash_points import (
    CRASH_EXIT_CODE,
    LEASE_SECONDS,
    TIMEOUT_SECONDS,
    Target,
    assert_attempts_end_in_one_success,
    assert_verified,
    worker_env,
    write_revision,
)
from tests.acceptance.test_crash_points import start_target as start_target_process  # noqa: F401  (a fixture)
from tests.approvals.test_schedules import approve
from tests.processes import Child, run_worker, stop, wait_until
from workers.models import Attempt, AuditEvent, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PARTNER = "partner-feed"
CHANNELS = (PRIMARY_CHANNEL, PARTNER)
# T is this far ahead of the database's now when the approval starts: long enough for the approval to commit
# and a worker already running to see it as waiting (and a loaded machine's SIGTERM to land before it), short
# for the suite. At a load average of 15 on two cores an approval once took 5 s, T passed before the worker
# had seen it waiting, and its first look claimed it.
AHEAD_SECONDS = 15
# Workers stopped across T stay down this many sweep periods past it (GALLEY_SWEEP_SECONDS, their poll).
SWEEP_SECONDS = 1
MISSED_SWEEPS = 3


@pytest.fixture
def web(request: pytest.FixtureRequest) -> Target:
    """The channel `web` (the settings' target): a reference target process of its own."""
    return request.getfixturevalue("start_target_process")()


def approve_at(revision: Revision, approver: Any, *, seconds_ahead: float) -> datetime.datetime:
    """Approve `revision` to publish `seconds_ahead` seconds after the database's now; returns that T."""
    t = database_now() + datetime.timedelta(seconds=seconds_ahead)
    approve(revision, by=approver, publish_at=t.isoformat(), zone="Europe/Amsterdam")
    publishes = Operation.objects.filter(kind=PUBLISH)
    assert sorted(publishes.values_list("channel", "scheduled_for")) == [(slug, t) for slug in sorted(CHANNELS)]
    return t


def long_running_worker(spawn: Callable[..., Child], name: str, env: dict[str, str]) -> Child:
    """A `run_worker` child that serves until stopped (not --until-idle), once it has said it started."""
    child = spawn(name, "run_worker", "--worker-id", name, "--poll", "0.2", env=env)
    child.wait_for_output(f"worker {name} started")
    return child


def first_attempt(channel: str) -> Attempt:
    return Attempt.objects.filter(operation__kind=PUBLISH, operation__channel=channel).earliest("number")


def assert_one_claim_each(worker_id: str) -> None:
    """Every channel's publish was claimed once, by `worker_id`, and succeeded: nothing was taken over."""
    for slug in CHANNELS:
        publish = Operation.objects.get(kind=PUBLISH, channel=slug)
        attempts = Attempt.objects.filter(operation=publish).values_list("worker_id", "outcome")
        assert list(attempts) == [(worker_id, "succeeded")], slug


def seconds(lateness: dict[str, datetime.timedelta]) -> dict[str, float]:
    return {slug: round(late.total_seconds(), 3) for slug, late in lateness.items()}


def applied_at(row: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(row["applied_at"])


def assert_fired_once_per_channel_at_or_after_t(
    revision: Revision, t: datetime.datetime, ledgers: dict[str, list[dict[str, Any]]]
) -> dict[str, datetime.timedelta]:
    """Per channel: one application, at or after T, by the approved revision under the channel's key; every
    attempt of its publish started at or after T; the publish succeeded and verified; the schedule says fired,
    with each channel's firing (its first attempt's start) and lateness. Returns the lateness per channel."""
    public_id = revision.brief.public_id
    for slug in CHANNELS:
        rows = ledgers[slug]
        assert [(row["operation_key"], row["revision"]) for row in rows] == [
            (publish_key(public_id, revision.number, slug), revision.number)
        ], slug
        assert applied_at(rows[0]) >= t, (slug, rows[0]["applied_at"], t)
        publish = Operation.objects.get(kind=PUBLISH, channel=slug)
        assert publish.status == "succeeded", slug
        assert_verified(publish, verify_key(public_id, revision.number, slug))
        starts = list(Attempt.objects.filter(operation=publish).values_list("started_at", flat=True))
        assert starts and min(starts) >= t, (slug, starts, t)
        assert_attempts_end_in_one_success(publish.key)
        assert Publication.objects.get(revision=revision, channel__slug=slug).verified_at is not None
    assert list(Operation.objects.unfinished().values_list("key", "status")) == []
    assert not Attempt.objects.filter(finished_at__isnull=True).exists()
    brief = Brief.objects.get(public_id=public_id)
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, revision.number)

    schedule = get_revision_schedule(revision)
    assert schedule is not None and schedule.publish_at == t and schedule.state == ScheduleState.FIRED
    lateness = {}
    for firing in schedule.channels:
        assert firing.scheduled_for == t, firing
        assert firing.fired_at == first_attempt(firing.channel).started_at, firing
        assert firing.lateness == firing.fired_at - t >= datetime.timedelta(0), firing
        lateness[firing.channel] = firing.lateness
    assert sorted(lateness) == sorted(CHANNELS)
    return lateness


def ledgers_of(web: Target, partner: Any) -> dict[str, list[dict[str, Any]]]:
    return {PRIMARY_CHANNEL: web.applications(), PARTNER: partner.ledger()}


def test_i15__worker_killed_at_t_before_its_claim__fresh_worker_fires_once_per_channel_at_or_after_t(
    web, add_channel, spawn, editor, approver
):
    partner = add_channel(PARTNER)
    revision = write_revision(editor)
    crashy = long_running_worker(spawn, "crashy", worker_env(web, crash_point="due_before_claim"))
    t = approve_at(revision, approver, seconds_ahead=AHEAD_SECONDS)

    # Its own timer woke it for T; it died before its claim: nothing claimed, nothing sent.
    assert crashy.wait(timeout=120) == CRASH_EXIT_CODE, crashy.output()
    assert "crash point due_before_claim reached" in crashy.output()
    assert database_now() >= t
    assert not Attempt.objects.exists()
    assert set(Operation.objects.filter(kind=PUBLISH).values_list("status", flat=True)) == {"pending"}
    assert ledgers_of(web, partner) == {PRIMARY_CHANNEL: [], PARTNER: []}

    fresh = run_worker(spawn, "fresh", env=worker_env(web))
    assert fresh.wait(timeout=120) == 0, fresh.output()
    lateness = assert_fired_once_per_channel_at_or_after_t(revision, t, ledgers_of(web, partner))
    assert_one_claim_each("fresh")  # nothing to take over
    print(f"lateness after a kill before the claim: {seconds(lateness)}")


def test_i15__worker_killed_after_claiming_at_t_before_sending__fresh_worker_fires_once_per_channel(
    web, add_channel, spawn, editor, approver
):
    partner = add_channel(PARTNER)
    revision = write_revision(editor)
    env = worker_env(web, crash_point="after_claim", lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS)
    crashy = long_running_worker(spawn, "crashy", env)
    t = approve_at(revision, approver, seconds_ahead=AHEAD_SECONDS)

    # It claimed a channel's publish at T (maybe both: its threads claim concurrently) and died before sending.
    assert crashy.wait(timeout=120) == CRASH_EXIT_CODE, crashy.output()
    assert "crash point after_claim reached" in crashy.output()
    assert ledgers_of(web, partner) == {PRIMARY_CHANNEL: [], PARTNER: []}
    interrupted = list(Attempt.objects.filter(finished_at__isnull=True))
    assert interrupted and {attempt.worker_id for attempt in interrupted} == {"crashy"}
    assert all(attempt.started_at >= t for attempt in interrupted), ([a.started_at for a in interrupted], t)

    # The fresh worker takes each claimed publish over once its lease has run out, and claims the other.
    fresh = run_worker(spawn, "fresh", env=worker_env(web))
    assert fresh.wait(timeout=120) == 0, fresh.output()
    lateness = assert_fired_once_per_channel_at_or_after_t(revision, t, ledgers_of(web, partner))
    for attempt in interrupted:  # closed as lease_expired by the claim that took it over
        attempt.refresh_from_db()
        assert (attempt.outcome, attempt.error_kind) == ("", "lease_expired")
    # The firing is the first claim, the crashed one's where it claimed: its lateness says so.
    schedule = get_revision_schedule(revision)
    assert schedule is not None
    crashed_channels = {Operation.objects.get(id=attempt.operation_id).channel for attempt in interrupted}
    for firing in schedule.channels:
        if firing.channel in crashed_channels:
            first = first_attempt(firing.channel)
            assert first.worker_id == "crashy", firing
    print(f"lateness after a kill after the claim: {seconds(lateness)}")


def test_i15__workers_stopped_across_t_for_three_sweeps__one_publication_per_channel__lateness_recorded(
    web, add_channel, spawn, editor, approver, settings
):
    partner = add_channel(PARTNER)
    revision = write_revision(editor)
    sweeping = worker_env(web, GALLEY_SWEEP_SECONDS=str(SWEEP_SECONDS))
    before = spawn("before", "run_worker", "--worker-id", "before", env=sweeping)
    before.wait_for_output("worker before started")
    t = approve_at(revision, approver, seconds_ahead=AHEAD_SECONDS)
    assert stop(before.process) == 0, before.output()  # SIGTERM: it ends its loop, holding nothing
    assert not Attempt.objects.exists(), "the worker claimed before it was stopped (a machine slower than T)"

    # Down across T and for three sweep periods after it: nothing claims it meanwhile.
    missed = datetime.timedelta(seconds=MISSED_SWEEPS * SWEEP_SECONDS)
    wait_until(lambda: database_now() >= t + missed, timeout=60, what="three sweep periods past T")
    assert not Attempt.objects.exists()
    assert ledgers_of(web, partner) == {PRIMARY_CHANNEL: [], PARTNER: []}
    # The minute's overdue sweep, run once per missed tick while the workers are down: one alert per
    # channel's schedule, however many ticks found it overdue (docs/operations.md#overdue-schedules).
    settings.GALLEY_SCHEDULE_LATENESS_SECONDS = 1
    assert [alert_overdue_schedules() for _tick in range(MISSED_SWEEPS)] == [2] + [0] * (MISSED_SWEEPS - 1)
    alerts = Operation.objects.filter(kind=SCHEDULE_OVERDUE)
    assert sorted(alerts.values_list("key", flat=True)) == sorted(
        schedule_overdue_key(publish_key(revision.brief.public_id, revision.number, channel))
        for channel in (PRIMARY_CHANNEL, PARTNER)
    )
    assert AuditEvent.objects.filter(event_type="schedule.overdue").count() == 2

    after = spawn("after", "run_worker", "--until-idle", "--worker-id", "after", env=sweeping)
    assert after.wait(timeout=120) == 0, after.output()
    lateness = assert_fired_once_per_channel_at_or_after_t(revision, t, ledgers_of(web, partner))
    # One firing per channel, however many sweeps it missed, and its lateness covers the downtime.
    assert_one_claim_each("after")
    assert all(late >= missed for late in lateness.values()), lateness
    # The worker that came back also ran the alerts, each once.
    assert sorted(alerts.values_list("status", flat=True)) == ["succeeded", "succeeded"]
    assert alert_overdue_schedules() == 0
    print(f"lateness after three missed sweeps: {seconds(lateness)}")
