"""(e) Approval → published at a steady rate (BENCH_APPROVALS_PER_SECOND, 20) through `qcluster`.

One `manage.py qcluster` (Galley's settings, its sweep schedule running) and the reference target (+0 ms)
run for every round. Each round approves BENCH_LATENCY_SECONDS times the rate revisions through the decision action
(each in its own transaction, as the view does), on an open-loop schedule: approval i is due at
i / rate seconds, whether or not earlier ones were published (four threads, so that one slow approval
does not hold the next). The latency of a revision is its publication's verified_at (the read-back showed
it: "published") minus its approval's created_at, both from the database.
"""

from __future__ import annotations

import time

from tests.benchmarks import bulk
from tests.benchmarks.support import (
    MAIN,
    Bench,
    BenchError,
    Goal,
    Row,
    approve_revisions,
    galley_env,
    halt,
    percentile,
    phase,
    start_qcluster,
    wait_for_qcluster,
)


def latencies(first: int, last: int) -> list[float]:
    from approvals.models import Approval
    from publishing.models import Publication

    approved = dict(
        Approval.objects.filter(revision__brief__id__range=(first, last), decision="approved").values_list(
            "revision__brief_id", "created_at"
        )
    )
    published = Publication.objects.filter(brief__id__range=(first, last), verified_at__isnull=False)
    return [
        (verified - approved[brief]).total_seconds()
        for brief, verified in published.values_list("brief_id", "verified_at")
    ]


def run(bench: Bench) -> list[Row]:
    from publishing.models import Publication

    sizes = bench.sizes
    per_round = max(1, round(sizes.approvals_per_second * sizes.latency_seconds))
    with bench.postgres.connect(MAIN) as conn:
        conn.execute("DELETE FROM django_q_ormq")
        conn.execute("UPDATE django_q_schedule SET next_run = now() WHERE name = 'galley-sweep'")
        ranges = [
            bulk.insert_briefs(
                conn,
                count=per_round,
                author_id=bench.editor_id,
                approver_id=bench.approver_id,
                mixed=False,
                label=f"Latency {number}",
            )
            for number in range(sizes.rounds)
        ]
    env = galley_env(bench.url(MAIN), bench.targets[0], GALLEY_Q_WORKERS=str(sizes.workers))
    cluster = start_qcluster(env, bench.logs / "latency.log")
    p50, p95, worst, achieved = [], [], [], []
    try:
        wait_for_qcluster(cluster, workers=sizes.workers)
        time.sleep(1.0)
        for number, (first, last) in enumerate(ranges):
            with phase(
                f"latency round {number + 1}/{sizes.rounds}: {per_round} approvals at {sizes.approvals_per_second:g}/s"
            ):
                achieved.append(approve_revisions(bench.approver_id, first, last, rate=sizes.approvals_per_second))
                deadline = time.monotonic() + 60 + per_round / 5
                while (
                    Publication.objects.filter(brief__id__range=(first, last), verified_at__isnull=False).count()
                    < per_round
                ):
                    if cluster[0].poll() is not None or time.monotonic() > deadline:
                        raise BenchError(f"latency round {number + 1}: not every approval was published in time")
                    time.sleep(0.2)
                values = latencies(first, last)
                p50.append(percentile(values, 0.5))
                p95.append(percentile(values, 0.95))
                worst.append(max(values))
                print(
                    f"        p50 {p50[-1]:.3f} s, p95 {p95[-1]:.3f} s, max {worst[-1]:.3f} s; "
                    f"approvals at {achieved[-1]:.1f}/s",
                    flush=True,
                )
    finally:
        halt(cluster[0], grace=2.0)
    section = (
        f"(e) approval → published through qcluster at {sizes.approvals_per_second:g} approvals/s, "
        f"{per_round} approvals per round, target +0 ms"
    )
    return [
        Row("(e) approval → published p50", p50, "s", section=section),
        Row("(e) approval → published p95", p95, "s", goal=Goal(0.5, at_most=True, strict=True, unit=" s")),
        Row("(e) approval → published max", worst, "s"),
        Row("(e) approvals achieved by the open-loop generator", achieved, "/s"),
    ]
