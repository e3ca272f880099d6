"""(g) One worker's resident memory over BENCH_RSS_OPERATIONS (100k) operations.

It runs last, until the operations are done or the run's BENCH_BUDGET_SECONDS is spent (at least 60 s):
then its rows say how many operations it ran, and the goal (flat over 100k) is not judged.

What is measured: one `manage.py run_worker` process (GALLEY_WORKER_CONCURRENCY 8: Galley's
defaults) on a database of its own, draining that many pending operations of a no-op kind (noop.py: the
handler does nothing and returns Success(), so every operation goes through Galley's claim, attempt rows,
thread pool, fenced completion and doorbell, but makes no network call). Its RSS (the process and any
children, from /proc) and the number of succeeded operations are sampled every second. Growth is the
last sample's RSS over the RSS when the warm-up (the first 10% of the operations) was done.
"""

from __future__ import annotations

import time

from tests.benchmarks import bulk
from tests.benchmarks.noop import NOOP_KIND
from tests.benchmarks.support import (
    RSS,
    Bench,
    BenchError,
    CpuMeter,
    Goal,
    Monitor,
    Row,
    galley_env,
    halt,
    phase,
    tail,
    tree_rss_bytes,
)
from tests.processes import start

WARM_UP_SHARE = 0.1


def run(bench: Bench) -> list[Row]:
    operations = bench.sizes.rss_operations
    with bench.postgres.connect(RSS) as conn:
        bulk.insert_pending_operations(conn, kind=NOOP_KIND, count=operations)
    log = bench.logs / "rss-worker.log"
    argv = ["-m", "tests.benchmarks.noop", "--until-idle", "--worker-id", "bench-rss", "--kind", NOOP_KIND]
    worker = start(argv, env=galley_env(bench.url(RSS)), log=log)
    monitor = Monitor(bench.postgres, RSS)
    samples: list[tuple[float, int, int]] = []  # (time.time(), succeeded operations, RSS bytes)
    groups = {"worker": [worker.pid], "postgres": [bench.postgres.postmaster_pid()]}
    capped = False
    try:
        with (
            phase(f"RSS: one run_worker over {operations:,} no-op operations"),
            CpuMeter(groups, exclude={monitor.pid}, interval=0.5) as meter,
        ):
            allowed = max(60.0, bench.sizes.budget_seconds - (time.monotonic() - bench.started) - 10)
            deadline = time.monotonic() + allowed
            while worker.poll() is None:
                done = monitor.value("SELECT count(*) FROM workers_operation WHERE status = 'succeeded'")
                samples.append((time.time(), done, tree_rss_bytes(worker.pid)))
                if time.monotonic() > deadline:
                    capped = True
                    break
                time.sleep(1.0)
            if not capped:
                done = monitor.value("SELECT count(*) FROM workers_operation WHERE status = 'succeeded'")
                if worker.returncode != 0 or done != operations:
                    raise BenchError(f"the RSS worker ran {done} of {operations} operations\n{tail(log)}")
    finally:
        halt(worker)
        monitor.close()
    last = samples[-1]
    warm = next(sample for sample in samples if sample[1] >= WARM_UP_SHARE * last[1])
    growth = 100 * (last[2] - warm[2]) / warm[2]
    measured_operations = max(1, last[1] - warm[1])
    worker_ms = 1000 * meter.seconds("worker", warm[0], last[0]) / measured_operations
    cpu_ms = worker_ms + 1000 * meter.seconds("postgres", warm[0], last[0]) / measured_operations
    rate = measured_operations / (last[0] - warm[0]) if last[0] > warm[0] else float("nan")
    mib = 1024 * 1024
    section = f"(g) one run_worker over {last[1]:,} no-op operations (RSS sampled every second)"
    unjudged = f"n/a: {last[1]:,} of {operations:,} ops in {allowed:.0f} s" if capped else ""
    return [
        Row(
            "(g) worker RSS after the warm-up",
            [warm[2] / mib],
            "MiB",
            section=section,
            note=f"warm-up: the first {WARM_UP_SHARE:.0%} of the operations run; last sample at {last[1]:,}; "
            f"{rate:,.0f} no-op operations/s through one run_worker",
        ),
        Row("(g) worker RSS at the end", [last[2] / mib], "MiB"),
        Row("(g) worker RSS peak", [max(sample[2] for sample in samples) / mib], "MiB"),
        Row(
            "(g) worker RSS growth after the warm-up",
            [growth],
            "%",
            goal=Goal(5, at_most=True, strict=True, unit=" %"),
            unjudged=unjudged,
        ),
        Row(
            "Galley CPU per no-op operation, one run_worker (worker + PostgreSQL)",
            [cpu_ms],
            "ms",
            note="the machinery alone (claim, attempt, fenced completion, doorbell); the throughput figure sets "
            "4 run_worker processes of it beside Procrastinate's no-op jobs, round by round",
        ),
        Row("  of which the worker process", [worker_ms], "ms"),
    ]
