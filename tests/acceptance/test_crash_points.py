"""Nothing lost (docs/invariants.md#i12): real processes die at named crash points, a fresh one finishes.

Each test writes a brief and a revision through the real actions, approves it (the approval and
its publish operation commit together), and runs a real worker process that dies at one point:
os._exit(137) at a named crash point (GALLEY_CRASH_POINT), or a SIGKILL from the test at a moment
it observes. A fresh worker without the crash point then runs until idle. The target's ledger
(one row per first application) must show the key applied exactly once, the publish must have
succeeded with a verification — observed in its own attempt (no verify operation) or by a verify
operation that succeeded after it (when the target's page came late: tests/late_pages.py) —, nothing
may be left unfinished, the brief must be published, and every attempt must be on record — the
crashed one closed as lease_expired by the claim that took the operation over.

Busy machines. Only the crashing worker's lease is short (the fresh worker waits it out); every
other process gets a lease and client timeouts no loaded CPU overruns. A slow machine may still
add attempts a fast one would not make (a lease that ran out, an answer later than the client's
timeout), so attempt histories are checked as invariants: the expected attempts in order, the one
success last, anything else only such an interruption.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import transaction
from django.utils import timezone
from django_q.models import OrmQ

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.identities import publish_key, verify_key
from publishing.models import Brief, Publication, Revision
from tests.late_pages import serve_pages_late
from tests.processes import (
    Child,
    child_database_url,
    free_port,
    kill,
    process_env,
    run_worker,
    start,
    wait_for_http,
    wait_until,
)
from workers.doorbell import ring_cluster
from workers.models import Attempt, AuditEvent, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

TOKEN = "recovery-test-token"
CRASH_EXIT_CODE = 137
# The crashing worker's lease is short so a fresh worker takes over within seconds; its client timeout
# stays under lease / 2.5 as settings require, yet far above what a local target needs on a loaded
# CPU (a timeout there would make the next try an adopting look-up that never reaches the crash point).
LEASE_SECONDS = 6
TIMEOUT_SECONDS = 2
# Every other process (the fresh worker, the clusters): nobody waits these out, so no loaded CPU
# should overrun them.
SAFE_LEASE_SECONDS = 30
SAFE_TIMEOUT_SECONDS = 5


# --- processes -------------------------------------------------------------------------------


@dataclass
class Target:
    url: str
    child: Child

    def applications(self) -> list[dict[str, Any]]:
        """The target's ledger: one row per first application of a key."""
        response = httpx.get(f"{self.url}/_ledger", timeout=5)
        assert response.status_code == 200
        return response.json()["applications"]

    def held(self, key: str) -> dict[str, Any]:
        response = httpx.get(
            f"{self.url}/v1/publications",
            params={"operation_key": key},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=5,
        )
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def start_target(tmp_path: Path) -> Iterator[Callable[..., Target]]:
    """start_target(*fault_args): the reference target as its own process, on a free port, with its own SQLite."""
    children: list[Child] = []

    def start_one(*fault_args: str, late_pages: int = 0) -> Target:
        port = free_port()
        log = tmp_path / "target.log"
        # A target whose pages come late (a CMS's cache) is the reference target behind tests.late_pages.
        server = (
            ["-m", "tests.late_pages", "--late-pages", str(late_pages)]
            if late_pages
            else ["-m", "galley.reference_target"]
        )
        argv = [*server, "--port", str(port), "--db", str(tmp_path / "target.sqlite3")]
        process = start([*argv, f"--token={TOKEN}", *fault_args], env=process_env(), log=log)
        children.append(Child("target", process, log))
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/_health", process=process)
        return Target(url, children[-1])

    yield start_one
    for child in children:
        if child.process.poll() is None:
            kill(child.process)


def worker_env(
    target: Target,
    *,
    crash_point: str = "",
    lease: int = SAFE_LEASE_SECONDS,
    timeout: float = SAFE_TIMEOUT_SECONDS,
    **extra: str,
) -> dict[str, str]:
    """A child's environment: the test database, the target, a lease and timeouts no loaded CPU overruns
    unless given shorter ones, short backoff; no crash point unless named."""
    return process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_TARGET_URL=target.url,
        GALLEY_TARGET_TOKEN=TOKEN,
        GALLEY_LEASE_SECONDS=str(lease),
        GALLEY_TARGET_TIMEOUT_SECONDS=str(timeout),
        GALLEY_AI_TIMEOUT_SECONDS=str(timeout),  # settings also bound the AI timeout by the lease
        GALLEY_BACKOFF_BASE_SECONDS="0.2",
        GALLEY_BACKOFF_MAX_SECONDS="1",
        GALLEY_CRASH_POINT=crash_point,  # "" removes it: a fresh worker never inherits one
        **extra,
    )


# --- the editorial side, through the real actions ----------------------------------------------


def write_revision(editor: Any, *, title: str = "Harbour strike") -> Revision:
    with transaction.atomic(durable=True):
        # No source material, so no summary run: these tests count publishing's operations only.
        brief = check_create_brief(title=title, source_material="", acting_user=editor)
    with transaction.atomic(durable=True):
        revision, _created = check_create_revision(
            brief.public_id,
            base_number=0,
            title=title,
            body="Dockers walked out at dawn.\n\nThe port is closed until further notice.",
            acting_user=editor,
        )
    return revision


def approve(revision: Revision, approver: Any) -> None:
    """The approval and its publish operation, in one durable transaction; the doorbell rings on commit."""
    with transaction.atomic(durable=True):
        _approval, created = check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=approver,
        )
    assert created


# --- what must be true at the end --------------------------------------------------------------


def attempts_of(key: str) -> list[tuple[str, str, str]]:
    """(worker id, outcome, error kind) of every attempt of the operation `key`, in order."""
    return [
        (attempt.worker_id, attempt.outcome, attempt.error_kind)
        for attempt in Attempt.objects.filter(operation__key=key).order_by("number")
    ]


# Attempts a slow machine can legitimately add before an operation's success: a lease that ran out
# (closed by the claim that took over, or by the worker itself once it noticed), or a call that took
# longer than the client's timeout (the next attempt looks the key up first).
INTERRUPTED = {("", "lease_expired"), ("lease_lost", "lease_lost"), ("retry", "timeout")}


def assert_attempts(key: str, expected: list[tuple[str, str, str]]) -> None:
    """The attempts of `key` hold `expected` (the history on an idle machine) in order and end with its
    last entry, the one success; any other attempt is an interruption a slow machine can cause."""
    history = attempts_of(key)
    assert history and history[-1] == expected[-1], (history, expected)
    assert [outcome for _worker, outcome, _kind in history].count("succeeded") == 1, history
    rest = iter(history)
    assert all(entry in rest for entry in expected), (history, expected)  # a subsequence, in order
    extra = list(history)
    for entry in expected:
        extra.remove(entry)
    assert all((outcome, kind) in INTERRUPTED for _worker, outcome, kind in extra), (history, expected)
    numbers = list(Attempt.objects.filter(operation__key=key).order_by("number").values_list("number", flat=True))
    assert numbers == list(range(1, Operation.objects.get(key=key).attempts + 1)), history  # one per claim


def assert_verified(publish: Operation, verify_key: str) -> Operation | None:
    """A verification exists (docs/invariants.md#i5, #i10), inline or durable: the publish's own attempt
    observed it and wrote no verify operation, or the verify operation it wrote succeeded after it.
    Returns the verify operation, if any."""
    verify = Operation.objects.filter(key=verify_key).first()
    if publish.result["verified_inline"]:
        assert verify is None, (publish.key, verify)
        return None
    assert verify is not None and verify.status == Operation.Status.SUCCEEDED, (publish.key, verify)
    publication = Publication.objects.get(operation_key=publish.key)
    assert publication.verified_at is not None and publication.verified_at >= publish.finished_at, publish.key
    return verify


def assert_published_exactly_once(revision: Revision, target: Target) -> Operation:
    """The key applied once at the target, the publish succeeded and verified (inline or by its verify
    operation), nothing unfinished, brief published, every attempt closed with an outcome or an error
    kind. Returns the publish operation."""
    public_id = revision.brief.public_id
    key = publish_key(public_id, revision.number)
    assert [application["operation_key"] for application in target.applications()] == [key]

    publish = Operation.objects.get(key=key)
    assert publish.status == Operation.Status.SUCCEEDED
    assert_verified(publish, verify_key(public_id, revision.number))
    assert list(Operation.objects.unfinished().values_list("key", "status")) == []

    brief = Brief.objects.get(public_id=public_id)
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, revision.number)
    publication = Publication.objects.get(brief=brief)  # exactly one
    held = target.held(key)
    assert publication.external_id == publish.result["external_id"] == held["id"]
    assert publication.payload_hash == held["payload_hash"] == revision.payload_hash
    assert publication.verified_at is not None

    attempts = list(Attempt.objects.order_by("operation_id", "number"))
    assert attempts, "no attempt was recorded"
    for attempt in attempts:
        assert attempt.finished_at is not None, f"{attempt} was never closed"
        assert attempt.outcome or attempt.error_kind, f"{attempt} was closed without an outcome or error kind"
    return publish


# --- the matrix --------------------------------------------------------------------------------

CRASHED = ("crashy", "", "lease_expired")  # closed by the claim that took over: the worker died mid-try
BY_CRASHY = ("crashy", "succeeded", "")
BY_FRESH = ("fresh", "succeeded", "")


@dataclass(frozen=True)
class Crash:
    point: str  # GALLEY_CRASH_POINT for the first worker; "" when the test SIGKILLs it instead
    # Right after the crash: how many applications the ledger shows, and each operation's status.
    applied_before_recovery: int
    states_after_crash: dict[str, str]
    publish_attempts: list[tuple[str, str, str]]
    # None: the publish's own attempt verified, so no verify operation exists (the target answers at once).
    verify_attempts: list[tuple[str, str, str]] | None
    # The succeeded attempt's own request was the first application (else it adopted one).
    result_first_application: bool
    target_args: tuple[str, ...] = ()
    # How many times each article page answers 404 before it shows (a CMS's cache): the publish's own
    # attempt then cannot observe it, and a verify operation does.
    late_pages: int = 0
    kill_once_applied: bool = False
    lease: int = LEASE_SECONDS
    timeout: float = TIMEOUT_SECONDS
    # A lease too long to wait out (it must outlast a long client timeout): the test moves its expiry to a
    # past moment after the kill, as if it had run out.
    expire_lease_after_kill: bool = False


CRASHES = {
    # Claimed, nothing sent: the fresh worker looks the key up (ambiguous), finds nothing, sends, verifies.
    "after_claim": Crash(
        point="after_claim",
        applied_before_recovery=0,
        states_after_crash={"publish": "running"},
        publish_attempts=[CRASHED, BY_FRESH],
        verify_attempts=None,
        result_first_application=True,
    ),
    # The target committed and answered, the worker read the answer and died before reading it back.
    "after_target_response:publish": Crash(
        point="after_target_response:publish",
        applied_before_recovery=1,
        states_after_crash={"publish": "running"},
        publish_attempts=[CRASHED, BY_FRESH],
        verify_attempts=None,
        result_first_application=False,
    ),
    # The target committed but never answered (commit-then-hang): SIGKILL while the worker waits.
    # The client timeout must leave time to see the ledger row and kill before it gives up: 20 s, which
    # even a badly overloaded machine does not use up.
    "target_committed_response_unread": Crash(
        point="",
        applied_before_recovery=1,
        states_after_crash={"publish": "running"},
        publish_attempts=[CRASHED, BY_FRESH],
        verify_attempts=None,
        result_first_application=False,
        target_args=("--rate-hang", "1", "--hang-seconds", "30"),
        kill_once_applied=True,
        lease=60,
        timeout=20,
        expire_lease_after_kill=True,
    ),
    # Answered, read back and the page seen, died before the finalize: nothing recorded; the fresh
    # worker's attempt is ambiguous, adopts by key and reads back again.
    "before_finalize:publish": Crash(
        point="before_finalize:publish",
        applied_before_recovery=1,
        states_after_crash={"publish": "running"},
        publish_attempts=[CRASHED, BY_FRESH],
        verify_attempts=None,
        result_first_application=False,
    ),
    # Killed inside the finalize, the brief locked and the target's receipt recorded: PostgreSQL rolls the
    # finalize back as the session ends; the fresh worker's takeover (not counted) adopts what was applied.
    "in_finalize:publish": Crash(
        point="in_finalize:publish",
        applied_before_recovery=1,
        states_after_crash={"publish": "running"},
        publish_attempts=[CRASHED, BY_FRESH],
        verify_attempts=None,
        result_first_application=False,
    ),
    # The publication and its verification committed with the success: nothing is left to do.
    "after_finalize:publish": Crash(
        point="after_finalize:publish",
        applied_before_recovery=1,
        states_after_crash={"publish": "succeeded"},
        publish_attempts=[BY_CRASHY],
        verify_attempts=None,
        result_first_application=True,
    ),
    # The page came late: the publication and its verification intent committed with the success;
    # verification never ran.
    "after_finalize:publish, page late": Crash(
        point="after_finalize:publish",
        applied_before_recovery=1,
        states_after_crash={"publish": "succeeded", "verify": "pending"},
        publish_attempts=[BY_CRASHY],
        verify_attempts=[BY_FRESH],
        result_first_application=True,
        late_pages=1,
    ),
    # The page came late; the verify operation read back and observed, died before recording it: the
    # fresh worker verifies again.
    "before_finalize:verify, page late": Crash(
        point="before_finalize:verify",
        applied_before_recovery=1,
        states_after_crash={"publish": "succeeded", "verify": "running"},
        publish_attempts=[BY_CRASHY],
        verify_attempts=[CRASHED, BY_FRESH],
        result_first_application=True,
        late_pages=1,
    ),
}


def crash_a_worker(crash: Crash, target: Target, key: str, spawn: Callable[..., Child]) -> Child:
    """The worker `crashy`, dead at `crash`: exited at its crash point, or SIGKILLed by the test once
    `target` applied the publish `key` (its attempt then never recorded an outcome)."""
    crashy = run_worker(
        spawn, "crashy", env=worker_env(target, crash_point=crash.point, lease=crash.lease, timeout=crash.timeout)
    )
    if crash.kill_once_applied:
        wait_until(lambda: target.applications(), timeout=120, what="the target's first application")
        assert crashy.process.poll() is None, f"the worker stopped waiting too early\n{crashy.output()}"
        kill(crashy.process)
        assert crashy.process.returncode == -9
        assert Attempt.objects.get(operation__key=key).finished_at is None  # killed inside the call
    else:
        assert crashy.wait(timeout=120) == CRASH_EXIT_CODE, crashy.output()
        assert f"crash point {crash.point} reached" in crashy.output()
    return crashy


@pytest.mark.parametrize("name", list(CRASHES))
def test_nothing_lost__crash_at_point__fresh_worker_finishes_exactly_once(
    name: str, start_target, spawn, editor, approver
):
    crash = CRASHES[name]
    target = start_target(*crash.target_args, late_pages=crash.late_pages)
    revision = write_revision(editor)
    approve(revision, approver)
    public_id = revision.brief.public_id
    key = publish_key(public_id, revision.number)
    keys = {"publish": key, "verify": verify_key(public_id, revision.number)}

    crashy = crash_a_worker(crash, target, key, spawn)
    assert len(target.applications()) == crash.applied_before_recovery
    states = {kind: Operation.objects.get(key=keys[kind]).status for kind in crash.states_after_crash}
    # A worker dying right after a commit may have claimed the operation that commit made due in the
    # instant before its crash point (its drain loop claims while a handler runs, and a slow handler
    # makes that likelier): that operation is then running under the dead worker's lease, nothing done.
    claimed_in_passing = [
        kind for kind, state in crash.states_after_crash.items() if state == "pending" and states[kind] == "running"
    ]
    assert states == {**crash.states_after_crash, **dict.fromkeys(claimed_in_passing, "running")}
    # The attempts the crash interrupted: each the only open one of its operation, the crashed worker's latest.
    interrupted = list(Attempt.objects.filter(operation__key__in=keys.values(), finished_at__isnull=True))
    assert [(a.worker_id, a.number) for a in interrupted] == [
        ("crashy", Operation.objects.get(id=a.operation_id).attempts) for a in interrupted
    ]
    assert len(interrupted) == list(states.values()).count("running")
    if crash.expire_lease_after_kill:
        for attempt in interrupted:  # any past moment will do: the attempt began before the kill
            Operation.objects.filter(id=attempt.operation_id, lease_owner="crashy").update(
                lease_expires_at=attempt.started_at
            )

    fresh = run_worker(spawn, "fresh", env=worker_env(target))
    assert fresh.wait(timeout=120) == 0, fresh.output()

    publish = assert_published_exactly_once(revision, target)
    assert_attempts(keys["publish"], crash.publish_attempts)
    if crash.verify_attempts is None:
        assert publish.result["verified_inline"] is True  # and no verify operation: assert_published_exactly_once
    else:
        assert_attempts(keys["verify"], crash.verify_attempts)
    for attempt in interrupted:  # closed as lease_expired by the claim that took it over
        attempt.refresh_from_db()
        assert (attempt.outcome, attempt.error_kind) == ("", "lease_expired")
    assert publish.result["first_application"] is crash.result_first_application
    if crash.publish_attempts[-1] == BY_FRESH:
        # The crashed attempt may have had its effect: the fresh one looked the key up first,
        # and adopted what the target held instead of sending again.
        assert Attempt.objects.filter(operation__key=key, worker_id="fresh").order_by("number").first().ambiguous
        adopted = "adopting the target's existing publication" in fresh.output()
        assert adopted is not crash.result_first_application, fresh.output()
    assert not crashy.output().count("Traceback"), crashy.output()


# --- before the queue's acknowledgement (django-q2) ---------------------------------------------

CLUSTER_SETTINGS = {
    "GALLEY_Q_WORKERS": "1",
    # Short drains and sweeps, so a crash after the drain comes quickly and a sweep never blocks the worker.
    "GALLEY_DRAIN_IDLE_WAIT_SECONDS": "0.5",
    "GALLEY_SWEEP_DURATION_SECONDS": "1",
    "GALLEY_SWEEP_SECONDS": "0.5",
}


def test_nothing_lost__crash_before_ack__redelivered_doorbell_publishes_nothing_twice(
    start_target, spawn, editor, approver
):
    """qcluster's worker drains, then dies before django-q2 acknowledges the doorbell task.

    django-q2 respawns the worker, so the cluster lives on (and every later drain dies the same
    way); the test kills the whole cluster. The doorbell stays in the broker, taken but never
    acknowledged; when it is redelivered to a fresh cluster its drain finds nothing to do.
    """
    target = start_target()
    revision = write_revision(editor)
    crashing = spawn("cluster-crashy", "qcluster", env=worker_env(target, crash_point="before_ack", **CLUSTER_SETTINGS))
    crashing.wait_for_output("running.")
    approve(revision, approver)  # rings the doorbell: the worker process's drain service hears it (LISTEN)
    # And a django-q2 doorbell task, as the sweep rings for work due: a task in its ORM queue, whose
    # drain (it waits for the worker process's drain service) ends before the crash.
    ring_cluster()

    crashing.wait_for_output("crash point before_ack reached")
    crashing.wait_for_output("reincarnated worker")  # django-q2 replaced the dead worker process
    kill(crashing.process)  # the whole cluster: sentinel, pusher, monitor, workers

    # The drain had finished before the crash; the doorbell was taken and never acknowledged.
    assert [application["operation_key"] for application in target.applications()] == [
        publish_key(revision.brief.public_id, revision.number)
    ]
    unacknowledged = OrmQ.objects.filter(lock__gt=timezone.now())
    assert unacknowledged.exists()
    attempts_before_redelivery = list(Attempt.objects.order_by("id").values_list("id", flat=True))

    # As if django-q2's retry period had passed: the broker redelivers to a fresh cluster.
    unacknowledged.update(lock=timezone.now())
    fresh_cluster = spawn("cluster-fresh", "qcluster", env=worker_env(target, **CLUSTER_SETTINGS))
    fresh_cluster.wait_for_output("running.")
    wait_until(lambda: not OrmQ.objects.exists(), timeout=30, what="acknowledging every redelivered doorbell")
    # django-q2 stops gracefully on SIGTERM to its main process (the group would kill the pool outright).
    fresh_cluster.process.send_signal(signal.SIGTERM)
    assert fresh_cluster.wait(timeout=20) == 0, fresh_cluster.output()
    assert "crash point" not in fresh_cluster.output()

    fresh = run_worker(spawn, "fresh", env=worker_env(target))
    assert fresh.wait() == 0, fresh.output()
    assert_published_exactly_once(revision, target)
    # Publish and verify succeeded once each, in the crashed cluster's drain before it died (a slow
    # machine may add an interrupted attempt there); nothing attempted anything after the crash.
    assert list(Attempt.objects.order_by("id").values_list("id", flat=True)) == attempts_before_redelivery
    for operation in Operation.objects.all():
        outcomes = [(a.outcome, a.error_kind) for a in Attempt.objects.filter(operation=operation).order_by("number")]
        assert outcomes[-1] == ("succeeded", "") and set(outcomes[:-1]) <= INTERRUPTED, outcomes
    assert not Attempt.objects.filter(worker_id="fresh").exists()


# --- inside the approval's transaction ----------------------------------------------------------

APPROVE_THEN_DIE = """
import os
from django.contrib.auth import get_user_model
from django.db import transaction
from approvals.actions import check_decide_revision
from workers.models import Operation

approver = get_user_model().objects.get(username={approver!r})
with transaction.atomic(durable=True):
    approval, created = check_decide_revision(
        {public_id!r}, revision_number={number!r}, payload_hash={payload_hash!r}, decision="approved",
        acting_user=approver,
    )
    assert created and Operation.objects.filter(key={key!r}).exists()
    print("approved and enqueued inside the transaction; dying before it ends", flush=True)
    os._exit(137)
"""


def test_nothing_lost__crash_inside_the_approval_transaction__nothing_half_written__approving_again_publishes_once(
    start_target, spawn, editor, approver
):
    target = start_target()
    revision = write_revision(editor)
    public_id = revision.brief.public_id
    key = publish_key(public_id, revision.number)
    script = APPROVE_THEN_DIE.format(
        approver=approver.username,
        public_id=public_id,
        number=revision.number,
        payload_hash=revision.payload_hash,
        key=key,
    )
    dying = spawn("approver", "shell", "--no-imports", "-c", script, env=worker_env(target))
    assert dying.wait() == CRASH_EXIT_CODE, dying.output()
    assert "approved and enqueued inside the transaction" in dying.output()

    # Neither half of the transaction survived, and no doorbell rang for it.
    assert not Approval.objects.exists()
    assert not Operation.objects.exists()
    assert not AuditEvent.objects.filter(event_type="revision.approved").exists()
    assert not OrmQ.objects.exists()
    assert Brief.objects.get(public_id=public_id).status == Brief.Status.IN_REVIEW

    approve(revision, approver)
    assert Approval.objects.count() == 1
    fresh = run_worker(spawn, "fresh", env=worker_env(target))
    assert fresh.wait() == 0, fresh.output()
    assert_published_exactly_once(revision, target)
    assert_attempts(key, [BY_FRESH])


# --- the matrix with three channels (docs/invariants.md#i14) --------------------------------------

EXTRA_CHANNELS = ("partner-feed", "app")


@pytest.mark.parametrize("name", list(CRASHES))
def test_nothing_lost__three_channels__crash_at_point__every_channel_applied_once_and_verified(
    name: str, start_target, add_channel, spawn, editor, approver
):
    """The whole matrix again with one approval fanned out to three channels: `web` (the settings' target,
    its own process, with the crash's faults) and two more reference targets served from threads of this
    process (real HTTP; the workers are other processes). The crashing worker runs the three publishes
    concurrently, so the crash lands on whichever channel reaches the point first, with the others in
    flight, done or not yet claimed: what holds after the crash differs per run, so the test checks what
    must hold at the end, per channel. Every row runs (about 10 s each on two cores, 80 s in all): a
    subset would save little and leave a point untested with fan-out. With late pages on every channel,
    a channel whose publish the crash interrupted may still verify inline on its retry (its page is
    there by then): each channel is checked for a verification, inline or durable.
    """
    crash = CRASHES[name]
    web = start_target(*crash.target_args, late_pages=crash.late_pages)
    extra = {slug: add_channel(slug) for slug in EXTRA_CHANNELS}  # default channels: the brief gets all three
    if crash.late_pages:
        for target in extra.values():
            serve_pages_late(target, times=crash.late_pages)
    revision = write_revision(editor)
    approve(revision, approver)
    public_id = revision.brief.public_id
    slugs = ("web", *EXTRA_CHANNELS)
    keys = {slug: publish_key(public_id, revision.number, slug) for slug in slugs}
    assert set(Operation.objects.filter(kind="publish").values_list("key", flat=True)) == set(keys.values())

    crashy = crash_a_worker(crash, web, keys["web"], spawn)
    interrupted = list(Attempt.objects.filter(finished_at__isnull=True))
    assert interrupted and {attempt.worker_id for attempt in interrupted} == {"crashy"}
    if crash.expire_lease_after_kill:
        for attempt in interrupted:
            Operation.objects.filter(id=attempt.operation_id, lease_owner="crashy").update(
                lease_expires_at=attempt.started_at
            )

    fresh = run_worker(spawn, "fresh", env=worker_env(web))
    assert fresh.wait(timeout=120) == 0, fresh.output()

    ledgers = {"web": web.applications(), **{slug: target.ledger() for slug, target in extra.items()}}
    for slug in slugs:
        # Exactly once per channel, under that channel's own key, and no revision but the approved one.
        assert [(row["operation_key"], row["revision"]) for row in ledgers[slug]] == [(keys[slug], revision.number)], (
            slug
        )
        publish = Operation.objects.get(key=keys[slug])
        assert publish.status == "succeeded", slug
        assert_attempts_end_in_one_success(keys[slug])
        # A verification, inline or by a verify operation that succeeded after the publish (with late pages,
        # unless the crash interrupted this channel's publish and its retry found the page there).
        verify = assert_verified(publish, verify_key(public_id, revision.number, slug))
        if verify is not None:
            assert_attempts_end_in_one_success(verify.key)
        # Recorded as the target holds it.
        publication = Publication.objects.get(revision=revision, channel__slug=slug)
        row = ledgers[slug][0]
        assert (publication.operation_key, publication.external_id) == (keys[slug], publish.result["external_id"])
        assert publication.payload_hash == row["payload_hash"] == revision.payload_hash
        assert publication.verified_at is not None, slug
    assert list(Operation.objects.unfinished().values_list("key", "status")) == []
    brief = Brief.objects.get(public_id=public_id)
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, revision.number)
    for attempt in interrupted:  # each closed as lease_expired by the claim that took it over
        attempt.refresh_from_db()
        assert (attempt.outcome, attempt.error_kind) == ("", "lease_expired")
    assert not Attempt.objects.filter(finished_at__isnull=True).exists()
    assert not crashy.output().count("Traceback"), crashy.output()


def assert_attempts_end_in_one_success(key: str) -> None:
    """One success, last; everything before it an interruption (the crash, or a slow machine's)."""
    history = attempts_of(key)
    assert history and history[-1][1:] == ("succeeded", ""), (key, history)
    assert all((outcome, kind) in INTERRUPTED for _worker, outcome, kind in history[:-1]), (key, history)
