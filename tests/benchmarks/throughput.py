"""(a)-(d): Galley's throughput through the production path beside its peers, interleaved round by round
on the same PostgreSQL, and what each unit of work costs in CPU and transactions.

Each round runs, in this order (ROUNDS; BENCH_STEPS runs some of them alone): Galley through `qcluster`
(target +0 ms), django-q2 no-op tasks, the naive pipeline in django-q2, Galley through `qcluster` (target
+50 ms), Procrastinate no-op jobs, Galley's no-op operations through 4 `run_worker` processes, the naive
pipeline in Procrastinate, Galley through 4 `run_worker` processes (target +0 ms), the psycopg ceiling,
Galley through `qcluster` on three channels.

"The same job, measured": the naive pipeline (naive/pipeline.py) does what Galley's publish and verify do
as a user of a task queue would write it — POST the revision to the reference target (+0 ms, the target of
Galley's qcluster +0 ms round), read it back, fetch the permalink, save a row through the ORM — at least
once (its queue's retry), without look-up, lease or fencing; one task per revision, the same backlog and
worker count as Galley's. Galley's publications/s and CPU per publication (qcluster +0 ms) are set beside
it round by round. Galley's no-op operations (noop.py) measure its machinery alone beside Procrastinate's
no-op jobs.

Galley's rounds publish on one channel, the primary channel `web` (the settings' target), except the
last: there two more reference targets (+0 ms) are enabled as default channels before its backlog is
committed, so every approval fans out to three channels (publishing.selectors.channel_sets), and are
disabled again after it. Its unit is one channel's verified publication; its stories are verified on
all three.

Every system gets the same treatment:
- its backlog is committed first (Galley: approvals through check_decide_revision, each in its own
  transaction as the decision view does, ringing its doorbell; the peers: their own enqueue);
- the bench holds an EXCLUSIVE lock on the table the workers claim from (the starting gate), starts the
  workers, waits until every one has started (Django loaded, connections open, startup checks done), then
  releases the gate: no start-up is measured, and no load generator runs while the workers do;
- the window: Galley from its first claim to its last verification (Attempt.started_at, Publication.
  verified_at), its no-op operations to the last one's finished_at; django-q2 from the gate to its empty
  queue (polled every 20 ms); Procrastinate from its first "started" to its last "succeeded" event; the
  ceiling from its first claim to its last completion;
- CPU is read from /proc every 0.1 s (worker process trees; every PostgreSQL process but the bench's own
  connection; the target separately) and taken over the window;
- transactions: pg_stat_database.xact_commit of the system's database from before its workers start to
  after they stopped, less the bench's own, per unit: it includes the workers' start-up and idle polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen
from typing import Any

from tests.benchmarks import bulk
from tests.benchmarks.naive import CREATE_TABLE as NAIVE_TABLE_SQL
from tests.benchmarks.naive import TABLE as NAIVE_TABLE
from tests.benchmarks.noop import NOOP_KIND, noop
from tests.benchmarks.support import (
    CEILING,
    MAIN,
    NOOP,
    PROCRASTINATE,
    Bench,
    BenchError,
    CpuMeter,
    Goal,
    Measured,
    Monitor,
    Row,
    Target,
    approve_revisions,
    check_alive,
    galley_env,
    halt,
    phase,
    start_qcluster,
    start_run_workers,
    start_target,
    tail,
    wait_for_lines,
    wait_for_qcluster,
)
from tests.processes import process_env, start

SETTLE_SECONDS = 0.5  # after every worker said it started, before the gate opens
RING_AFTER_SECONDS = 3.0
FANOUT_CHANNELS = ("bench-app", "bench-partner")  # beside the primary channel in the three-channel round
WIDTH = 1 + len(FANOUT_CHANNELS)  # the channels of that round


# --- Galley -----------------------------------------------------------------------------------------


def commit_backlog(bench: Bench, *, count: int, label: str) -> tuple[int, int]:
    """`count` briefs with one revision each (bulk), then every revision approved through the real action,
    each in its own durable transaction (support.approve_revisions). Returns the briefs' id range."""
    with bench.postgres.connect(MAIN) as conn:
        conn.execute("DELETE FROM django_q_ormq")  # tasks earlier rounds left (a sweep cut short, doorbells)
        first, last = bulk.insert_briefs(
            conn, count=count, author_id=bench.editor_id, approver_id=bench.approver_id, mixed=False, label=label
        )
    approve_revisions(bench.approver_id, first, last)
    return first, last


def galley_round(
    bench: Bench,
    *,
    runner: str,
    latency_ms: int,
    backlog: int,
    label: str,
    fanout: dict[str, Target] | None = None,
) -> Measured:
    """Verified publications of a committed backlog through `qcluster` or `run_worker` processes, one unit
    per channel: on the primary channel alone, or also on the `fanout` channels (by slug), which the caller
    has enabled as default channels (fanout_channels_enabled). Fails unless every brief of the backlog is
    published and verified exactly on those channels, each through one publish operation, and a verify operation
    only where the publish could not verify in its own attempt (counted, as `durable_verifies`)."""
    from django.db import connection
    from django.db.models import Count, Max, Min

    from publishing.identities import PRIMARY_CHANNEL
    from publishing.models import Publication
    from workers.models import Attempt, Operation

    target = bench.targets[latency_ms]
    channels = {PRIMARY_CHANNEL: target, **(fanout or {})}
    expected = len(channels) * backlog
    committing = time.monotonic()
    first, last = commit_backlog(bench, count=backlog, label=label)
    print(f"        {backlog} approvals committed in {time.monotonic() - committing:.1f} s", flush=True)
    if runner == "qcluster":
        # Production runs the sweep schedule all the time (one django-q2 worker sweeps 55 s of every minute).
        bench.postgres.execute("UPDATE django_q_schedule SET next_run = now() WHERE name = 'galley-sweep'", MAIN)
    transactions_before = bench.postgres.xact_commits(MAIN)
    monitor = Monitor(bench.postgres, MAIN)
    monitor.close_gate("workers_operation")
    env = galley_env(bench.url(MAIN), target, GALLEY_Q_WORKERS=str(bench.sizes.workers))
    if runner == "qcluster":
        children = [start_qcluster(env, bench.logs / f"{label}.log")]
    else:
        children = start_run_workers(env, bench.logs, count=bench.sizes.workers, name=label)
    groups = {
        "workers": [process.pid for process, _ in children],
        "postgres": [bench.postgres.postmaster_pid()],
        "target": [channel_target.process.pid for channel_target in channels.values()],
    }
    try:
        with CpuMeter(groups, exclude={monitor.pid}) as meter:
            if runner == "qcluster":
                wait_for_qcluster(children[0], workers=bench.sizes.workers)
            else:
                wait_for_lines(children, "publishing target:")
            time.sleep(SETTLE_SECONDS)
            monitor.open_gate()
            rang = runner == "qcluster" and ring_if_idle(monitor, first, last)
            monitor.wait_for(
                "SELECT count(*) FROM publishing_publication"
                " WHERE brief_id BETWEEN %s AND %s AND verified_at IS NOT NULL",
                [first, last],
                until=lambda done: done >= expected,
                timeout=60 + expected / 5,
                what=f"{label}: {expected} verified publications",
                every=0.1,
                check=check_alive(children),
            )
    finally:
        for process, _ in children:
            halt(process, grace=2.0)
        monitor.close()
    time.sleep(0.5)  # the workers' backends have exited and flushed their statistics
    transactions = bench.postgres.xact_commits(MAIN) - transactions_before - monitor.transactions

    operations = Operation.objects.filter(subject_type="brief", subject_id__in=_public_ids(first, last))
    publishes = operations.filter(kind="publish")
    per_channel = dict(publishes.values("channel").annotate(n=Count("id")).values_list("channel", "n"))
    if operations.exclude(status="succeeded").exists() or per_channel != {slug: backlog for slug in channels}:
        raise BenchError(f"{label}: not every publish operation succeeded once per channel: {per_channel}")
    durable_verifies = operations.filter(kind="verify").count()
    publications = Publication.objects.filter(brief__id__range=(first, last))
    verified_per_channel = dict(
        publications.filter(verified_at__isnull=False)
        .values("channel__slug")
        .annotate(n=Count("id"))
        .values_list("channel__slug", "n")
    )
    if publications.count() != expected or verified_per_channel != {slug: backlog for slug in channels}:
        raise BenchError(f"{label}: not every brief is verified on every channel: {verified_per_channel}")
    attempts = Attempt.objects.filter(operation__in=operations)
    started = attempts.aggregate(at=Min("started_at"))["at"].timestamp()
    ended = publications.aggregate(at=Max("verified_at"))["at"].timestamp()
    retries = attempts.count() - expected - durable_verifies
    connection.close()
    return Measured(
        units=expected,
        seconds=ended - started,
        cpu_workers=meter.seconds("workers", started, ended),
        cpu_postgres=meter.seconds("postgres", started, ended),
        cpu_target=meter.seconds("target", started, ended),
        transactions=(transactions - rang) / expected,
        extra={"retries": retries, "rang": int(rang), "stories": backlog, "durable_verifies": durable_verifies},
    )


def start_fanout_channels(bench: Bench, targets: dict[str, Target]) -> None:
    """A reference target (+0 ms) for each of FANOUT_CHANNELS (into `targets`, by slug), registered as a
    default channel with its token sealed as an operator's would be, and left disabled until the
    three-channel round."""
    from django.db import connection

    from publishing.credentials import seal
    from publishing.models import Channel

    for slug in FANOUT_CHANNELS:
        targets[slug] = target = start_target(bench.logs, latency_ms=0, name=f"target-{slug}")
        Channel.objects.create(
            slug=slug,
            name=slug.replace("-", " ").title(),
            base_url=target.url,
            secret_sealed=seal(target.token),
            is_default=True,
            enabled=False,
        )
    connection.close()


@contextlib.contextmanager
def fanout_channels_enabled() -> Iterator[None]:
    """FANOUT_CHANNELS enabled for one round, disabled after it even if it fails, so that every other
    approval of the bench goes to the primary channel alone. Disabled, not deleted: the round's operations
    and publications keep their reference to them."""
    from django.db import connection
    from django.utils import timezone

    from publishing.models import Channel

    def enable(on: bool) -> None:
        Channel.objects.filter(slug__in=FANOUT_CHANNELS).update(enabled=on, updated_at=timezone.now())
        connection.close()

    enable(True)
    try:
        yield
    finally:
        enable(False)


def fanout_round(bench: Bench, *, targets: dict[str, Target], backlog: int, label: str) -> Measured:
    """The qcluster +0 ms round with every approval fanned out to the primary channel and FANOUT_CHANNELS."""
    with fanout_channels_enabled():
        return galley_round(bench, runner="qcluster", latency_ms=0, backlog=backlog, label=label, fanout=targets)


def ring_if_idle(monitor: Monitor, first: int, last: int) -> bool:
    """If no claim follows the gate within RING_AFTER_SECONDS, enqueue one drain task through django-q2, as
    the sweep schedule does at its next tick (up to a minute later): a cluster started after its backlog was
    committed may wait for that tick. Returns whether it rang (reported beside the figure)."""
    from django.db import connection
    from django_q.tasks import async_task

    deadline = time.monotonic() + RING_AFTER_SECONDS
    while time.monotonic() < deadline:
        claimed = monitor.value(
            "SELECT EXISTS (SELECT 1 FROM workers_operation o JOIN publishing_brief b ON o.subject_id = b.public_id "
            "WHERE b.id BETWEEN %s AND %s AND o.subject_type = 'brief' AND o.status <> 'pending')",
            [first, last],
        )
        if claimed:
            return False
        time.sleep(0.05)
    async_task("workers.tasks.drain_operations", task_name="galley-drain", save=False)
    connection.close()
    return True


def _public_ids(first: int, last: int) -> list[str]:
    from publishing.models import Brief

    return list(Brief.objects.filter(id__range=(first, last)).values_list("public_id", flat=True))


# --- the peers --------------------------------------------------------------------------------------


def djangoq_round(bench: Bench, *, jobs: int) -> Measured:
    """(c) django-q2 no-op tasks (save=False, as Galley's drain tasks)."""
    from django_q.tasks import async_task

    return run_djangoq(bench, lambda: [async_task(noop, save=False) for _ in range(jobs)], jobs, what="no-op tasks")


def naive_djangoq_round(bench: Bench, *, backlog: int, label: str) -> Measured:
    """The naive pipeline (naive/pipeline.py) in django-q2: one task per revision, enqueued with
    async_task's defaults as a user calls it (so Galley's Q_CLUSTER decides: results saved, save_limit
    200), against the reference target +0 ms."""
    from django_q.tasks import async_task

    from tests.benchmarks.naive.pipeline import job, publish

    target = bench.targets[0]
    briefs = [f"{label}-{number:05d}" for number in range(backlog)]
    measured = run_djangoq(
        bench,
        lambda: [async_task(publish, **job(brief)) for brief in briefs],
        backlog,
        what="naive publications",
        target=target,
    )
    return _checked_naive(bench, MAIN, label, measured)


def run_djangoq(
    bench: Bench, enqueue: Callable[[], object], jobs: int, *, what: str, target: Target | None = None
) -> Measured:
    """`jobs` tasks (committed by `enqueue`, in one transaction) through `manage.py qcluster` with Galley's
    settings but not Galley's apps (djangoq_settings.py), its schedules held off; the window from the gate
    to the empty queue. With `target`, the naive pipeline's: its address in the workers' environment."""
    from django.db import connection, transaction

    bench.postgres.execute("DELETE FROM django_q_ormq", MAIN)
    bench.postgres.execute("UPDATE django_q_schedule SET next_run = now() + interval '1 day'", MAIN)
    with transaction.atomic(durable=True):
        enqueue()
    connection.close()
    transactions_before = bench.postgres.xact_commits(MAIN)
    monitor = Monitor(bench.postgres, MAIN)
    monitor.close_gate("django_q_ormq")
    env = galley_env(
        bench.url(MAIN),
        GALLEY_Q_WORKERS=str(bench.sizes.workers),
        DJANGO_SETTINGS_MODULE="tests.benchmarks.djangoq_settings",
        **_naive_target_env(target),
    )
    cluster = start_qcluster(env, bench.logs / f"djangoq-{what.replace(' ', '-')}.log")
    groups = {"workers": [cluster[0].pid], "postgres": [bench.postgres.postmaster_pid()]}
    if target is not None:
        groups["target"] = [target.process.pid]
    try:
        with CpuMeter(groups, exclude={monitor.pid}) as meter:
            wait_for_qcluster(cluster, workers=bench.sizes.workers)
            time.sleep(SETTLE_SECONDS)
            started = monitor.open_gate()
            ended = monitor.wait_for(
                "SELECT count(*) FROM django_q_ormq",
                None,
                until=lambda left: left == 0,
                timeout=60 + jobs / 20,
                what=f"django-q2: {jobs} {what}",
                every=0.02,
                check=check_alive([cluster]),
            )
    finally:
        halt(cluster[0], grace=2.0)
        monitor.close()
    time.sleep(0.5)
    transactions = bench.postgres.xact_commits(MAIN) - transactions_before - monitor.transactions
    return Measured(
        units=jobs,
        seconds=ended - started,
        cpu_workers=meter.seconds("workers", started, ended),
        cpu_postgres=meter.seconds("postgres", started, ended),
        cpu_target=meter.seconds("target", started, ended) if target is not None else 0.0,
        transactions=transactions / jobs,
    )


def procrastinate_round(bench: Bench, *, jobs: int) -> Measured:
    """(d) Procrastinate no-op jobs (an async task)."""
    from tests.benchmarks.procrastinate_app import noop as procrastinate_noop

    return run_procrastinate(bench, procrastinate_noop, [{} for _ in range(jobs)], what="no-op jobs")


def naive_procrastinate_round(bench: Bench, *, backlog: int, label: str) -> Measured:
    """The naive pipeline (naive/pipeline.py) in Procrastinate: one job per revision (deferred in a batch,
    as a user defers many), its workers in Django (the ORM), against the reference target +0 ms."""
    from tests.benchmarks.naive.pipeline import job
    from tests.benchmarks.procrastinate_app import naive_publish

    target = bench.targets[0]
    jobs = [job(f"{label}-{number:05d}") for number in range(backlog)]
    measured = run_procrastinate(bench, naive_publish, jobs, what="naive publications", target=target)
    return _checked_naive(bench, PROCRASTINATE, label, measured)


def run_procrastinate(
    bench: Bench, task: Any, jobs: list[dict[str, Any]], *, what: str, target: Target | None = None
) -> Measured:
    """One job of `task` per entry of `jobs` (its arguments) through BENCH_WORKERS Procrastinate worker
    processes of concurrency 1; the window from the first "started" event to the last "succeeded". With
    `target`, the naive pipeline's: the workers set Django up (djangoq_settings.py, its database
    Procrastinate's) and get the target's address."""
    from tests.benchmarks.procrastinate_app import app

    dsn = bench.url(PROCRASTINATE)  # the app reads it from BENCH_PROCRASTINATE_DSN, set by the runner

    async def defer() -> list[int]:
        async with app.open_async():
            return await task.batch_defer_async(*jobs)

    ids = asyncio.run(defer())
    first, last = min(ids), max(ids)
    transactions_before = bench.postgres.xact_commits(PROCRASTINATE)
    monitor = Monitor(bench.postgres, PROCRASTINATE)
    monitor.close_gate("procrastinate_jobs")
    argv = ["-m", "tests.benchmarks.procrastinate_app"]
    django: dict[str, str] = {}
    if target is not None:
        argv.append("--django")
        django = {
            "DATABASE_URL": dsn,
            "DJANGO_SETTINGS_MODULE": "tests.benchmarks.djangoq_settings",
            **_naive_target_env(target),
        }
    children = []
    for number in range(bench.sizes.workers):
        log = bench.logs / f"procrastinate-{what.replace(' ', '-')}-{number}.log"
        env = galley_env(dsn, **django) if django else process_env()
        env.update(BENCH_PROCRASTINATE_DSN=dsn, BENCH_WORKER_NAME=f"bench-{number}")
        children.append((start(argv, env=env, log=log), log))
    groups = {"workers": [process.pid for process, _ in children], "postgres": [bench.postgres.postmaster_pid()]}
    if target is not None:
        groups["target"] = [target.process.pid]
    try:
        with CpuMeter(groups, exclude={monitor.pid}) as meter:
            wait_for_lines(children, "booted")
            time.sleep(1.0 + SETTLE_SECONDS)  # the worker opens its pool and registers after "booted"
            monitor.open_gate()
            monitor.wait_for(
                "SELECT count(*) FROM procrastinate_jobs WHERE id BETWEEN %s AND %s AND status = 'succeeded'",
                [first, last],
                until=lambda done: done >= len(jobs),
                timeout=60 + len(jobs) / 20,
                what=f"Procrastinate: {len(jobs)} {what}",
                every=0.05,
                check=check_alive(children),
            )
    finally:
        for process, _ in children:
            halt(process, grace=5.0)
        monitor.close()
    time.sleep(0.5)
    transactions = bench.postgres.xact_commits(PROCRASTINATE) - transactions_before - monitor.transactions
    with bench.postgres.connect(PROCRASTINATE) as conn:
        started, ended = conn.execute(
            """
            SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'started')),
                   extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded'))
            FROM procrastinate_events WHERE job_id BETWEEN %s AND %s
            """,
            [first, last],
        ).fetchone()  # type: ignore[misc]
    started, ended = float(started), float(ended)
    return Measured(
        units=len(jobs),
        seconds=ended - started,
        cpu_workers=meter.seconds("workers", started, ended),
        cpu_postgres=meter.seconds("postgres", started, ended),
        cpu_target=meter.seconds("target", started, ended) if target is not None else 0.0,
        transactions=transactions / len(jobs),
    )


def _naive_target_env(target: Target | None) -> dict[str, str]:
    return {} if target is None else {"BENCH_NAIVE_TARGET_URL": target.url, "BENCH_NAIVE_TARGET_TOKEN": target.token}


def _checked_naive(bench: Bench, database: str, label: str, measured: Measured) -> Measured:
    """Fails unless every revision of the round has its row (naive/models.py) in `database`; rows saved
    twice (a task run again: at least once) are counted beside the figure."""
    with bench.postgres.connect(database) as conn:
        rows, briefs = conn.execute(
            f"SELECT count(*), count(DISTINCT brief_id) FROM {NAIVE_TABLE} WHERE brief_id LIKE %s",
            [f"{label}-%"],
        ).fetchone()  # type: ignore[misc]
    if briefs != measured.units:
        raise BenchError(f"{label}: {briefs} of {measured.units} revisions have a naive publication row")
    measured.extra["duplicates"] = rows - briefs
    return measured


def galley_noop_round(bench: Bench, *, jobs: int, offset: int) -> Measured:
    """Galley's machinery alone: `jobs` pending operations of the no-op kind (noop.py: claim, attempt,
    fenced completion, doorbell; no network call) through BENCH_WORKERS `run_worker` processes (Galley's
    defaults, GALLEY_WORKER_CONCURRENCY 8) on a database of their own; the window from the first attempt's
    start to the last operation's finish."""
    with bench.postgres.connect(NOOP) as conn:
        bulk.insert_pending_operations(conn, kind=NOOP_KIND, count=jobs, first=offset)
    transactions_before = bench.postgres.xact_commits(NOOP)
    monitor = Monitor(bench.postgres, NOOP)
    monitor.close_gate("workers_operation")
    env = galley_env(bench.url(NOOP), bench.targets[0])  # a target, so that its startup check answers at once
    children = []
    for number in range(bench.sizes.workers):
        worker_id = f"noop-{offset}-{number}"
        log = bench.logs / f"{worker_id}.log"
        argv = ["-m", "tests.benchmarks.noop", "--worker-id", worker_id, "--kind", NOOP_KIND]
        children.append((start(argv, env=env, log=log), log))
    groups = {"workers": [process.pid for process, _ in children], "postgres": [bench.postgres.postmaster_pid()]}
    span = [str(offset + 1), str(offset + jobs)]
    try:
        with CpuMeter(groups, exclude={monitor.pid}) as meter:
            wait_for_lines(children, "publishing target:")
            time.sleep(SETTLE_SECONDS)
            monitor.open_gate()
            monitor.wait_for(
                "SELECT count(*) FROM workers_operation WHERE kind = %s AND status = 'succeeded'"
                " AND subject_id::bigint BETWEEN %s AND %s",
                [NOOP_KIND, *span],
                until=lambda done: done >= jobs,
                timeout=60 + jobs / 20,
                what=f"Galley: {jobs} no-op operations",
                every=0.05,
                check=check_alive(children),
            )
    finally:
        for process, _ in children:
            halt(process, grace=2.0)
        monitor.close()
    time.sleep(0.5)
    transactions = bench.postgres.xact_commits(NOOP) - transactions_before - monitor.transactions
    with bench.postgres.connect(NOOP) as conn:
        started, ended = conn.execute(
            """
            SELECT extract(epoch FROM min(a.started_at)), extract(epoch FROM max(o.finished_at))
            FROM workers_operation o JOIN workers_attempt a ON a.operation_id = o.id
            WHERE o.kind = %s AND o.subject_id::bigint BETWEEN %s AND %s
            """,
            [NOOP_KIND, *span],
        ).fetchone()  # type: ignore[misc]
    started, ended = float(started), float(ended)
    return Measured(
        units=jobs,
        seconds=ended - started,
        cpu_workers=meter.seconds("workers", started, ended),
        cpu_postgres=meter.seconds("postgres", started, ended),
        transactions=transactions / jobs,
    )


def start_ceiling_workers(bench: Bench, *, name: str, extra: tuple[str, ...] = ()) -> list[tuple[Popen[str], Path]]:
    """BENCH_WORKERS ceiling processes (tests/benchmarks/ceiling_worker.py) named `name`-<n>, with `extra` arguments."""
    children = []
    for number in range(bench.sizes.workers):
        worker_id = f"{name}-{number}"
        argv = ["-m", "tests.benchmarks.ceiling_worker", bench.url(CEILING), worker_id, *extra]
        log = bench.logs / f"{worker_id}.log"
        children.append((start(argv, env=process_env(), log=log), log))
    return children


def wait_for_ceiling_workers(children: list[tuple[Popen[str], Path]], *, timeout: float) -> list[dict[str, Any]]:
    """Wait until every ceiling process exits, each within `timeout` s; their reports (last JSON lines)."""
    for process, log in children:
        if process.wait(timeout=timeout) != 0:
            raise BenchError(f"a ceiling worker failed\n{tail(log)}")
    return [json.loads(log.read_text().splitlines()[-1]) for _, log in children]


def ceiling_round(bench: Bench, *, jobs: int, offset: int) -> Measured:
    """(b) The ceiling: 4 processes of plain psycopg (tests/benchmarks/ceiling_worker.py)."""
    with bench.postgres.connect(CEILING) as conn:
        bulk.insert_pending_operations(conn, kind="bench-ceiling", count=jobs, first=offset)
    transactions_before = bench.postgres.xact_commits(CEILING)
    monitor = Monitor(bench.postgres, CEILING)
    monitor.close_gate("workers_operation")
    children = start_ceiling_workers(bench, name=f"ceiling-{offset}")
    groups = {"workers": [process.pid for process, _ in children], "postgres": [bench.postgres.postmaster_pid()]}
    try:
        with CpuMeter(groups, exclude={monitor.pid}) as meter:
            wait_for_lines(children, "ready")
            time.sleep(SETTLE_SECONDS)
            monitor.open_gate()
            reports = wait_for_ceiling_workers(children, timeout=60 + jobs / 50)
    finally:
        for process, _ in children:
            halt(process)
        monitor.close()
    time.sleep(0.5)
    transactions = bench.postgres.xact_commits(CEILING) - transactions_before - monitor.transactions
    done = sum(report["jobs"] for report in reports)
    if done != jobs:
        raise BenchError(f"the ceiling workers finished {done} of {jobs} jobs")
    started = min(report["first"] for report in reports if report["first"])
    ended = max(report["last"] for report in reports if report["last"])
    return Measured(
        units=jobs,
        seconds=ended - started,
        cpu_workers=meter.seconds("workers", started, ended),
        cpu_postgres=meter.seconds("postgres", started, ended),
        transactions=transactions / jobs,
    )


# --- the rounds and their rows ----------------------------------------------------------------------

GALLEY_Q0, GALLEY_Q50, GALLEY_RW0 = "galley-qcluster-0ms", "galley-qcluster-50ms", "galley-run_worker-0ms"
GALLEY_FANOUT = f"galley-qcluster-0ms-{WIDTH}-channels"
DJANGOQ, PROCRASTINATE_ROW, CEILING_ROW = "django-q2", "procrastinate", "ceiling"
NAIVE_DJANGOQ, NAIVE_PROCRASTINATE, GALLEY_NOOP = "naive-django-q2", "naive-procrastinate", "galley-noop-run_worker"
ROUNDS = (
    GALLEY_Q0,
    DJANGOQ,
    NAIVE_DJANGOQ,
    GALLEY_Q50,
    PROCRASTINATE_ROW,
    GALLEY_NOOP,
    NAIVE_PROCRASTINATE,
    GALLEY_RW0,
    CEILING_ROW,
    GALLEY_FANOUT,
)  # in running order


def run(bench: Bench) -> list[Row]:
    fanout: dict[str, Target] = {}
    try:
        for database in (MAIN, PROCRASTINATE):  # where each naive pipeline's Django saves its rows
            bench.postgres.execute(NAIVE_TABLE_SQL, database)
        start_fanout_channels(bench, fanout)
        return run_rounds(bench, fanout)
    finally:
        for target in fanout.values():
            halt(target.process)


def run_rounds(bench: Bench, fanout: dict[str, Target]) -> list[Row]:
    sizes = bench.sizes
    chosen = [name.strip() for name in sizes.steps.split(",") if name.strip()] or list(ROUNDS)
    if unknown := set(chosen) - set(ROUNDS):
        raise SystemExit(f"BENCH_STEPS: unknown rounds {sorted(unknown)}; choose from {', '.join(ROUNDS)}")
    rounds: dict[str, list[Measured]] = {name: [] for name in ROUNDS}
    steps: dict[str, Callable[[int], Measured]] = {
        GALLEY_Q0: lambda r: galley_round(
            bench, runner="qcluster", latency_ms=0, backlog=sizes.backlog, label=f"q0-r{r}"
        ),
        DJANGOQ: lambda r: djangoq_round(bench, jobs=sizes.noop_jobs),
        NAIVE_DJANGOQ: lambda r: naive_djangoq_round(bench, backlog=sizes.backlog, label=f"naive-dq-r{r}"),
        GALLEY_Q50: lambda r: galley_round(
            bench, runner="qcluster", latency_ms=50, backlog=sizes.backlog, label=f"q50-r{r}"
        ),
        PROCRASTINATE_ROW: lambda r: procrastinate_round(bench, jobs=sizes.noop_jobs),
        GALLEY_NOOP: lambda r: galley_noop_round(bench, jobs=sizes.noop_jobs, offset=r * sizes.noop_jobs),
        NAIVE_PROCRASTINATE: lambda r: naive_procrastinate_round(bench, backlog=sizes.backlog, label=f"naive-pc-r{r}"),
        GALLEY_RW0: lambda r: galley_round(
            bench, runner="run_worker", latency_ms=0, backlog=sizes.backlog, label=f"rw0-r{r}"
        ),
        CEILING_ROW: lambda r: ceiling_round(bench, jobs=sizes.ceiling_jobs, offset=r * sizes.ceiling_jobs),
        GALLEY_FANOUT: lambda r: fanout_round(bench, targets=fanout, backlog=sizes.backlog, label=f"q0x{WIDTH}-r{r}"),
    }
    for number in range(sizes.rounds):
        for name in ROUNDS:
            if name not in chosen:
                continue
            with phase(f"round {number + 1}/{sizes.rounds}: {name}"):
                measured = steps[name](number)
            rounds[name].append(measured)
            print(
                f"        {measured.units} in {measured.seconds:.2f} s = {measured.rate:,.1f}/s; CPU "
                f"{measured.cpu_ms_per_unit:.2f} ms/unit "
                f"(PostgreSQL {1000 * measured.cpu_postgres / measured.units:.2f}, "
                f"target {1000 * measured.cpu_target / measured.units:.2f}); "
                f"{measured.transactions:.1f} transactions/unit",
                flush=True,
            )
    return [row for row in with_sections(rows(bench, rounds)) if row.values]


def with_sections(table: list[Row]) -> list[Row]:
    """Each section's title moved down to its first row with values, so that leaving out rounds
    (BENCH_STEPS) keeps the titles of the rows that remain."""
    pending = ""
    for row in table:
        pending = row.section or pending
        row.section = ""
        if row.values:
            row.section, pending = pending, ""
    return table


def rows(bench: Bench, rounds: dict[str, list[Measured]]) -> list[Row]:
    sizes = bench.sizes

    def rates(name: str) -> list[float]:
        return [m.rate for m in rounds[name]]

    def paired(a: str, b: str, value: Callable[[Measured], float]) -> list[float]:
        """Round by round; none unless both ran (BENCH_STEPS)."""
        if not (rounds[a] and rounds[b]):
            return []
        return [value(x) / value(y) for x, y in zip(rounds[a], rounds[b], strict=True)]

    def cpu(name: str) -> list[float]:
        return [m.cpu_ms_per_unit for m in rounds[name]]

    def stories(name: str) -> list[float]:
        return [m.extra["stories"] / m.seconds for m in rounds[name]]

    galleys = (GALLEY_Q0, GALLEY_Q50, GALLEY_RW0, GALLEY_FANOUT)
    naive = (NAIVE_DJANGOQ, NAIVE_PROCRASTINATE)
    qclusters = (GALLEY_Q0, GALLEY_Q50, GALLEY_FANOUT)
    retries = sum(m.extra.get("retries", 0) for name in galleys for m in rounds[name])
    rang = sum(m.extra.get("rang", 0) for name in qclusters for m in rounds[name])
    section = (
        f"throughput: backlog {sizes.backlog} approvals / {sizes.noop_jobs} no-op jobs / "
        f"{sizes.ceiling_jobs} ceiling jobs per round, {sizes.workers} workers; Galley on one channel "
        f"unless a row says {WIDTH} channels"
    )
    fanned = f"qcluster +0 ms, {WIDTH} channels"
    return [
        Row(
            "(a) Galley verified publications/s: qcluster, target +0 ms",
            rates(GALLEY_Q0),
            "/s",
            section=section,
            note=f"retried attempts over all Galley rounds: {retries}; qcluster rounds in which no claim followed "
            f"the gate within {RING_AFTER_SECONDS:.0f} s, so the bench enqueued one drain task: {rang} of "
            f"{sum(len(rounds[name]) for name in qclusters)}",
        ),
        Row(
            "(a) Galley verified publications/s: qcluster, target +50 ms",
            rates(GALLEY_Q50),
            "/s",
            goal=Goal(100, at_most=False, unit="/s"),
        ),
        Row(f"(a) Galley verified publications/s: {sizes.workers} run_worker, target +0 ms", rates(GALLEY_RW0), "/s"),
        Row(
            f"(a) Galley verified channel-publications/s: {fanned}",
            rates(GALLEY_FANOUT),
            "/s",
            note=f"every approval goes to web and {' and '.join(FANOUT_CHANNELS)} (reference targets +0 ms); "
            "a channel-publication is one story published and verified on one channel",
        ),
        Row(f"  verified stories/s, each verified on all {WIDTH} channels", stories(GALLEY_FANOUT), "/s"),
        Row(
            f"  channel-publications/s, {WIDTH} channels ÷ one channel's publications/s (qcluster +0 ms, per round)",
            paired(GALLEY_FANOUT, GALLEY_Q0, lambda m: m.rate),
            "x",
        ),
        Row(
            f"  stories/s, {WIDTH} channels ÷ one channel's publications/s (qcluster +0 ms, per round)",
            paired(GALLEY_FANOUT, GALLEY_Q0, lambda m: m.extra["stories"] / m.seconds),
            "x",
        ),
        Row(f"(b) psycopg claim + fenced complete, {sizes.workers} processes (ceiling)", rates(CEILING_ROW), "jobs/s"),
        Row(f"(c) django-q2 no-op tasks, {sizes.workers} workers", rates(DJANGOQ), "tasks/s"),
        Row(f"(d) Procrastinate no-op jobs, {sizes.workers} processes", rates(PROCRASTINATE_ROW), "jobs/s"),
        Row(
            f"Galley no-op operations/s, {sizes.workers} run_worker (the machinery alone)",
            rates(GALLEY_NOOP),
            "ops/s",
            note=f"{sizes.noop_jobs} operations of a kind whose handler does nothing (noop.py), beside "
            "Procrastinate's no-op jobs",
        ),
        Row(
            "Galley qcluster +0 ms ÷ django-q2 no-op (per round)",
            paired(GALLEY_Q0, DJANGOQ, lambda m: m.rate),
            "x",
            goal=Goal(1.0, at_most=False, unit="x"),
        ),
        Row(
            "Galley qcluster +0 ms ÷ Procrastinate no-op (per round)",
            paired(GALLEY_Q0, PROCRASTINATE_ROW, lambda m: m.rate),
            "x",
            goal=Goal(0.5, at_most=False, unit="x"),
        ),
        Row(
            "Galley qcluster +0 ms ÷ psycopg ceiling (per round)",
            paired(GALLEY_Q0, CEILING_ROW, lambda m: m.rate),
            "x",
            note="a publication is one publish operation that also verifies when the page is there at once",
        ),
        Row(
            f"naive django-q2 pipeline publications/s, {sizes.workers} workers, target +0 ms",
            rates(NAIVE_DJANGOQ),
            "/s",
            section=f"the same job, measured: a naive pipeline (tests/benchmarks/naive/: POST, read-back, "
            f"permalink, an ORM row; at least once, no look-up, no fencing), backlog {sizes.backlog}, "
            f"{sizes.workers} workers, the same target as Galley's qcluster +0 ms",
            note=f"rows saved twice (a task run again) over all naive rounds: "
            f"{sum(m.extra.get('duplicates', 0) for name in naive for m in rounds[name]):.0f}",
        ),
        Row(
            f"naive Procrastinate pipeline publications/s, {sizes.workers} processes, target +0 ms",
            rates(NAIVE_PROCRASTINATE),
            "/s",
        ),
        Row(
            "Galley qcluster +0 ms ÷ naive django-q2 pipeline, publications/s (per round)",
            paired(GALLEY_Q0, NAIVE_DJANGOQ, lambda m: m.rate),
            "x",
            goal=Goal(1.0, at_most=False, unit="x"),
        ),
        Row(
            "Galley qcluster +0 ms ÷ naive Procrastinate pipeline, publications/s (per round)",
            paired(GALLEY_Q0, NAIVE_PROCRASTINATE, lambda m: m.rate),
            "x",
            goal=Goal(1.0, at_most=False, unit="x"),
        ),
        Row("naive django-q2 pipeline CPU per publication (workers + PostgreSQL)", cpu(NAIVE_DJANGOQ), "ms"),
        Row("naive Procrastinate pipeline CPU per publication (workers + PostgreSQL)", cpu(NAIVE_PROCRASTINATE), "ms"),
        Row(
            "Galley CPU/publication (qcluster +0 ms) ÷ naive django-q2 CPU/publication (per round)",
            paired(GALLEY_Q0, NAIVE_DJANGOQ, lambda m: m.cpu_ms_per_unit),
            "x",
            goal=Goal(1.0, at_most=True, unit="x"),
        ),
        Row(
            "Galley CPU/publication (qcluster +0 ms) ÷ naive Procrastinate CPU/publication (per round)",
            paired(GALLEY_Q0, NAIVE_PROCRASTINATE, lambda m: m.cpu_ms_per_unit),
            "x",
            goal=Goal(1.0, at_most=True, unit="x"),
        ),
        Row(
            "  the target's CPU per publication, naive django-q2 (not counted above)",
            [1000 * m.cpu_target / m.units for m in rounds[NAIVE_DJANGOQ]],
            "ms",
        ),
        Row(
            "  the target's CPU per publication, naive Procrastinate (not counted above)",
            [1000 * m.cpu_target / m.units for m in rounds[NAIVE_PROCRASTINATE]],
            "ms",
        ),
        Row(
            "Galley CPU per verified publication, qcluster +0 ms (workers + PostgreSQL)",
            cpu(GALLEY_Q0),
            "ms",
            section="CPU per unit of work, from /proc over each window",
        ),
        Row("  of which PostgreSQL", [1000 * m.cpu_postgres / m.units for m in rounds[GALLEY_Q0]], "ms"),
        Row(
            "  the target's CPU per publication (not counted above)",
            [1000 * m.cpu_target / m.units for m in rounds[GALLEY_Q0]],
            "ms",
        ),
        Row(f"Galley CPU per verified publication, {sizes.workers} run_worker +0 ms", cpu(GALLEY_RW0), "ms"),
        Row(f"Galley CPU per verified channel-publication, {fanned}", cpu(GALLEY_FANOUT), "ms"),
        Row(
            "  ÷ CPU per verified publication, one channel (qcluster +0 ms, per round)",
            paired(GALLEY_FANOUT, GALLEY_Q0, lambda m: m.cpu_ms_per_unit),
            "x",
        ),
        Row("psycopg ceiling CPU per job", cpu(CEILING_ROW), "ms"),
        Row("django-q2 CPU per no-op task", cpu(DJANGOQ), "ms"),
        Row("Procrastinate CPU per no-op job", cpu(PROCRASTINATE_ROW), "ms"),
        Row(
            "Galley CPU/publication ÷ Procrastinate CPU/job (per round)",
            paired(GALLEY_Q0, PROCRASTINATE_ROW, lambda m: m.cpu_ms_per_unit),
            "x",
            goal=Goal(2.0, at_most=True, unit="x"),
        ),
        Row(
            f"Galley CPU per no-op operation, {sizes.workers} run_worker (worker + PostgreSQL)", cpu(GALLEY_NOOP), "ms"
        ),
        Row(
            "Galley CPU/no-op operation ÷ Procrastinate CPU/no-op job (per round)",
            paired(GALLEY_NOOP, PROCRASTINATE_ROW, lambda m: m.cpu_ms_per_unit),
            "x",
            goal=Goal(0.5, at_most=True, unit="x"),
        ),
        Row(
            "transactions per verified publication, qcluster +0 ms",
            [m.transactions for m in rounds[GALLEY_Q0]],
            "",
            section="transactions per unit: pg_stat_database.xact_commit over the workers' lifetime",
        ),
        Row(
            "transactions per verified publication, run_worker +0 ms", [m.transactions for m in rounds[GALLEY_RW0]], ""
        ),
        Row(
            f"transactions per verified channel-publication, {fanned}",
            [m.transactions for m in rounds[GALLEY_FANOUT]],
            "",
        ),
        Row(
            "  ÷ transactions per verified publication, one channel (qcluster +0 ms, per round)",
            paired(GALLEY_FANOUT, GALLEY_Q0, lambda m: m.transactions),
            "x",
        ),
        Row("transactions per django-q2 no-op task", [m.transactions for m in rounds[DJANGOQ]], ""),
        Row("transactions per Procrastinate no-op job", [m.transactions for m in rounds[PROCRASTINATE_ROW]], ""),
        Row("transactions per ceiling job", [m.transactions for m in rounds[CEILING_ROW]], ""),
        Row("transactions per Galley no-op operation", [m.transactions for m in rounds[GALLEY_NOOP]], ""),
        Row("transactions per naive django-q2 publication", [m.transactions for m in rounds[NAIVE_DJANGOQ]], ""),
        Row(
            "transactions per naive Procrastinate publication",
            [m.transactions for m in rounds[NAIVE_PROCRASTINATE]],
            "",
        ),
    ]
