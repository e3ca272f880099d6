"""Peer (d): a Procrastinate app with one async no-op task, on the database BENCH_PROCRASTINATE_DSN.

``python -m tests.benchmarks.procrastinate_app`` runs one worker (concurrency 1) until SIGTERM.
"""

from __future__ import annotations

import logging
import os

import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_DSN", "")),
)


@app.task(name="noop")
async def noop() -> None:
    """A Procrastinate job that does nothing."""


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    print("booted", flush=True)
    app.run_worker(concurrency=1, wait=True, name=os.environ.get("BENCH_WORKER_NAME", "bench"))
