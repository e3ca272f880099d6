"""``python -m tests.benchmarks`` (``make bench``): Galley's figures beside peers measured in the same run.

It starts its own embedded PostgreSQL (DATABASE_URL is ignored: the bench creates databases and changes
the server's logging), migrates it, starts two reference targets (+0 ms and +50 ms on every POST), and
runs the figures named by BENCH_ONLY, printing one table at the end. Sizes come from BENCH_* variables
(see support.Sizes; printed at the start). The figures:

- throughput.py   (a) Galley verified publications/s through qcluster (+0 ms, +50 ms) and run_worker on
                  one channel, and through qcluster on three channels (per channel-publication and per
                  story), (b) the psycopg ceiling, (c) django-q2 and (d) Procrastinate no-op jobs/s,
                  Galley's no-op operations/s, and the same job as a naive pipeline in django-q2 and in
                  Procrastinate (naive/), interleaved, with CPU and transactions per unit (BENCH_STEPS:
                  some of its rounds alone);
- roundtrips.py   round trips and transactions per publication, from PostgreSQL's statement log;
- latency.py      (e) approval → published p50/p95 at 20 approvals/s through qcluster;
- pages.py        (f) dashboard and brief list p95 and query counts with 100k briefs;
- claims.py       claim latency beside 1M finished operations vs 10k;
- horizon.py      claim latency p50/p99 and dead tuples with a transaction held open across the run, beside
                  the same without;
- spike.py        lateness of 10k publishes scheduled for the same second (first claim - T, verified - T)
                  through 4 run_worker, beside the psycopg ceiling's jobs due in that second;
- rss.py          (g) a run_worker's RSS over 100k operations.
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks.support import (
    MAIN,
    PROCRASTINATE,
    TEMPLATES,
    Bench,
    Postgres,
    Row,
    Sizes,
    Target,
    format_table,
    galley_env,
    halt,
    phase,
    start_target,
)
from tests.processes import manage

# The figures' modules, in running order.
FIGURES = ("throughput", "roundtrips", "latency", "pages", "claims", "horizon", "spike", "rss")


def prepare(sizes: Sizes, logs: Path, started: float, postgres: Postgres, targets: dict[int, Target]) -> Bench:
    """Migrate, make the databases, set Django up in this process, start the targets (into `targets`)."""
    postgres.execute(f"CREATE DATABASE {MAIN}")
    migrate = manage("migrate", "--noinput", env=galley_env(postgres.url(MAIN)), log=logs / "migrate.log")
    if migrate.wait(timeout=600) != 0:
        raise SystemExit(f"migrate failed:\n{(logs / 'migrate.log').read_text()}")
    for database in TEMPLATES:  # copies of the migrated, still empty schema
        postgres.execute(f"CREATE DATABASE {database} TEMPLATE {MAIN}")
    postgres.execute(f"CREATE DATABASE {PROCRASTINATE}")

    os.environ.update(DATABASE_URL=postgres.url(MAIN), BENCH_PROCRASTINATE_DSN=postgres.url(PROCRASTINATE))
    import django

    django.setup()
    # The bench's own INFO lines (every enqueue, every HTTP call) would bury its output.
    logging.getLogger().setLevel(logging.WARNING)
    from procrastinate.schema import SchemaManager

    from publishing.demo.simulation import ensure_simulation_user
    from publishing.roles import Role

    postgres.execute(SchemaManager.get_schema(), PROCRASTINATE)
    # The hourly purge finds nothing to purge here; held off so that it does not run in a measured window.
    postgres.execute(
        "UPDATE django_q_schedule SET next_run = now() + interval '1 day' WHERE name = 'galley-purge'", MAIN
    )
    editor = ensure_simulation_user("bench-editor", Role.EDITOR)
    approver = ensure_simulation_user("bench-approver", Role.APPROVER)
    for latency in (0, 50):
        targets[latency] = start_target(logs, latency_ms=latency)
    return Bench(sizes, started, postgres, logs, targets, editor_id=editor.pk, approver_id=approver.pk)


def main() -> int:
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so that every worker, target and the server are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = time.monotonic()
    sizes = Sizes.from_environment()
    unknown = {name.strip() for name in sizes.only.split(",")} - set(FIGURES)
    if unknown:
        raise SystemExit(f"BENCH_ONLY: unknown figures {sorted(unknown)}; choose from {', '.join(FIGURES)}")
    logs = Path(tempfile.mkdtemp(prefix="galley-bench-"))
    print("Galley benchmarks; sizes (set BENCH_<NAME> to change):", flush=True)
    for line in sizes.describe():
        print(f"  {line}")
    print(f"logs in {logs}", flush=True)
    # Every process of the bench (this one and its children) shares one secret key and plain settings.
    os.environ.update(DJANGO_SETTINGS_MODULE="galley.settings", DEBUG="false")
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    postgres: Postgres | None = None
    targets: dict[int, Target] = {}
    rows: list[Row] = []
    try:
        with phase("setup: embedded PostgreSQL, migrate, databases, reference targets"):
            postgres = Postgres()
            bench = prepare(sizes, logs, started, postgres, targets)
        print(
            f"PostgreSQL {bench.postgres.version()}; pg_stat_statements available: "
            f"{bench.postgres.has_extension('pg_stat_statements')}",
            flush=True,
        )
        for figure in FIGURES:
            if sizes.runs(figure):
                rows.extend(importlib.import_module(f"tests.benchmarks.{figure}").run(bench))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        for target in targets.values():
            halt(target.process)
        if postgres is not None:
            postgres.cleanup()
        print_table(rows)
        print(f"make bench ran {time.monotonic() - started:.0f} s", flush=True)
    return 0


def print_table(rows: list[Row]) -> None:
    if not rows:
        return
    print()
    print("=" * 40 + " Galley benchmarks: min / median / max over rounds; goals judged on the median " + "=" * 10)
    table = format_table(rows)
    print(table[0])
    print(table[1])
    for row, line in zip(rows, table[2:], strict=True):
        if row.section:
            print(f"-- {row.section}")
        print(line)
    notes = [f"  {row.name.strip()}: {row.note}" for row in rows if row.note]
    if notes:
        print("notes:")
        print("\n".join(notes))
    goals = [row for row in rows if row.goal is not None and row.values and not row.unjudged]
    met = sum(row.goal.met(row.median) for row in goals)  # type: ignore[union-attr]
    print(f"goals met: {met} of {len(goals)}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
