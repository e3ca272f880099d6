"""Drain concurrency without the doorbell: one `run_worker --until-idle` process, 8 target calls in
flight (GALLEY_WORKER_CONCURRENCY=8) against 1, draining the same number of fresh approvals.

The reference target adds 50 ms to every POST, so a worker that made one call at a time would
spend most of its time waiting. Each run gets its own approvals (publish, then verify, per
revision) and is timed from its first claim to its last outcome, from the database's timestamps;
the Django start-up of the worker process is not counted. The peak number of publish attempts
open at the same moment shows how many calls were really in flight.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest
from django.db.models import Max, Min

from publishing.demo.simulation import run_simulation
from publishing.identities import PUBLISH, VERIFY, publish_key
from tests.benchmarks.support import Result, Target, percentile, reference_target, start_worker, tail
from workers.models import Attempt, Operation

pytestmark = pytest.mark.django_db(transaction=True)

REVISIONS = 100
LATENCY_MS = 50
CONCURRENCY = 8
WORKER_TIMEOUT_SECONDS = 90


def peak_in_flight(attempts: list[tuple]) -> int:
    """The most attempts open at one moment, from (started_at, finished_at) pairs."""
    events = sorted([(start, 1) for start, _ in attempts] + [(end, -1) for _, end in attempts])
    peak = current = 0
    for _moment, step in events:
        current += step
        peak = max(peak, current)
    return peak


@dataclass(frozen=True)
class Drained:
    rate: float  # operations per second
    peak: int  # publish calls in flight at once, at most
    publish_ms: float  # median publish attempt


def drain_once(target: Target, tmp_path, *, concurrency: int, seed: int) -> Drained:
    """Approve REVISIONS fresh revisions, then let one worker drain them."""
    summary = run_simulation(briefs=REVISIONS, revisions=1, concurrency=4, seed=seed)
    worker_id = f"bench-drain-{concurrency}"
    process, log = start_worker(target, worker_id, logs=tmp_path, concurrency=concurrency, until_idle=True)
    try:
        process.wait(timeout=WORKER_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"{worker_id} did not drain {REVISIONS} approvals within {WORKER_TIMEOUT_SECONDS} s\n{tail(log)}")
    assert process.returncode == 0, tail(log)

    operations = Operation.objects.filter(subject_id__in=summary.brief_ids, kind__in=[PUBLISH, VERIFY])
    assert operations.count() == operations.filter(status="succeeded").count() == 2 * REVISIONS
    attempts = Attempt.objects.filter(operation__in=operations)
    assert attempts.count() == 2 * REVISIONS, "an operation needed more than one attempt"
    assert set(attempts.values_list("worker_id", flat=True)) == {worker_id}
    span = attempts.aggregate(first=Min("started_at"), last=Max("finished_at"))
    seconds = (span["last"] - span["first"]).total_seconds()
    publishes = attempts.filter(operation__kind=PUBLISH)
    applied = {row["operation_key"] for row in target.ledger()}
    assert {publish_key(brief_id, 1) for brief_id in summary.brief_ids} <= applied
    return Drained(
        rate=2 * REVISIONS / seconds,
        peak=peak_in_flight(list(publishes.values_list("started_at", "finished_at"))),
        publish_ms=percentile(list(publishes.values_list("duration_ms", flat=True)), 0.5),
    )


def test_drain_concurrency(tmp_path, bench_report):
    with reference_target(tmp_path, latency_ms=LATENCY_MS) as target:
        single = drain_once(target, tmp_path, concurrency=1, seed=1)
        pooled = drain_once(target, tmp_path, concurrency=CONCURRENCY, seed=8)
        ledger = target.ledger()
    assert len(ledger) == len({row["operation_key"] for row in ledger}) == 2 * REVISIONS

    bench_report(
        Result(
            name=f"drain: {2 * REVISIONS} ops, 1 run_worker",
            figure=pooled.rate,
            unit="ops/s",
            baseline=single.rate,
            baseline_unit="ops/s",
            baseline_label="GALLEY_WORKER_CONCURRENCY=1",
            notes=(
                f"concurrency {CONCURRENCY} vs 1, target +{LATENCY_MS} ms/POST, no django-q2; "
                f"{REVISIONS} publish + {REVISIONS} verify each; "
                f"peak publish calls in flight {pooled.peak} vs {single.peak}; "
                f"publish attempt p50 {pooled.publish_ms:.0f} ms vs {single.publish_ms:.0f} ms"
            ),
        )
    )
