"""Peer (d) and the naive pipeline in Procrastinate: one app on the database BENCH_PROCRASTINATE_DSN, with
an async no-op task and the naive publish task (naive/pipeline.py; a sync task, as one using the ORM is).

``python -m tests.benchmarks.procrastinate_app`` runs one worker (concurrency 1) until SIGTERM; with
``--django`` it sets Django up first (DJANGO_SETTINGS_MODULE: djangoq_settings, whose database is the
one the naive rows go to), as the naive task needs; the no-op worker loads no Django.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_DSN", "")),
)


@app.task(name="noop")
async def noop() -> None:
    """A Procrastinate job that does nothing."""


@app.task(name="naive_publish")
def naive_publish(brief_id: str, revision: int, payload: dict[str, Any]) -> None:
    from tests.benchmarks.naive.pipeline import publish

    publish(brief_id, revision, payload)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    if "--django" in sys.argv[1:]:
        import django

        django.setup()
    print("booted", flush=True)
    app.run_worker(concurrency=1, wait=True, name=os.environ.get("BENCH_WORKER_NAME", "bench"))
