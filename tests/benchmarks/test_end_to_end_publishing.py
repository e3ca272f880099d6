"""End-to-end publishing: approvals in, verified publications out, through real processes.

The reference target runs as its own process with 20 ms added to every POST (a network hop);
two `run_worker` processes (8 calls in flight each) publish and verify while M revisions are
approved through the real actions (publishing.simulation, 4 threads). Throughput is verified
publications per second from the first approval to the last verification; latency is each
revision's approval → verified publication, from the database's timestamps.

Baseline: the same M payloads sent one after another with one TargetClient straight to the same
target, with no database at all — what a single caller gets from the target alone.
"""

from __future__ import annotations

import time

import pytest
from django.db.models import Max, Min

from approvals.models import Approval
from publishing.clients.target import TargetClient
from publishing.demo.simulation import run_simulation
from publishing.identities import PUBLISH, VERIFY, publish_key
from publishing.models import Publication
from tests.benchmarks.support import Result, percentile, reference_target, start_worker, tail, wait_until_started
from tests.processes import stop
from workers.models import Attempt, Operation

pytestmark = pytest.mark.django_db(transaction=True)

REVISIONS = 300
WORKERS = 2
CONCURRENCY = 8
LATENCY_MS = 20
DEADLINE_SECONDS = 150


def test_end_to_end_publishing(tmp_path, bench_report):
    with reference_target(tmp_path, latency_ms=LATENCY_MS) as target:
        workers = [
            start_worker(target, f"bench-e2e-{n}", logs=tmp_path, concurrency=CONCURRENCY) for n in range(WORKERS)
        ]
        try:
            for process, log in workers:
                wait_until_started(process, log)
            summary = run_simulation(briefs=REVISIONS, revisions=1, concurrency=4, seed=2026)
            deadline = time.monotonic() + DEADLINE_SECONDS
            published = Publication.objects.filter(verified_at__isnull=False)
            while published.count() < REVISIONS:
                for process, log in workers:
                    assert process.poll() is None, f"a worker exited ({process.returncode})\n{tail(log)}"
                stuck = Operation.objects.exclude(status__in=["pending", "running", "retry_wait", "succeeded"])
                assert not stuck.exists(), list(stuck.values_list("key", "status", "last_error_message")[:5])
                assert time.monotonic() < deadline, f"{published.count()} of {REVISIONS} verified in time"
                time.sleep(0.1)
        finally:
            for process, _log in workers:
                stop(process)

        # Baseline: the very same payloads, sequentially, one client, no database.
        payloads = [
            (p.brief.public_id, p.revision.payload_hash, p.revision.payload)
            for p in Publication.objects.select_related("brief", "revision")
        ]
        with TargetClient(base_url=target.url, token=target.token) as client:
            started = time.perf_counter()
            for brief_id, payload_hash, payload in payloads:
                _receipt, applied = client.publish(
                    operation_key=f"direct:{brief_id}",
                    brief_id=f"direct-{brief_id}",
                    revision=1,
                    payload_hash=payload_hash,
                    payload=payload,
                )
                assert applied
            direct_seconds = time.perf_counter() - started
        ledger = target.ledger()

    # Exactly once at the target, for Galley's publishes and for the baseline's.
    assert summary.approvals == REVISIONS
    galley_keys = [row["operation_key"] for row in ledger if row["operation_key"].startswith("publish:")]
    assert sorted(galley_keys) == sorted(publish_key(brief_id, 1) for brief_id in summary.brief_ids)
    assert sum(row["operation_key"].startswith("direct:") for row in ledger) == REVISIONS
    assert Operation.objects.filter(kind__in=[PUBLISH, VERIFY], status="succeeded").count() == 2 * REVISIONS

    approved_at = dict(
        Approval.objects.values_list("revision__brief__public_id", "created_at").filter(decision="approved")
    )
    latencies = [
        (verified_at - approved_at[brief_id]).total_seconds()
        for brief_id, verified_at in Publication.objects.values_list("brief__public_id", "verified_at")
    ]
    first_approval = Approval.objects.aggregate(at=Min("created_at"))["at"]
    last_approval = Approval.objects.aggregate(at=Max("created_at"))["at"]
    last_verified = Publication.objects.aggregate(at=Max("verified_at"))["at"]
    galley_seconds = (last_verified - first_approval).total_seconds()
    approving_seconds = (last_approval - first_approval).total_seconds()
    publish_ms = percentile(
        list(Attempt.objects.filter(operation__kind=PUBLISH).values_list("duration_ms", flat=True)), 0.5
    )
    bench_report(
        Result(
            name=f"publish e2e: {REVISIONS} approvals",
            figure=REVISIONS / galley_seconds,
            unit="verified/s",
            baseline=REVISIONS / direct_seconds,
            baseline_unit="publishes/s",
            baseline_label="1 TargetClient, sequential, no DB",
            notes=(
                f"{WORKERS} run_worker x {CONCURRENCY} in flight, target +{LATENCY_MS} ms/POST; "
                f"approval->published p50 {percentile(latencies, 0.5):.2f} s, p95 {percentile(latencies, 0.95):.2f} s; "
                f"approvals arrived at {REVISIONS / approving_seconds:,.0f}/s; publish attempt p50 {publish_ms:.0f} ms"
            ),
        )
    )
