from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand
from django.db import close_old_connections

from workers.actions.housekeeping import reconcile_expired_leases
from workers.runner import (
    DATABASE_UNAVAILABLE,
    default_worker_id,
    drain,
    drop_broken_connections,
    reconnect_delay,
    run_startup_checks,
    seconds_until_due,
)


class Command(BaseCommand):
    help = (
        "Run a Galley worker without django-q2: reconcile expired leases and drain due operations "
        "in a loop (the same code a django-q2 doorbell task runs). SIGTERM stops it after the current drain. "
        "A database restart or failover is ridden out: the worker reconnects with backoff."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--until-idle", action="store_true", help="Exit when no operation is due or waiting.")
        parser.add_argument("--kind", action="append", dest="kinds", help="Only these operation kinds.")
        parser.add_argument("--worker-id", default=None)
        parser.add_argument("--poll", type=float, default=0.5, help="Seconds between idle polls.")

    def handle(
        self,
        *args: Any,
        until_idle: bool,
        kinds: list[str] | None,
        worker_id: str | None,
        poll: float,
        **options: Any,
    ) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        worker_id = worker_id or default_worker_id()
        self.stdout.write(f"worker {worker_id} started")
        for name, outcome in run_startup_checks().items():
            self.stdout.write(f"{name}: {outcome}")
        self.stdout.flush()
        outages = 0  # failed rounds in a row, for the backoff
        while not stopping:
            try:
                # As at a request's start: a connection the database dropped since the last round
                # fails its health check and is replaced before it is used.
                close_old_connections()
                reconcile_expired_leases()
                outcomes = drain(worker_id=worker_id, kinds=kinds, idle_wait=poll)
                if outcomes:
                    self.stdout.write(f"drained: {dict(outcomes)}")
                    self.stdout.flush()
                elif until_idle and seconds_until_due(kinds) is None:
                    break
                else:
                    time.sleep(poll)
            except DATABASE_UNAVAILABLE as problem:
                # A restart or failover loses nothing: every write after a claim is fenced, and an
                # attempt the outage cut short stays running until its lease expires and it is taken over.
                outages += 1
                delay = reconnect_delay(outages)
                drop_broken_connections(problem, f"reconciling and draining; trying again in {delay:.1f} s")
                time.sleep(delay)
            else:
                outages = 0
        self.stdout.write(f"worker {worker_id} stopped")
