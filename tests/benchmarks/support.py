"""Shared parts of the benchmarks: results and their table, the real target and worker processes."""

from __future__ import annotations

import math
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.processes import child_database_url, free_port, manage, process_env, start, stop, wait_for_http

# Workers never inherit a crash point, and their pool and batch sizes are stated, not inherited.
WORKER_SETTINGS = {
    "GALLEY_CRASH_POINT": "",
    "GALLEY_CLAIM_BATCH": "8",
}


@dataclass(frozen=True)
class Result:
    """One benchmark's line: Galley's figure beside the baseline measured in the same run."""

    name: str
    figure: float
    unit: str
    baseline: float
    baseline_unit: str
    baseline_label: str
    notes: str = ""

    @property
    def ratio(self) -> float:
        return self.figure / self.baseline if self.baseline else math.inf


def format_table(results: list[Result]) -> list[str]:
    rows = [("benchmark", "Galley", "baseline", "", "ratio", "notes")]
    for r in results:
        rows.append(
            (
                r.name,
                f"{r.figure:,.1f} {r.unit}",
                f"{r.baseline:,.1f} {r.baseline_unit}",
                r.baseline_label,
                f"{r.ratio:.2f}x",
                r.notes,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    aligns = ["<", ">", ">", "<", ">"]
    return [
        "  ".join(f"{cell:{align}{width}}" for cell, align, width in zip(row[:5], aligns, widths, strict=True))
        + f"  {row[5]}"
        for row in rows
    ]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"({path.name}: no output)"
    return f"--- {path.name} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Target:
    """The reference target as a real process; `env` points child processes at it and the test database."""

    url: str
    token: str
    env: dict[str, str]
    process: subprocess.Popen[str]

    def ledger(self) -> list[dict]:
        return httpx.get(f"{self.url}/_ledger", timeout=30).json()["applications"]


@contextmanager
def reference_target(tmp_path: Path, *, latency_ms: int) -> Iterator[Target]:
    """`python -m galley.reference_target` on a free port with its own SQLite file and `latency_ms` on every POST."""
    token = secrets.token_urlsafe(16)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = process_env(
        DATABASE_URL=child_database_url(), GALLEY_TARGET_URL=url, GALLEY_TARGET_TOKEN=token, **WORKER_SETTINGS
    )
    log = tmp_path / "target.log"
    process = start(
        [
            *["-m", "galley.reference_target"],
            # --token=…: a token_urlsafe token may start with "-", which argparse would take for an option.
            *["--port", str(port), "--db", str(tmp_path / "target.sqlite3"), f"--token={token}"],
            *["--latency-ms", str(latency_ms)],
        ],
        env=env,
        log=log,
    )
    try:
        wait_for_http(f"{url}/_health", process=process)
        yield Target(url=url, token=token, env=env, process=process)
    finally:
        stop(process)


def start_worker(
    target: Target, worker_id: str, *, logs: Path, concurrency: int, until_idle: bool = False
) -> tuple[subprocess.Popen[str], Path]:
    """A `run_worker` process with `concurrency` target calls in flight."""
    log = logs / f"{worker_id}.log"
    env = {**target.env, "GALLEY_WORKER_CONCURRENCY": str(concurrency)}
    args = ["run_worker", "--worker-id", worker_id, *(["--until-idle"] if until_idle else [])]
    return manage(*args, env=env, log=log), log


def wait_until_started(process: subprocess.Popen[str], log: Path, *, timeout: float = 60) -> None:
    """Wait for run_worker's "worker … started" line, so Django's start-up is not measured."""
    deadline = time.monotonic() + timeout
    while "started" not in (log.read_text(errors="replace") if log.exists() else ""):
        assert process.poll() is None, f"worker exited before starting ({process.returncode})\n{tail(log)}"
        assert time.monotonic() < deadline, f"worker did not start within {timeout} s\n{tail(log)}"
        time.sleep(0.05)
