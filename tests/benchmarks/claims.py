"""Claim latency beside many finished operations: BENCH_FINISHED_LARGE (1M) against BENCH_FINISHED_SMALL (10k).

Two copies of the migrated schema get finished operations (publish/verify pairs that succeeded, with
their attempts and dependency edges: bulk.py), then VACUUM ANALYZE (what autovacuum does after a bulk load).
Each round, in each database alternately (small, large): BENCH_CLAIMS fresh pending operations, then a
probe process (claim_probe.py) claims them one by one through claim_operations and completes each; the
figure is the probe's median claim latency. The goal compares the two in each round.
"""

from __future__ import annotations

import json
import statistics
from concurrent.futures import ThreadPoolExecutor

from tests.benchmarks import bulk
from tests.benchmarks.support import (
    CLAIMS_LARGE,
    CLAIMS_SMALL,
    Bench,
    BenchError,
    Goal,
    Row,
    galley_env,
    percentile,
    phase,
    tail,
)
from tests.processes import start

TABLES = ("workers_operation", "workers_attempt", "workers_dependency")
CHUNK = 200_000  # finished operations per loading transaction; two load at once (a 2-core machine)


def load_finished(bench: Bench, database: str, count: int) -> None:
    def load(start: int) -> None:
        with bench.postgres.connect(database) as conn:
            bulk.insert_finished_operations(conn, count=min(CHUNK, count - start), offset=start // 2)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(load, range(0, count, CHUNK)))
    with bench.postgres.connect(database) as conn:
        bulk.vacuum_analyze(conn, *TABLES)


def probe(bench: Bench, database: str, *, claims: int, first: int, log_name: str) -> list[float]:
    with bench.postgres.connect(database) as conn:
        bulk.insert_pending_operations(conn, kind="bench-claim", count=claims, first=first)
    log = bench.logs / f"{log_name}.log"
    process = start(["-m", "tests.benchmarks.claim_probe", str(claims)], env=galley_env(bench.url(database)), log=log)
    if process.wait(timeout=120 + claims) != 0:
        raise BenchError(f"the claim probe failed\n{tail(log)}")
    return json.loads(log.read_text().splitlines()[-1])


def run(bench: Bench) -> list[Row]:
    sizes = bench.sizes
    databases = {CLAIMS_SMALL: sizes.finished_small, CLAIMS_LARGE: sizes.finished_large}
    for database, finished in databases.items():
        with (
            phase(f"claims: {finished:,} finished operations into {database}"),
        ):
            load_finished(bench, database, finished)
    medians: dict[str, list[float]] = {database: [] for database in databases}
    p95: dict[str, list[float]] = {database: [] for database in databases}
    for number in range(sizes.rounds):
        for database in databases:
            with phase(f"claims round {number + 1}/{sizes.rounds}: {sizes.claims} claims in {database}"):
                values = probe(
                    bench,
                    database,
                    claims=sizes.claims,
                    first=number * sizes.claims,
                    log_name=f"claims-{database}-{number}",
                )
            medians[database].append(statistics.median(values))
            p95[database].append(percentile(values, 0.95))
    small, large = f"{sizes.finished_small:,}", f"{sizes.finished_large:,}"
    return [
        Row(
            f"claim latency p50 beside {small} finished operations",
            medians[CLAIMS_SMALL],
            "ms",
            section=f"claim latency: claim_operations (batch of 1), {sizes.claims} claims per probe",
        ),
        Row(f"claim latency p50 beside {large} finished operations", medians[CLAIMS_LARGE], "ms"),
        Row(f"claim latency p95 beside {small} finished operations", p95[CLAIMS_SMALL], "ms"),
        Row(f"claim latency p95 beside {large} finished operations", p95[CLAIMS_LARGE], "ms"),
        Row(
            f"claim p50 at {large} ÷ at {small} (per round)",
            [a / b for a, b in zip(medians[CLAIMS_LARGE], medians[CLAIMS_SMALL], strict=True)],
            "x",
            goal=Goal(1.5, at_most=True, unit="x"),
        ),
    ]
