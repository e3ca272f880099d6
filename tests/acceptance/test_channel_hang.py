"""One channel hanging never holds back the others (docs/invariants.md#i14), with a real worker process.

Three channels, each a reference target of its own served from a thread of this process (real HTTP; the
worker is another process): `web` (the settings' target), `partner-feed`, and `app`, whose every first
application commits and then hangs (Faults(rate_hang=1.0)): the worker's call waits out its client
timeout, and only its next attempt, which looks the key up first, adopts what the target applied. Until
then the hung publish holds one of the worker's handler threads.

Slots. A worker process runs GALLEY_WORKER_CONCURRENCY handler threads, and a hung call holds its thread
until the client timeout. With fewer hung publishes than threads (the first test) the other channels
always have a thread: they verify while the hung one is still unfinished. With more (the second test:
three briefs, two threads) the hung channel can hold every thread for one client timeout, and the other
channels wait that long: the test measures it (the most hung-channel operations running at once, when
the others had verified everything), prints the figures, and asserts what must hold whatever the timing:
nothing lost, each channel applied exactly once per brief, all verified. Not forever: a timed-out call
frees its thread, and its next attempt adopts what the target applied.

A target that answers nothing at all, look-ups included, is the third test: `app`'s target process is
stopped and later resumed, and every attempt on it meanwhile waits out a client timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from galley.reference_target import Faults, ReferenceTarget
from publishing.credentials import seal
from publishing.identities import publish_key
from publishing.models import Channel, Publication
from tests.acceptance.test_crash_points import approve, write_revision
from tests.processes import Child, child_database_url, free_port, kill, process_env, start, wait_for_http, wait_until
from tests.reference_target import TOKEN
from workers.models import Attempt, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

BRIEFS = 3
# The client timeout is a hung call's hold on a thread: long enough that the healthy channels verify
# within it even on a loaded machine (a few seconds here), so "still unfinished" is no race. The lease
# outlives it by the factor settings require.
TIMEOUT_SECONDS = 15
LEASE_SECONDS = 40
HUNG = "app"
HEALTHY = ("web", "partner-feed")


@dataclass
class HangRun:
    hung_verified_when_healthy_done: int
    hung_unfinished_when_healthy_done: int
    most_hung_running: int
    healthy_seconds: float
    caught_up_seconds: float
    hung_timeouts: int


def start_worker(spawn: Callable[..., Child], web_url: str, *, slots: int, timeout: float) -> Child:
    """One `run_worker` process with `slots` handler threads, `web` the settings' target, client timeout
    `timeout` (a lease no loaded machine overruns), short backoff."""
    env = process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_TARGET_URL=web_url,
        GALLEY_TARGET_TOKEN=TOKEN,
        GALLEY_WORKER_CONCURRENCY=str(slots),
        GALLEY_LEASE_SECONDS=str(LEASE_SECONDS),
        GALLEY_TARGET_TIMEOUT_SECONDS=str(timeout),
        GALLEY_AI_TIMEOUT_SECONDS=str(timeout),  # settings also bound the AI timeout by the lease
        GALLEY_BACKOFF_BASE_SECONDS="0.2",
        GALLEY_BACKOFF_MAX_SECONDS="1",
        GALLEY_CRASH_POINT="",
    )
    return spawn("worker", "run_worker", "--worker-id", "worker", "--poll", "0.2", env=env)


def verified_on(public_ids: list[str], slug: str) -> int:
    return Publication.objects.filter(
        brief__public_id__in=public_ids, channel__slug=slug, verified_at__isnull=False
    ).count()


def applied_keys(target: ReferenceTarget) -> list[str]:
    return sorted(row["operation_key"] for row in target.ledger())


@pytest.fixture
def hang_one_channel(
    start_target, add_channel, spawn: Callable[..., Child], editor, approver
) -> Callable[..., HangRun]:
    """hang_one_channel(slots=N): the run below, with a worker process of N handler threads."""
    return lambda *, slots: run_with_one_channel_hanging(
        BRIEFS, slots, start_target=start_target, add_channel=add_channel, spawn=spawn, editor=editor, approver=approver
    )


def run_with_one_channel_hanging(
    briefs: int, slots: int, *, start_target, add_channel, spawn: Callable[..., Child], editor, approver
) -> HangRun:
    """Approve `briefs` briefs to three channels, `app` hanging; one worker process with `slots` threads
    runs until the healthy channels verified everything; then `app`'s fault is switched off on the running
    target and the run goes on until it caught up. Checks exactly once and verified on every channel."""
    targets: dict[str, ReferenceTarget] = {
        "web": start_target(),
        "partner-feed": add_channel("partner-feed"),
        HUNG: add_channel(HUNG, Faults(rate_hang=1.0, hang_seconds=600)),
    }
    revisions = [write_revision(editor, title=f"Harbour strike, day {day}") for day in range(1, briefs + 1)]
    public_ids = [revision.brief.public_id for revision in revisions]
    started = time.monotonic()
    for revision in revisions:
        approve(revision, approver)
    worker = start_worker(spawn, targets["web"].url, slots=slots, timeout=TIMEOUT_SECONDS)

    most_hung_running = 0
    deadline = time.monotonic() + 4 * TIMEOUT_SECONDS + 60
    while not all(verified_on(public_ids, slug) == briefs for slug in HEALTHY):
        assert time.monotonic() < deadline, f"the healthy channels never verified everything\n{worker.output()}"
        assert worker.process.poll() is None, worker.output()
        running = Operation.objects.filter(channel=HUNG, status=Operation.Status.RUNNING).count()
        most_hung_running = max(most_hung_running, running)
        time.sleep(0.05)
    healthy_seconds = time.monotonic() - started
    hung_verified = verified_on(public_ids, HUNG)
    hung_unfinished = Operation.objects.unfinished().filter(channel=HUNG).count()
    assert not Operation.objects.unfinished().exclude(channel=HUNG).exists()
    for slug in HEALTHY:
        assert applied_keys(targets[slug]) == sorted(publish_key(public_id, 1, slug) for public_id in public_ids)

    # Un-hung: the running target answers at once from now on (a call hanging already still waits out
    # its client timeout); the hung channel catches up.
    targets[HUNG].faults = Faults()
    wait_until(lambda: verified_on(public_ids, HUNG) == briefs, timeout=4 * TIMEOUT_SECONDS + 60, what="the catch-up")
    caught_up_seconds = time.monotonic() - started
    assert applied_keys(targets[HUNG]) == sorted(publish_key(public_id, 1, HUNG) for public_id in public_ids)
    assert list(Operation.objects.unfinished().values_list("key", "status")) == []
    assert not Operation.objects.exclude(status=Operation.Status.SUCCEEDED).exists()
    # The hung channel's only failures are its timed-out calls; the others failed nothing.
    assert set(Attempt.objects.filter(operation__channel=HUNG).values_list("outcome", "error_kind")) <= {
        ("succeeded", ""),
        ("retry", "timeout"),
    }
    assert not Attempt.objects.exclude(operation__channel=HUNG).exclude(outcome="succeeded").exists()
    run = HangRun(
        hung_verified_when_healthy_done=hung_verified,
        hung_unfinished_when_healthy_done=hung_unfinished,
        most_hung_running=most_hung_running,
        healthy_seconds=healthy_seconds,
        caught_up_seconds=caught_up_seconds,
        hung_timeouts=Attempt.objects.filter(operation__channel=HUNG, error_kind="timeout").count(),
    )
    print(f"{briefs} briefs, {slots} worker threads, client timeout {TIMEOUT_SECONDS} s: {run}")
    return run


def test_invariant_14__one_channel_hanging__the_other_two_publish_and_verify__then_it_catches_up_exactly_once(
    hang_one_channel,
):
    run = hang_one_channel(slots=BRIEFS + 1)
    # Verified on the other two with the hung channel still unfinished (the figures printed say how long).
    assert run.hung_verified_when_healthy_done == 0 and run.hung_unfinished_when_healthy_done > 0, run
    # Then each call that hung timed out once and its publish adopted what the target had applied; the
    # channel held at most its share of the threads (GALLEY_WORKER_CHANNEL_THREADS), so the publishes it
    # had not started yet went through once it was un-hung, without a timeout.
    assert run.most_hung_running <= (BRIEFS + 2) // 2, run
    assert 1 <= run.hung_timeouts <= run.most_hung_running, run


def test_invariant_14__hung_channel_with_more_publishes_than_worker_threads__holds_only_its_share_of_them(
    hang_one_channel,
):
    """Fewer threads than the hung channel's publishes: it holds at most its share of them
    (GALLEY_WORKER_CHANNEL_THREADS, half by default), so the others keep a thread and verify everything
    while it still hangs (docs/invariants.md#i14; the figures printed say how long they took)."""
    slots = BRIEFS - 1
    run = hang_one_channel(slots=slots)
    assert run.most_hung_running <= (slots + 1) // 2, run
    assert run.hung_verified_when_healthy_done == 0 and run.hung_unfinished_when_healthy_done > 0, run
    # Then each call that hung timed out once, and its next attempt adopted what the target had applied.
    assert 1 <= run.hung_timeouts <= run.most_hung_running, run


# --- a channel whose target answers nothing at all -----------------------------------------------

# Every call to the stopped target, look-ups included, waits out this timeout: short, so the test sees
# several attempts per publish within the attempt budget (GALLEY_MAX_ATTEMPTS, 8).
STOPPED_TIMEOUT_SECONDS = 4


@pytest.fixture
def process_channel(tmp_path: Path) -> Iterator[Callable[[str], tuple[str, subprocess.Popen[str]]]]:
    """process_channel(slug): a reference target as a process of its own and the default channel `slug`
    speaking to it; returns its address and process."""
    processes: list[subprocess.Popen[str]] = []

    def add(slug: str) -> tuple[str, subprocess.Popen[str]]:
        port = free_port()
        argv = ["-m", "galley.reference_target", "--port", str(port), "--db", str(tmp_path / f"{slug}.sqlite3")]
        processes.append(start([*argv, f"--token={TOKEN}"], env=process_env(), log=tmp_path / f"{slug}.log"))
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/_health", process=processes[-1])
        Channel.objects.create(slug=slug, name=slug.title(), base_url=url, secret_sealed=seal(TOKEN), is_default=True)
        return url, processes[-1]

    yield add
    for process in processes:
        kill(process)  # SIGKILL ends a stopped process too


@pytest.mark.parametrize("slots", [BRIEFS + 1, BRIEFS - 1])
def test_invariant_14__one_channel_answering_nothing__the_others_verify__resumed_it_catches_up_exactly_once(
    slots: int, start_target, add_channel, process_channel, spawn, editor, approver
):
    """`app`'s target process is stopped (SIGSTOP: the kernel still accepts its connections, nothing
    answers, look-ups included), so every attempt on it waits out the client timeout and fails. The other
    two channels verify everything while it is stopped; it is then resumed (SIGCONT: the same process,
    port and database) once every publish to it has failed twice, and catches up with exactly one
    application per brief. With fewer threads than briefs the stopped channel still holds at most its
    share of them (GALLEY_WORKER_CHANNEL_THREADS), so the others never wait for its timeouts."""
    web, partner = start_target(), add_channel("partner-feed")
    app_url, app = process_channel(HUNG)
    revisions = [write_revision(editor, title=f"Harbour strike, day {day}") for day in range(1, BRIEFS + 1)]
    public_ids = [revision.brief.public_id for revision in revisions]
    os.kill(app.pid, signal.SIGSTOP)
    started = time.monotonic()
    for revision in revisions:
        approve(revision, approver)
    worker = start_worker(spawn, web.url, slots=slots, timeout=STOPPED_TIMEOUT_SECONDS)
    most_hung_running = 0
    deadline = time.monotonic() + 120
    while not all(verified_on(public_ids, slug) == BRIEFS for slug in HEALTHY):
        assert time.monotonic() < deadline, f"the healthy channels never verified everything\n{worker.output()}"
        running = Operation.objects.filter(channel=HUNG, status=Operation.Status.RUNNING).count()
        most_hung_running = max(most_hung_running, running)
        time.sleep(0.05)
    healthy_seconds = time.monotonic() - started
    assert most_hung_running <= (slots + 1) // 2, most_hung_running
    # Still stopped, nothing of it verified, its publishes pending or running, none given up.
    assert psutil.Process(app.pid).status() == psutil.STATUS_STOPPED
    assert verified_on(public_ids, HUNG) == 0
    assert Operation.objects.unfinished().filter(channel=HUNG, kind="publish").count() == BRIEFS
    assert not Operation.objects.unfinished().exclude(channel=HUNG).exists()
    assert not Operation.objects.filter(status=Operation.Status.DEAD).exists()
    for slug, target in (("web", web), ("partner-feed", partner)):
        assert applied_keys(target) == sorted(publish_key(public_id, 1, slug) for public_id in public_ids)

    # A longer outage: stopped until every publish to it has failed twice (retried, the budget not spent).
    wait_until(
        lambda: all(
            Attempt.objects.filter(operation__key=publish_key(public_id, 1, HUNG), finished_at__isnull=False).count()
            >= 2
            for public_id in public_ids
        ),
        timeout=120,
        what="two failed attempts of every publish to the stopped channel",
    )
    assert verified_on(public_ids, HUNG) == 0
    os.kill(app.pid, signal.SIGCONT)
    wait_until(lambda: verified_on(public_ids, HUNG) == BRIEFS, timeout=120, what="the catch-up")
    caught_up_seconds = time.monotonic() - started
    ledger = httpx.get(f"{app_url}/_ledger", timeout=5).json()["applications"]
    assert sorted(row["operation_key"] for row in ledger) == sorted(
        publish_key(public_id, 1, HUNG) for public_id in public_ids
    )
    assert not Operation.objects.exclude(status=Operation.Status.SUCCEEDED).exists()
    failed = Attempt.objects.filter(operation__channel=HUNG).exclude(outcome="succeeded")
    print(
        f"stopped channel, {slots} worker threads, client timeout {STOPPED_TIMEOUT_SECONDS} s: at most "
        f"{most_hung_running} of its operations running at once; the others verified after "
        f"{healthy_seconds:.1f} s; it caught up {caught_up_seconds:.1f} s after the approvals, after "
        f"{failed.count()} failed attempts {sorted(set(failed.values_list('error_kind', flat=True)))}"
    )
