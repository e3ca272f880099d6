"""Claim latency with a transaction held open across the run, beside the same without (docs/operations.md#queue-health).

A transaction left open pins the MVCC horizon: every row version a claim or a finish leaves behind stays,
and each later claim reads past the dead index entries of every operation claimed before it. PlanetScale
measured a claim's lock time rising from 2-3 ms to about 180 ms at 24k dead tuples ("Keeping a Postgres
queue healthy"). Each round, in two copies of the migrated schema alternately: VACUUM (the previous round's
dead tuples go); BENCH_HORIZON_CHURN operations inserted, claimed and finished in bulk (bulk.claim_and_finish:
the row versions a claim and a finish leave, a thousand operations per transaction, at a rate no probe
reaches); then BENCH_HORIZON_CLAIMS fresh pending operations and the claim probe (claim_probe.py: one
claim_operations at a time, each completed) — in the pinned database while another session holds
`BEGIN; SELECT pg_current_xact_id()` open from before the churn to after the last claim. The figures: the
probe's p50 and p99 claim latency, the operation table's dead tuples when the probe is done
(pg_stat_user_tables.n_dead_tup, which counts dead versions whether or not they could be removed) and
after a VACUUM then (what could not be), and the pinned ÷ free ratios per round. No goal is judged.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator

import psycopg

from tests.benchmarks import bulk
from tests.benchmarks.claims import probe
from tests.benchmarks.support import HORIZON_FREE, HORIZON_PINNED, Bench, Row, percentile, phase

TABLES = ("workers_operation", "workers_attempt")
NO_GOAL = (
    "no goal: the horizon is the database's, held by whoever keeps a transaction open; Galley bounds its own"
    " sessions and warns about others' (/ops, /metrics: docs/operations.md#queue-health)"
)
CHURN = "bench-horizon-churn"  # the kind of the operations claimed and finished in bulk before the probe
DEAD_TUPLES_SQL = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'workers_operation'::regclass"


@contextlib.contextmanager
def held_open(bench: Bench, database: str) -> Iterator[None]:
    """A transaction with an id, open on a session of its own until the block ends (as a forgotten psql holds it)."""
    with bench.postgres.connect(database, autocommit=False) as holder:
        holder.execute("SELECT pg_current_xact_id()")
        yield
        holder.rollback()


def dead_tuples(conn: psycopg.Connection) -> int:
    """n_dead_tup of the operation table once it stopped moving: the probe's backend reports its counts as it exits."""
    last = None
    while True:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(DEAD_TUPLES_SQL).fetchone()
        value = int(row[0]) if row else 0
        if value == last:
            return value
        last = value
        time.sleep(0.3)


def measure(bench: Bench, database: str, *, number: int) -> tuple[list[float], int, int]:
    """One probe: its claim latencies, the operation table's dead tuples after it and after a VACUUM then."""
    claims, churn = bench.sizes.horizon_claims, bench.sizes.horizon_churn
    with bench.postgres.connect(database) as conn:
        bulk.vacuum_analyze(conn, *TABLES)
    pinned = database == HORIZON_PINNED
    with held_open(bench, database) if pinned else contextlib.nullcontext():
        with bench.postgres.connect(database) as conn:
            bulk.insert_pending_operations(conn, kind=CHURN, count=churn, first=number * churn)
            bulk.claim_and_finish(conn, kind=CHURN)
        latencies = probe(bench, database, claims=claims, first=number * claims, log_name=f"{database}-{number}")
        with bench.postgres.connect(database) as conn:
            after_probe = dead_tuples(conn)
            # What vacuum can remove: everything with no transaction held open, nothing since it began beside one.
            conn.execute("VACUUM workers_operation")
            return latencies, after_probe, dead_tuples(conn)


def run(bench: Bench) -> list[Row]:
    sizes = bench.sizes
    databases = (HORIZON_FREE, HORIZON_PINNED)
    p50: dict[str, list[float]] = {database: [] for database in databases}
    p99: dict[str, list[float]] = {database: [] for database in databases}
    dead: dict[str, list[float]] = {database: [] for database in databases}
    kept: dict[str, list[float]] = {database: [] for database in databases}
    for number in range(sizes.rounds):
        for database in databases:
            with phase(f"horizon round {number + 1}/{sizes.rounds}: {sizes.horizon_claims} claims in {database}"):
                latencies, tuples, left = measure(bench, database, number=number)
            p50[database].append(statistics.median(latencies))
            p99[database].append(percentile(latencies, 0.99))
            dead[database].append(float(tuples))
            kept[database].append(float(left))
    free, pinned = "no transaction held open", "a transaction held open"

    def ratio(figures: dict[str, list[float]]) -> list[float]:
        return [a / b for a, b in zip(figures[HORIZON_PINNED], figures[HORIZON_FREE], strict=True)]

    return [
        Row(
            f"claim latency p50, {free}",
            p50[HORIZON_FREE],
            "ms",
            section=(
                f"claims beside a pinned MVCC horizon: {sizes.horizon_churn:,} operations claimed and finished,"
                f" then {sizes.horizon_claims} claims (each completed) per probe"
            ),
        ),
        Row(f"claim latency p50, {pinned}", p50[HORIZON_PINNED], "ms"),
        Row(f"claim latency p99, {free}", p99[HORIZON_FREE], "ms"),
        Row(f"claim latency p99, {pinned}", p99[HORIZON_PINNED], "ms"),
        Row(f"operation table dead tuples after the probe, {free}", dead[HORIZON_FREE], "tuples"),
        Row(f"operation table dead tuples after the probe, {pinned}", dead[HORIZON_PINNED], "tuples"),
        Row(f"... and left by a VACUUM then, {free}", kept[HORIZON_FREE], "tuples"),
        Row(f"... and left by a VACUUM then, {pinned}", kept[HORIZON_PINNED], "tuples"),
        Row("claim p50 held open ÷ not (per round)", ratio(p50), "x", note=NO_GOAL),
        Row("claim p99 held open ÷ not (per round)", ratio(p99), "x"),
    ]
