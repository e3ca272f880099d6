"""(s) The same-second spike (docs/invariants.md#i15): BENCH_SPIKE publishes all scheduled for one second T,
a few seconds ahead, through 4 `run_worker` processes against the reference target (+0 ms), and how late
each is: its first claim (first attempt's start) - T, and its verified publication - T. Beside it, in the
same round, the psycopg ceiling (ceiling_worker.py) with as many jobs due at its own T: the fastest a
claim loop on the same table and server takes them. Rounds interleave (Galley, then the ceiling).

Galley's round: its backlog is committed first (bulk briefs, each revision approved through the real action:
throughput.commit_backlog), its publishes held an hour ahead; the workers start and say they are ready;
then one statement moves every publish to T = the next whole second + SPIKE_LEAD_SECONDS, and rings the
doorbell (so idle workers wait for T, not for their poll). Every time is the database's (statement_timestamp
for T and the claims, verified_at), so nothing depends on a worker's clock. A claim before T would be an
embargo broken: the round fails.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.benchmarks import bulk
from tests.benchmarks.support import (
    CEILING,
    MAIN,
    Bench,
    BenchError,
    Monitor,
    Row,
    check_alive,
    galley_env,
    halt,
    percentile,
    phase,
    start_run_workers,
    wait_for_lines,
)
from tests.benchmarks.throughput import SETTLE_SECONDS, commit_backlog, start_ceiling_workers, wait_for_ceiling_workers

SPIKE_LEAD_SECONDS = 3  # T is this far past the next whole second when the spike is set


def publishes(source: str = "workers_operation o") -> str:
    """The round's publish operations `o` (briefs %(first)s..%(last)s), joined from `source`."""
    return f"""
    FROM {source} JOIN publishing_brief b ON o.subject_type = 'brief' AND o.subject_id = b.public_id
    WHERE b.id BETWEEN %(first)s AND %(last)s AND o.kind = 'publish'
    """


PUBLISHES = publishes()
FIRST_ATTEMPTS = publishes("workers_attempt a JOIN workers_operation o ON a.operation_id = o.id") + " AND a.number = 1"
VERIFIED = publishes("publishing_publication p JOIN workers_operation o ON p.operation_key = o.key")
VERIFIED += " AND p.verified_at IS NOT NULL"
# p50 / p99 / max of a lateness in seconds (a column expression `late`) over a row source.
PERCENTILES = """
    SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY late), percentile_disc(0.99) WITHIN GROUP (ORDER BY late),
           max(late), min(late), count(*)
"""


@dataclass(frozen=True)
class Lateness:
    """Seconds past T, over every unit of one round."""

    p50: float
    p99: float
    max: float
    min: float
    count: int

    @classmethod
    def of(cls, values: list[float]) -> Lateness:
        return cls(percentile(values, 0.5), percentile(values, 0.99), max(values), min(values), len(values))

    @classmethod
    def from_row(cls, row: tuple[float, float, float, float, int]) -> Lateness:
        p50, p99, most, least, count = row
        return cls(float(p50), float(p99), float(most), float(least), int(count))


@dataclass(frozen=True)
class SpikeRound:
    claimed: Lateness  # first claim - T
    done: Lateness  # Galley: verified - T; the ceiling: completed - T


def _set_due(monitor: Monitor, sql: str, params: dict[str, object]) -> float:
    """Run `sql` (it sets T and returns it as an epoch) and ring the doorbell in one transaction; T."""
    monitor.conn.execute("BEGIN")
    due = float(monitor.conn.execute(sql, params).fetchone()[0])  # type: ignore[arg-type,index]
    monitor.conn.execute("SELECT pg_notify('galley_doorbell', '')")
    monitor.conn.execute("COMMIT")
    monitor.transactions += 1
    return due


def galley_spike(bench: Bench, *, count: int, label: str) -> SpikeRound:
    seeding = time.monotonic()
    first, last = commit_backlog(bench, count=count, label=label)
    print(f"        {count} approvals committed in {time.monotonic() - seeding:.1f} s", flush=True)
    params: dict[str, object] = {"first": first, "last": last, "lead": SPIKE_LEAD_SECONDS}
    with bench.postgres.connect(MAIN) as conn:
        conn.execute(
            "UPDATE workers_operation SET scheduled_for = statement_timestamp() + interval '1 hour', "  # type: ignore[arg-type]
            f"next_attempt_at = statement_timestamp() + interval '1 hour' WHERE id IN (SELECT o.id {PUBLISHES})",
            params,
        )
    env = galley_env(bench.url(MAIN), bench.targets[0])
    children = start_run_workers(env, bench.logs, count=bench.sizes.workers, name=label)
    monitor = Monitor(bench.postgres, MAIN)
    try:
        wait_for_lines(children, "publishing target:")
        time.sleep(SETTLE_SECONDS)
        due = _set_due(
            monitor,
            "WITH t AS (SELECT date_trunc('second', statement_timestamp()) + make_interval(secs => %(lead)s) AS at) "
            f"UPDATE workers_operation SET scheduled_for = t.at, next_attempt_at = t.at FROM t "
            f"WHERE id IN (SELECT o.id {PUBLISHES}) RETURNING extract(epoch FROM t.at)",
            params,
        )
        print(f"        {count} publishes due at {time.strftime('%H:%M:%S', time.gmtime(due))} UTC", flush=True)
        monitor.wait_for(
            "SELECT count(*) FROM publishing_publication WHERE brief_id BETWEEN %s AND %s AND verified_at IS NOT NULL",
            [first, last],
            until=lambda done: done >= count,
            timeout=120 + count / 5,
            what=f"{label}: {count} verified publications",
            every=0.2,
            check=check_alive(children),
        )
    finally:
        for process, _ in children:
            halt(process, grace=2.0)
        monitor.close()
    with bench.postgres.connect(MAIN) as conn:
        unfinished = conn.execute(f"SELECT count(*) {PUBLISHES} AND o.status <> 'succeeded'", params).fetchone()  # type: ignore[arg-type]
        claimed, done = (
            conn.execute(
                f"{PERCENTILES} FROM (SELECT extract(epoch FROM {moment} - o.scheduled_for)::float AS late "  # type: ignore[arg-type]
                f"{source}) AS spike",
                params,
            ).fetchone()
            for moment, source in (("a.started_at", FIRST_ATTEMPTS), ("p.verified_at", VERIFIED))
        )
    result = SpikeRound(Lateness.from_row(claimed), Lateness.from_row(done))  # type: ignore[arg-type]
    if unfinished != (0,) or result.claimed.count != count or result.done.count != count:
        raise BenchError(f"{label}: not every scheduled publish succeeded and was verified once: {result}")
    if result.claimed.min < 0:
        raise BenchError(f"{label}: a publish was claimed {-result.claimed.min:.3f} s before its time T")
    return result


def ceiling_spike(bench: Bench, *, count: int, offset: int) -> SpikeRound:
    """The psycopg ceiling's `count` jobs, all due at one T; each worker polls every 5 ms until its first claim."""
    with bench.postgres.connect(CEILING) as conn:
        bulk.insert_pending_operations(conn, kind="bench-spike", count=count, first=offset)
    monitor = Monitor(bench.postgres, CEILING)
    try:
        due = _set_due(
            monitor,
            "WITH t AS (SELECT date_trunc('second', statement_timestamp()) + make_interval(secs => %(lead)s) AS at) "
            "UPDATE workers_operation SET next_attempt_at = t.at FROM t "
            "WHERE kind = 'bench-spike' AND status = 'pending' RETURNING extract(epoch FROM t.at)",
            {"lead": SPIKE_LEAD_SECONDS + 2},  # the workers start after T is set: Python starts in well under 2 s
        )
    finally:
        monitor.close()
    children = start_ceiling_workers(bench, name=f"spike-ceiling-{offset}", extra=(str(due),))
    try:
        reports = wait_for_ceiling_workers(children, timeout=60 + count / 50)
    finally:
        for process, _ in children:
            halt(process)
    claimed = [late for report in reports for late in report["claimed"]]
    completed = [late for report in reports for late in report["completed"]]
    if len(claimed) != count:
        raise BenchError(f"the ceiling workers finished {len(claimed)} of {count} spike jobs")
    return SpikeRound(Lateness.of(claimed), Lateness.of(completed))


def run(bench: Bench) -> list[Row]:
    sizes = bench.sizes
    galley: list[SpikeRound] = []
    ceiling: list[SpikeRound] = []
    for number in range(sizes.rounds):
        with phase(f"round {number + 1}/{sizes.rounds}: spike, Galley {sizes.workers} run_worker"):
            galley.append(galley_spike(bench, count=sizes.spike, label=f"spike-r{number}"))
        print(f"        {galley[-1]}", flush=True)
        with phase(f"round {number + 1}/{sizes.rounds}: spike, psycopg ceiling"):
            ceiling.append(ceiling_spike(bench, count=sizes.spike, offset=number * sizes.spike))
        print(f"        {ceiling[-1]}", flush=True)

    def figures(measured: list[SpikeRound], what: str, name: str, unit: str = "s") -> list[Row]:
        def side(r: SpikeRound) -> Lateness:
            return r.claimed if what == "claimed" else r.done

        return [
            Row(f"{name} p50", [side(r).p50 for r in measured], unit),
            Row(f"{name} p99", [side(r).p99 for r in measured], unit),
            Row(f"{name} max", [side(r).max for r in measured], unit),
        ]

    section = (
        f"spike: {sizes.spike} publishes scheduled for one second T ({SPIKE_LEAD_SECONDS} s ahead), "
        f"{sizes.workers} run_worker, target +0 ms; beside {sizes.spike} ceiling jobs due at one T"
    )
    rows = [
        *figures(galley, "claimed", "(s) Galley first claim - T"),
        *figures(galley, "done", "(s) Galley published and verified - T"),
        *figures(ceiling, "claimed", f"(s) psycopg ceiling claim - T, {sizes.workers} processes"),
        *figures(ceiling, "done", "(s) psycopg ceiling completed - T"),
        Row(
            "Galley last first claim - T ÷ ceiling last claim - T (per round)",
            [g.claimed.max / c.claimed.max for g, c in zip(galley, ceiling, strict=True) if c.claimed.max > 0],
            "x",
            note="Galley's workers claim the publishes and, between them, the verifications each publish writes; "
            "the ceiling's job is one claim and one fenced complete",
        ),
    ]
    rows[0].section = section
    return rows
