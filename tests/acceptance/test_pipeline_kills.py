"""The AI summary pipeline under real kills and real provider faults (docs/invariants.md#i5 to #i7, #i9, #i12).

Real processes only on the worker side: `manage.py run_worker` children against the test
database, and the fake OpenAI-compatible server (`python -m tests.fake_openai`) as its own
process, which counts every call it receives with the step it was for (system_task) — the
ground truth for "a stored step is never asked again". Briefs are created through the real
editorial action, which writes the run and its first step operation in one transaction.

Kill matrix (test 1). A kill must land on one chosen step, but every step is the same operation
kind, so a worker cannot be told to claim only that step. Instead the earlier steps are run one
per worker process, each of which dies right after committing its step
(GALLEY_CRASH_POINT=after_finalize:summary_step, a harmless point: nothing is left half done).
When the chosen step's worker starts, that step is the only operation due, so the kill lands on
it: a named crash point (os._exit, as kill -9) or a SIGKILL from the test while the worker waits
for a slow provider answer. A fresh `run_worker --until-idle` (it waits out the dead worker's
short lease itself) then finishes the pipeline.

Busy machines. Only the killed worker's lease is short (the fresh worker has to wait it out; where
it must outlast a long provider answer, the test ends it after the kill instead); the prep and
fresh workers get a lease and a provider timeout no loaded CPU overruns. A slow machine
may still add attempts (a lease that ran out, a provider answer later than the client's timeout),
so the assertions are the invariants, not an exact attempt history: each step succeeded exactly
once and nothing is left open, the attempt the kill interrupted was closed as lease_expired, a
step stored before the restart was never asked again (its call count and artifact unchanged), and
no step was asked more often than it was attempted.
"""

from __future__ import annotations

import collections
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import transaction

from publishing.actions.briefs import check_create_brief
from publishing.actions.summaries import PIPELINE_USERNAME
from publishing.hashing import payload_hash
from publishing.identities import SUMMARY_STEP, step_identity, step_key
from publishing.models import Brief, StepArtifact, SummaryRun
from publishing.summary_rules import STEPS, SummaryStep
from tests.processes import (
    child_database_url,
    free_port,
    kill,
    process_env,
    run_worker,
    start,
    stop,
    wait_for_http,
    wait_until,
)
from workers.models import Attempt, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

KEY = "pipeline-kills-key"
MODEL = "fake-gpt-kills"
CRASH_EXIT_CODE = 137
AI_STEPS = [SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE, SummaryStep.STANDFIRST]  # the gate asks none
SOURCE = (
    "Dockers at the port walked out at dawn on Monday. The union says pay has not kept up with prices. "
    "Ships are waiting offshore. The port authority called for talks on Tuesday. Shops report empty shelves."
)


# --- processes -------------------------------------------------------------------------------


@dataclass
class FakeAI:
    url: str
    process: subprocess.Popen[str]

    def calls(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/_calls", timeout=5)
        assert response.status_code == 200, response.text
        return response.json()["calls"]

    def faults(self, **values: float) -> None:
        response = httpx.post(f"{self.url}/_faults", json=values, timeout=5)
        assert response.status_code == 200, response.text

    def answered(self) -> dict[str, int]:
        """Successful (200) calls per step: every answer the server gave, whether or not its caller lived."""
        return dict(collections.Counter(c["system_task"] for c in self.calls() if c["status"] == 200))


@pytest.fixture
def start_fake_ai(tmp_path: Path) -> Iterator[Callable[..., FakeAI]]:
    """start_fake_ai(*args): the fake OpenAI server as a process on a free port, stopped at the end."""
    started: list[subprocess.Popen[str]] = []

    def start_one(*args: str) -> FakeAI:
        port = free_port()
        argv = ["-m", "tests.fake_openai", "--port", str(port), "--key", KEY, *args]
        process = start(argv, env=process_env(), log=tmp_path / "fake-openai.log")
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/_health", process=process, timeout=30)
        return FakeAI(url, process)

    yield start_one
    for process in started:
        stop(process, sig=signal.SIGTERM, timeout=10)


def worker_env(
    fake: FakeAI,
    *,
    lease: int,
    ai_timeout: float,
    crash_point: str = "",
    api_key: str = KEY,
    **extra: str,
) -> dict[str, str]:
    """The test database, the fake provider, a short lease (above 1.5 x the AI timeout and 2.5 x the
    target timeout, as settings require), short backoff; no crash point unless named."""
    return process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_AI_PROVIDER="openai",
        GALLEY_AI_BASE_URL=f"{fake.url}/v1",
        GALLEY_AI_API_KEY=api_key,
        GALLEY_AI_MODEL=MODEL,
        GALLEY_AI_TIMEOUT_SECONDS=str(ai_timeout),
        GALLEY_LEASE_SECONDS=str(lease),
        GALLEY_TARGET_TIMEOUT_SECONDS=str(round(lease / 3, 2)),
        GALLEY_BACKOFF_BASE_SECONDS="0.2",
        GALLEY_BACKOFF_MAX_SECONDS="1",
        GALLEY_CRASH_POINT=crash_point,  # "" removes it: a fresh worker never inherits one
        **extra,
    )


# Workers nobody has to wait out: prep workers (they die with nothing running, but a rare claim of the
# next step in the instant before their crash point is waited out by the next worker) and the fresh
# one. Long enough that no loaded CPU overruns them; the killed worker's lease stays short.
PREP_LEASE = 10
PREP_AI_TIMEOUT = 6.0
FRESH_LEASE = 60
FRESH_AI_TIMEOUT = 10.0
# Attempts a slow machine can legitimately add before a step's success: a lease that ran out (closed
# by the claim that took over, or by the worker itself once it noticed) or a provider call that took
# longer than the client's timeout. Any other failure is a defect.
INTERRUPTED = {("", "lease_expired"), ("lease_lost", "lease_lost"), ("retry", "timeout")}


# --- the editorial side and what must be true at the end -----------------------------------------


def create_brief(editor: Any, title: str = "Harbour strike") -> Brief:
    """Through the real action: the brief, its run 1 and the outline's operation commit together."""
    with transaction.atomic(durable=True):
        brief = check_create_brief(title=title, source_material=SOURCE, acting_user=editor)
    assert Operation.objects.filter(key=step_key(brief.public_id, 1, SummaryStep.OUTLINE)).exists()
    return brief


def step_operation(brief: Brief, step: str) -> Operation:
    return Operation.objects.get(key=step_key(brief.public_id, 1, step))


def attempts_of(brief: Brief, step: str) -> list[tuple[str, str, str]]:
    """(worker id, outcome, error kind) of every attempt of the step's operation, in order."""
    return [
        (a.worker_id, a.outcome, a.error_kind)
        for a in Attempt.objects.filter(operation__key=step_key(brief.public_id, 1, step)).order_by("number")
    ]


def step_attempts(brief: Brief, step: str) -> list[Attempt]:
    return list(Attempt.objects.filter(operation__key=step_key(brief.public_id, 1, step)).order_by("number"))


def assert_step_succeeded_once(brief: Brief, step: str, *, by: str) -> None:
    """Every attempt of the step on record (one per claim) and closed; exactly one succeeded, the last,
    made by `by`; any earlier one was interrupted in a way a slow machine can cause (INTERRUPTED)."""
    attempts = step_attempts(brief, step)
    history = attempts_of(brief, step)
    assert [a.number for a in attempts] == list(range(1, step_operation(brief, step).attempts + 1)), history
    assert all(a.finished_at is not None for a in attempts), f"an attempt was left open: {history}"
    assert [a.outcome for a in attempts].count(Attempt.Outcome.SUCCEEDED) == 1, history
    assert history[-1] == (by, "succeeded", ""), history
    assert all((outcome, kind) in INTERRUPTED for _worker, outcome, kind in history[:-1]), history


def assert_asked_at_most_once_per_attempt(fake: FakeAI, brief: Brief) -> dict[str, int]:
    """Each attempt asks the provider at most once, so no step has more answered calls than attempts.
    Returns the answered calls per step."""
    answered = fake.answered()
    for step, count in answered.items():
        assert count <= len(step_attempts(brief, step)), (step, attempts_of(brief, step), fake.calls())
    return answered


def call_numbers(text: str) -> list[int]:
    """The fake signs every answer with its call number ("update n" / "Update n:")."""
    return [int(n) for n in re.findall(r"\bupdate (\d+)\b", text, flags=re.IGNORECASE)]


def assert_pipeline_completed_once(brief: Brief) -> dict[str, StepArtifact]:
    """All five step operations succeeded, the run completed, one artifact per step identity, and
    exactly one revision, by galley-ai, whose payload is the brief's own title, the canonical
    standfirst and the canonical draft (the headline is only suggested).
    Returns the artifacts by step."""
    brief.refresh_from_db()
    statuses = {step: step_operation(brief, step).status for step in STEPS}
    assert statuses == dict.fromkeys(STEPS, Operation.Status.SUCCEEDED)
    assert Operation.objects.filter(kind=SUMMARY_STEP, subject_id=brief.public_id).count() == len(STEPS)
    assert list(Operation.objects.unfinished().filter(subject_id=brief.public_id)) == []

    stored = list(StepArtifact.objects.filter(brief=brief))
    expected_identities = sorted(step_identity(brief.public_id, brief.source_hash, step) for step in STEPS)
    assert sorted(a.identity for a in stored) == expected_identities  # exactly one per identity
    artifacts = {a.step: a for a in stored}

    run = SummaryRun.objects.get(brief=brief)  # exactly one run
    assert run.status == SummaryRun.Status.COMPLETED
    revisions = list(brief.revisions.all())
    assert len(revisions) == 1, revisions
    revision = revisions[0]
    assert (revision.number, revision.author.username, run.revision_id) == (1, PIPELINE_USERNAME, revision.id)
    canonical = {
        "title": brief.title,
        "standfirst": artifacts[SummaryStep.STANDFIRST].content["text"],
        "body": artifacts[SummaryStep.DRAFT].content["text"],
    }
    assert revision.payload == canonical
    assert revision.payload_hash == payload_hash(canonical)
    assert artifacts[SummaryStep.QUALITY_GATE].content == {"passed": True}
    return artifacts


# --- 1. nothing lost: a worker killed during each step ---------------------------------------------


@dataclass(frozen=True)
class Kill:
    crash_point: str  # GALLEY_CRASH_POINT of the killed worker; "" when the test SIGKILLs it mid-call
    artifact_stored: bool  # whether the killed step's artifact committed before the kill
    lease: int = 3  # short: the fresh worker waits it out
    ai_timeout: float = 1.9  # under lease / 1.5, as settings require
    slow_answer: float = 0.0  # > 0: the fake answers this slowly (but within the client timeout)
    # The killed worker's lease is long (it must outlast the slow answer): the test moves its expiry to a
    # past moment after the kill, as if it had run out, instead of waiting it out.
    expire_lease_after_kill: bool = False


KILLS = {
    # The answer arrived, the artifact is not stored yet: asking again is legitimate (once).
    "crash_after_provider_response": Kill("after_provider_response:summary_step", artifact_stored=False),
    # Artifact, next step and success committed: nothing may be asked again.
    "crash_after_finalize": Kill("after_finalize:summary_step", artifact_stored=True),
    # SIGKILL while the worker waits for the provider's answer (25 s, the client waits up to 30 s): the test
    # has those 25 s to see the call and kill, which even a badly overloaded machine does not use up.
    "sigkill_mid_provider_call": Kill(
        "", artifact_stored=False, lease=60, ai_timeout=30.0, slow_answer=25.0, expire_lease_after_kill=True
    ),
}
PREP_CRASH_POINT = "after_finalize:summary_step"  # a prep worker commits one step, then dies

CASES = [
    pytest.param(step, how, id=f"{step}-{how}")
    for how in KILLS
    for step in STEPS
    # The quality gate makes no provider call, so there is no call to be killed in.
    if not (how == "sigkill_mid_provider_call" and step == SummaryStep.QUALITY_GATE)
]


@pytest.mark.parametrize(("step", "how"), CASES)
def test_nothing_lost__worker_killed_during_each_step__pipeline_completes_without_repeating_stored_steps(
    step: str, how: str, start_fake_ai, spawn, editor
):
    kill_spec = KILLS[how]
    fake = start_fake_ai("--seed", "7")
    brief = create_brief(editor)

    def env(crash_point: str = "") -> dict[str, str]:
        """The killed worker's: its lease is the one the fresh worker waits out."""
        return worker_env(fake, lease=kill_spec.lease, ai_timeout=kill_spec.ai_timeout, crash_point=crash_point)

    # The steps before the chosen one: one worker each, dying right after committing its step.
    earlier = STEPS[: STEPS.index(step)]
    prep_env = worker_env(fake, lease=PREP_LEASE, ai_timeout=PREP_AI_TIMEOUT, crash_point=PREP_CRASH_POINT)
    for done in earlier:
        prep = run_worker(spawn, f"prep-{done}", env=prep_env)
        assert prep.wait(timeout=120) == CRASH_EXIT_CODE, prep.output()
        assert step_operation(brief, done).status == Operation.Status.SUCCEEDED
    # Only the steps done so far were asked, each at least once and at most once per attempt.
    answered = assert_asked_at_most_once_per_attempt(fake, brief)
    assert set(answered) == {done for done in earlier if done in AI_STEPS}, fake.calls()
    # Only the chosen step is due now; the worker started next can claim nothing else.
    due = Operation.objects.unfinished().filter(subject_id=brief.public_id)
    assert [op.key for op in due] == [step_key(brief.public_id, 1, step)]

    if kill_spec.crash_point:
        killed = run_worker(spawn, "killed", env=env(kill_spec.crash_point))
        assert killed.wait(timeout=120) == CRASH_EXIT_CODE, killed.output()
        assert f"crash point {kill_spec.crash_point} reached" in killed.output()
    else:
        fake.faults(rate_timeout=1, timeout_seconds=kill_spec.slow_answer)  # slow, but answers in time
        killed = run_worker(spawn, "killed", env=env())
        wait_until(
            lambda: any(c["system_task"] == step for c in fake.calls()),
            timeout=120,
            what=f"the {step} call reaching the fake provider",
        )
        assert killed.process.poll() is None, f"the worker did not wait for the answer\n{killed.output()}"
        kill(killed.process)
        assert killed.process.returncode == -signal.SIGKILL
        fake.faults(rate_timeout=0)

    # Right after the kill: the step's artifact is stored exactly when its success committed.
    operation = step_operation(brief, step)
    stored = StepArtifact.objects.filter(identity=step_identity(brief.public_id, brief.source_hash, step))
    assert stored.exists() is kill_spec.artifact_stored
    if kill_spec.artifact_stored:
        assert operation.status == Operation.Status.SUCCEEDED
        assert attempts_of(brief, step)[-1] == ("killed", "succeeded", "")
        if step != SummaryStep.QUALITY_GATE:
            next_step = STEPS[STEPS.index(step) + 1]
            continuation = step_operation(brief, next_step)  # committed with the step
            # Pending, or claimed in passing by the dying worker (its drain loop claims while a handler
            # runs) in the instant before its crash point: running under its lease, nothing stored.
            assert continuation.status == Operation.Status.PENDING or (
                (continuation.status, continuation.lease_owner) == (Operation.Status.RUNNING, "killed")
            ), (continuation.status, continuation.lease_owner)
            next_identity = step_identity(brief.public_id, brief.source_hash, next_step)
            assert not StepArtifact.objects.filter(identity=next_identity).exists()
        interrupted = None
    else:
        assert operation.status == Operation.Status.RUNNING  # leased to a dead worker
        # The attempt the kill interrupted: the step's latest, the killed worker's, and its only open one.
        (interrupted,) = Attempt.objects.filter(operation=operation, finished_at__isnull=True)
        assert (interrupted.worker_id, interrupted.number) == ("killed", operation.attempts), attempts_of(brief, step)
    asked_before_restart = assert_asked_at_most_once_per_attempt(fake, brief)
    if step in AI_STEPS:
        assert asked_before_restart.get(step, 0) >= 1, fake.calls()
    calls_before_restart = {c["n"] for c in fake.calls()}
    stored_before_restart = {a.identity: (a.id, a.content) for a in StepArtifact.objects.filter(brief=brief)}
    if kill_spec.expire_lease_after_kill:
        # Any past moment will do: the interrupted attempt began before the kill (this host's clock).
        Operation.objects.filter(id=operation.id, lease_owner="killed").update(lease_expires_at=interrupted.started_at)

    fresh = run_worker(spawn, "fresh", env=worker_env(fake, lease=FRESH_LEASE, ai_timeout=FRESH_AI_TIMEOUT))
    assert fresh.wait(timeout=120) == 0, fresh.output()

    artifacts = assert_pipeline_completed_once(brief)
    # Canonical-first: every artifact stored before the restart is the one that stands.
    assert {
        a.identity: (a.id, a.content) for a in artifacts.values() if a.identity in stored_before_restart
    } == stored_before_restart
    # Provider calls per step, at the fake server: a step stored before the restart was never asked again;
    # every other step (the killed in-flight one, whose answer was lost, and those after it) was asked
    # after the restart; and no step was asked more often than it was attempted.
    answered = assert_asked_at_most_once_per_attempt(fake, brief)
    assert set(answered) == set(AI_STEPS), fake.calls()
    stored_steps = {a.step for a in artifacts.values() if a.identity in stored_before_restart}
    for ai_step in AI_STEPS:
        if ai_step in stored_steps:
            assert answered[ai_step] == asked_before_restart[ai_step], (ai_step, fake.calls())
        else:
            assert answered[ai_step] > asked_before_restart.get(ai_step, 0), (ai_step, fake.calls())
    assert all(c["status"] == 200 for c in fake.calls()), fake.calls()
    # Each artifact is the answer of one of its step's calls; a step not stored before the restart holds
    # the answer of a call made after it (the lost answer of a killed call never won).
    for ai_step in AI_STEPS:
        (number,) = call_numbers(artifacts[ai_step].content["text"])
        own_calls = {c["n"] for c in fake.calls() if c["system_task"] == ai_step}
        if ai_step not in stored_steps:
            own_calls -= calls_before_restart
        assert number in own_calls, (ai_step, artifacts[ai_step].content, fake.calls())

    # Every attempt on record and closed, each step succeeded once by the worker that ran it, and the
    # killed attempt closed as lease_expired when the fresh worker took over.
    for other in STEPS:
        if other in earlier:
            assert_step_succeeded_once(brief, other, by=f"prep-{other}")
        elif other == step and kill_spec.artifact_stored:
            assert_step_succeeded_once(brief, other, by="killed")
        else:
            assert_step_succeeded_once(brief, other, by="fresh")
    if interrupted is not None:
        interrupted.refresh_from_db()
        assert (interrupted.outcome, interrupted.error_kind) == ("", "lease_expired"), attempts_of(brief, step)
    assert not Attempt.objects.filter(finished_at__isnull=True).exists()
    assert "Traceback" not in fresh.output(), fresh.output()


# --- 2. retry by failure kind: 429, 500, timeout; 401 --------------------------------------------

# Seeded faults: the fake draws each call's fault from one generator, so the faults of the run are
# fixed by the seed and the call count (only which step meets which fault varies). With seed 3 the
# first 18 calls hold the 12 clean answers these 4 briefs need and 6 faults: one timeout, three 429
# and two 500 — every kind at least once, and never enough to exhaust GALLEY_MAX_ATTEMPTS.
# The call count stays fixed on a loaded machine because nothing else makes a call: the lease (30 s)
# and the client timeout (5 s, for a clean answer that takes milliseconds) leave no room for an
# expired lease or a spurious timeout to add one.
LEASE_SECONDS = 30
AI_TIMEOUT_SECONDS = 5.0
FAULT_ARGS = (
    *("--rate-429", "0.2", "--retry-after", "0.2"),
    *("--rate-500", "0.2"),
    *("--rate-timeout", "0.15", "--timeout-seconds", "8"),  # longer than the 5 s client timeout
    *("--seed", "3"),
)
FAULT_KINDS = {"429": "throttled", "500": "server_error", "timeout": "timeout"}


def test_retry_by_failure_kind__provider_faults__429_500_timeout_are_retried_and_the_pipeline_completes(
    start_fake_ai, spawn, editor
):
    fake = start_fake_ai(*FAULT_ARGS)
    briefs = [create_brief(editor, title=f"Harbour strike {n}") for n in range(4)]
    env = worker_env(fake, lease=LEASE_SECONDS, ai_timeout=AI_TIMEOUT_SECONDS, GALLEY_MAX_ATTEMPTS="10")
    workers = [run_worker(spawn, f"worker-{n}", env=env) for n in range(2)]
    for worker in workers:
        assert worker.wait(timeout=180) == 0, worker.output()

    for brief in briefs:
        artifacts = assert_pipeline_completed_once(brief)
        for step in AI_STEPS:
            # Usage tokens on the successful attempt: the winning proposal's, the same as its artifact's.
            (success,) = Attempt.objects.filter(
                operation__key=step_key(brief.public_id, 1, step), outcome=Attempt.Outcome.SUCCEEDED
            )
            assert success.usage["prompt_tokens"] > 0 and success.usage["completion_tokens"] > 0, success.usage
            assert success.usage == artifacts[step].usage
            assert artifacts[step].model == MODEL

    calls = fake.calls()
    faults = collections.Counter(c["fault"] for c in calls if c["fault"])
    assert faults == {"timeout": 3, "429": 3, "500": 3}, calls  # fixed by the seed: every kind at least once
    # Exactly one clean answer per AI step: a step with a stored artifact was never asked again.
    clean = collections.Counter(c["system_task"] for c in calls if c["status"] == 200 and not c["fault"])
    assert clean == dict.fromkeys(AI_STEPS, len(briefs)), calls

    # Every fault is on record as a retried attempt of its kind; no attempt is left open or dead.
    summary_attempts = Attempt.objects.filter(operation__kind=SUMMARY_STEP)
    failed = collections.Counter(summary_attempts.exclude(error_kind="").values_list("error_kind", flat=True))
    assert failed == {FAULT_KINDS[fault]: count for fault, count in faults.items()}, calls
    assert set(summary_attempts.values_list("outcome", flat=True)) == {"succeeded", "retry"}
    assert set(summary_attempts.filter(outcome="retry").values_list("error_kind", flat=True)) == set(
        FAULT_KINDS.values()
    )
    assert not summary_attempts.filter(finished_at__isnull=True).exists()
    assert set(summary_attempts.filter(error_kind="throttled").values_list("http_status", flat=True)) == {429}
    assert set(summary_attempts.filter(error_kind="server_error").values_list("http_status", flat=True)) == {500}
    # Throttling honours Retry-After (0.2 s): the next attempt started no sooner.
    for throttled in summary_attempts.filter(error_kind="throttled"):
        following = Attempt.objects.get(operation_id=throttled.operation_id, number=throttled.number + 1)
        assert (following.started_at - throttled.finished_at).total_seconds() >= 0.15


def test_retry_by_failure_kind__wrong_api_key_401__first_step_dead_for_an_operator_and_no_further_steps(
    start_fake_ai, spawn, editor
):
    fake = start_fake_ai("--seed", "3")
    brief = create_brief(editor)
    env = worker_env(fake, lease=LEASE_SECONDS, ai_timeout=AI_TIMEOUT_SECONDS, api_key="not-the-key")
    worker = run_worker(spawn, "worker", env=env)
    assert worker.wait(timeout=120) == 0, worker.output()

    outline = step_operation(brief, SummaryStep.OUTLINE)
    assert (outline.status, outline.needs_operator, outline.last_error_kind) == (Operation.Status.DEAD, True, "auth")
    # The attempt that read the 401 was the last: dead, for an operator. Only an answer the client never
    # read (a timeout on a machine slowed beyond the 5 s client timeout) could come before it.
    history = attempts_of(brief, SummaryStep.OUTLINE)
    assert history[-1] == ("worker", "dead", "auth"), history
    assert set(history[:-1]) <= {("worker", "retry", "timeout")}, history
    assert Attempt.objects.filter(operation=outline).order_by("number").last().http_status == 401
    # Terminal: one call per attempt and none after the 401 was read, and nothing after it.
    assert [(c["system_task"], c["status"]) for c in fake.calls()] == [("outline", 401)] * len(history)
    assert list(Operation.objects.filter(kind=SUMMARY_STEP).values_list("key", flat=True)) == [outline.key]
    assert not StepArtifact.objects.filter(brief=brief).exists()
    assert SummaryRun.objects.get(brief=brief).status == SummaryRun.Status.RUNNING
    assert not brief.revisions.exists()
