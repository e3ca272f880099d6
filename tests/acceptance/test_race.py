"""Exactly once and no regression under load, faults and kill -9 (docs/invariants.md#i4, #i8, #i9, #i12).

Real processes: the reference target with injected faults (429, 503, 500, commit-then-hang,
commit-then-drop), `manage.py simulate` approving revisions of hundreds of briefs while four
`run_worker` processes publish them, and a seeded killer that SIGKILLs a random worker at
random moments and starts a replacement. At the end the target's ledger (one row per first
application) must show every brief's latest revision applied exactly once, no key applied twice,
and per brief strictly increasing revisions in applied order — with the target's own fence on,
and with it off, where only Galley's ordering (completion edges, supersede) prevents regression.
"""

from __future__ import annotations

import random
import secrets
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.db.models import Count, F

from publishing.identities import PUBLISH, VERIFY, publish_key
from publishing.models import Brief, Publication, Revision
from tests.processes import child_database_url, free_port, kill, manage, process_env, start, stop, wait_for_http
from workers.actions.housekeeping import reconcile_expired_leases
from workers.models import UNFINISHED_STATUSES, Attempt, Conflict, Dependency, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

# Generous bounds: a healthy run of the large scenario takes under a fifth of this here.
RUN_DEADLINE_SECONDS = 8 * 60
FINAL_DRAIN_TIMEOUT_SECONDS = 120
# Fault mix of the reference target; with 20 attempts allowed, none of these should kill an operation.
FAULTS = [
    "--rate-429", "0.05",
    "--rate-503", "0.03",
    "--rate-500", "0.05",
    "--rate-hang", "0.02", "--hang-seconds", "3",
    "--rate-drop", "0.02",
    "--retry-after", "1",
]  # fmt: skip
WORKER_SETTINGS = {
    # Timeouts short and leases short, so hangs, drops and kills are all recovered within seconds.
    "GALLEY_TARGET_TIMEOUT_SECONDS": "1",
    "GALLEY_LEASE_SECONDS": "4",
    "GALLEY_BACKOFF_BASE_SECONDS": "0.2",
    "GALLEY_BACKOFF_MAX_SECONDS": "2",
    "GALLEY_MAX_ATTEMPTS": "20",
    "GALLEY_WORKER_CONCURRENCY": "4",
    "GALLEY_AI_TIMEOUT_SECONDS": "1",  # settings require leases to outlive AI calls too
    "GALLEY_CRASH_POINT": "",  # never inherited: this test kills at random moments, not named points
}


@dataclass(frozen=True)
class Scenario:
    briefs: int
    revisions: int
    workers: int
    kills: int
    seed: int
    fence_off: bool = False
    simulate_concurrency: int = 4


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"({path.name}: no output)"
    return f"--- {path.name} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def operation_states() -> dict[str, int]:
    return dict(Counter(Operation.objects.values_list("status", flat=True)))


class Workers:
    """`run_worker` processes in numbered slots; a killed one is replaced under a new worker id."""

    def __init__(self, count: int, *, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.generation = [0] * count
        self.processes: list[subprocess.Popen[str]] = [self._start(slot) for slot in range(count)]
        self.kills = 0

    def _start(self, slot: int) -> subprocess.Popen[str]:
        worker_id = f"race-{slot}.{self.generation[slot]}"
        return manage("run_worker", "--worker-id", worker_id, env=self.env, log=self.logs / f"{worker_id}.log")

    def kill_and_replace(self, slot: int) -> None:
        kill(self.processes[slot])
        self.kills += 1
        self.generation[slot] += 1
        self.processes[slot] = self._start(slot)

    def assert_alive(self) -> None:
        for slot, process in enumerate(self.processes):
            log = self.logs / f"race-{slot}.{self.generation[slot]}.log"
            assert process.poll() is None, f"worker {slot} exited by itself ({process.returncode})\n{tail(log)}"

    def stop_all(self) -> None:
        for process in self.processes:
            stop(process)


def run_race(tmp_path: Path, scenario: Scenario) -> None:
    rng = random.Random(scenario.seed)
    token = secrets.token_urlsafe(16)
    port = free_port()
    target_url = f"http://127.0.0.1:{port}"
    env = process_env(
        DATABASE_URL=child_database_url(),
        GALLEY_TARGET_URL=target_url,
        GALLEY_TARGET_TOKEN=token,
        **WORKER_SETTINGS,
    )
    fence = ["--fence-off"] if scenario.fence_off else []
    target = start(
        [
            *["-m", "galley.reference_target"],
            *["--port", str(port), "--db", str(tmp_path / "target.sqlite3"), f"--token={token}"],
            *FAULTS,
            *["--seed", str(scenario.seed), *fence],
        ],
        env=env,
        log=tmp_path / "target.log",
    )
    workers: Workers | None = None
    children: list[subprocess.Popen[str]] = [target]
    started = time.monotonic()
    try:
        wait_for_http(f"{target_url}/_health", process=target)
        workers = Workers(scenario.workers, env=env, logs=tmp_path)
        # Approvals arrive while workers publish, so older revisions are in flight when newer ones
        # are approved: those become ordered (completion edges) or superseded, never regressions.
        simulate = manage(
            "simulate",
            *["--briefs", str(scenario.briefs), "--revisions", str(scenario.revisions)],
            *["--concurrency", str(scenario.simulate_concurrency), "--seed", str(scenario.seed)],
            env=env,
            log=tmp_path / "simulate.log",
        )
        children.append(simulate)

        deadline = started + RUN_DEADLINE_SECONDS
        # Kill moments are seeded points of progress (share of publish operations finished), so the
        # kills spread over the whole run however fast this machine is; at least a second apart.
        total = scenario.briefs * scenario.revisions
        kill_at = sorted(rng.uniform(0.05, 0.95) for _ in range(scenario.kills))
        last_kill = 0.0
        while True:
            workers.assert_alive()
            simulating = simulate.poll() is None
            if simulating:
                idle = False
            else:
                assert simulate.returncode == 0, tail(tmp_path / "simulate.log")
                idle = not Operation.objects.filter(status__in=UNFINISHED_STATUSES).exists()
            if idle and not kill_at:
                break
            assert time.monotonic() < deadline, (
                f"not done within {RUN_DEADLINE_SECONDS} s: simulate {'running' if simulating else 'done'}, "
                f"operations {operation_states()}"
            )
            finished = Operation.objects.filter(kind=PUBLISH).exclude(status__in=UNFINISHED_STATUSES).count()
            if kill_at and finished / total >= kill_at[0] and time.monotonic() - last_kill >= 1.0:
                kill_at.pop(0)
                workers.kill_and_replace(rng.randrange(scenario.workers))
                last_kill = time.monotonic()
            time.sleep(0.25)
        busy_seconds = time.monotonic() - started
        workers.stop_all()

        # Workers idle: the reconciler and one more drain, until nothing is left unfinished
        # (at least once, though the workers' own reconciling normally leaves nothing to do).
        final_rounds = 0
        while final_rounds == 0 or Operation.objects.filter(status__in=UNFINISHED_STATUSES).exists():
            final_rounds += 1
            assert final_rounds <= 3, f"operations still unfinished after the reconciler: {operation_states()}"
            reconciled = reconcile_expired_leases()
            log = tmp_path / f"race-final-{final_rounds}.log"
            drainer = manage("run_worker", "--until-idle", "--worker-id", log.stem, env=env, log=log)
            children.append(drainer)
            try:
                drainer.wait(timeout=FINAL_DRAIN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"run_worker --until-idle still busy after {FINAL_DRAIN_TIMEOUT_SECONDS} s: {operation_states()}"
                )
            assert drainer.returncode == 0, tail(log)
            assert reconciled["dead"] == 0, reconciled

        ledger = httpx.get(f"{target_url}/_ledger", timeout=10).json()["applications"]
    finally:
        if workers is not None:
            workers.stop_all()
        for child in children:
            stop(child)
    elapsed = time.monotonic() - started

    assert_outcome(scenario, ledger)
    attempts = Counter(Attempt.objects.values_list("outcome", "error_kind"))
    publishes = Operation.objects.filter(kind=PUBLISH)
    print(
        f"\nrace, target fence {'off' if scenario.fence_off else 'on'}: {scenario.briefs} briefs x "
        f"{scenario.revisions} revisions approved; {publishes.count()} publish operations "
        f"({publishes.filter(status='superseded', attempts=0).count()} superseded unclaimed, "
        f"{publishes.filter(status='superseded', attempts__gt=0).count()} superseded when sent, "
        f"{Dependency.objects.filter(requires=Dependency.Requires.COMPLETION).count()} ordered after an older one "
        "in flight, "
        f"{publishes.filter(result__first_application=False).count()} adopted or replayed); "
        f"{Operation.objects.filter(kind=VERIFY).count()} verify operations; states {operation_states()}; "
        f"{sum(attempts.values())} attempts {dict(attempts)}; {len(ledger)} applications at the target; "
        f"{workers.kills} workers killed; final reconcile rounds {final_rounds}; "
        f"busy {busy_seconds:.0f} s, total {elapsed:.0f} s"
    )


def assert_outcome(scenario: Scenario, ledger: list[dict]) -> None:
    publishes = Operation.objects.filter(kind=PUBLISH)
    assert publishes.count() == scenario.briefs * scenario.revisions, "one publish operation per approval"
    states = operation_states()
    assert not Operation.objects.filter(status__in=UNFINISHED_STATUSES).exists(), states
    assert states.get("dead", 0) == 0 and states.get("conflict", 0) == 0, (
        f"operations died or conflicted: {states}\n"
        + "\n".join(
            f"{op.key} {op.status}: {op.last_error_message}"
            for op in Operation.objects.filter(status__in=["dead", "conflict"])[:10]
        )
    )
    assert not Conflict.objects.exists()

    # Exactly once at the target: no key applied twice, no (brief, revision) applied twice.
    keys = Counter(row["operation_key"] for row in ledger)
    assert [key for key, n in keys.items() if n > 1] == [], "a key was applied twice"
    pairs = Counter((row["brief_id"], row["revision"]) for row in ledger)
    assert [pair for pair, n in pairs.items() if n > 1] == [], "a revision was applied twice"
    for row in ledger:
        assert row["operation_key"] == publish_key(row["brief_id"], row["revision"]), row

    # No regression: per brief, applied revisions strictly increase in applied (ledger) order.
    applied: dict[str, list[int]] = defaultdict(list)
    for row in ledger:
        applied[row["brief_id"]].append(row["revision"])
    regressions = {brief: numbers for brief, numbers in applied.items() if numbers != sorted(set(numbers))}
    assert regressions == {}, f"revisions applied out of order: {regressions}"

    # Galley recorded every application exactly once, with the approved hash, and verified it.
    publications = {p.operation_key: p for p in Publication.objects.select_related("revision")}
    assert set(publications) == set(keys), (
        f"applied but not recorded: {sorted(set(keys) - set(publications))[:10]}; "
        f"recorded but not applied: {sorted(set(publications) - set(keys))[:10]}"
    )
    ledger_hash = {row["operation_key"]: row["payload_hash"] for row in ledger}
    for key, publication in publications.items():
        assert publication.payload_hash == publication.revision.payload_hash == ledger_hash[key], key
        assert publication.verified_at is not None, f"{key} was never verified"

    # Every brief's latest revision is published, exactly once, and the brief says so.
    briefs = list(Brief.objects.filter(title__startswith="Simulation "))
    assert len(briefs) == scenario.briefs
    revision_counts = dict(
        Revision.objects.values("brief__public_id").annotate(n=Count("id")).values_list("brief__public_id", "n")
    )
    for brief in briefs:
        assert revision_counts[brief.public_id] == scenario.revisions
        key = publish_key(brief.public_id, scenario.revisions)
        assert keys[key] == 1, f"{key} applied {keys[key]} times"
        assert brief.published_revision_number == scenario.revisions, brief.public_id
        assert brief.status == Brief.Status.PUBLISHED, brief.public_id

    # Every claim left its attempt row, and every attempt reached an outcome.
    mismatched = list(
        Operation.objects.annotate(recorded=Count("attempt_set"))
        .exclude(recorded=F("attempts"))
        .values_list("key", "attempts", "recorded")[:10]
    )
    assert mismatched == [], f"attempt rows do not match attempt counts: {mismatched}"
    assert not Attempt.objects.filter(finished_at__isnull=True).exists(), "an attempt was left open"


def test_no_regression_and_exactly_once__4_workers_1000_operations_faults_and_sigkill(tmp_path):
    run_race(tmp_path, Scenario(briefs=400, revisions=3, workers=4, kills=6, seed=20240611))


def test_no_regression_with_target_fence_off__galley_orders_publishes__4_workers_faults_and_sigkill(tmp_path):
    run_race(tmp_path, Scenario(briefs=120, revisions=3, workers=4, kills=4, seed=7, fence_off=True))
