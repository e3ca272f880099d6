from __future__ import annotations

import signal
from collections import Counter
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from workers.drain import Wakeup, default_worker_id
from workers.service import run_startup_checks, serve, start_doorbell


class Command(BaseCommand):
    help = (
        "Run a Galley worker without django-q2: drain due operations whenever the doorbell rings "
        "(PostgreSQL LISTEN; with GALLEY_WAKEUP=poll, or a LISTEN that is not heard, it polls instead) or "
        "work falls due, and reconcile expired leases every few seconds (the same code each django-q2 "
        "worker process runs). SIGTERM stops it once the attempts in flight have ended. A database "
        "restart or failover is ridden out: the worker reconnects with backoff."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--until-idle", action="store_true", help="Exit when no operation is due or waiting.")
        parser.add_argument("--kind", action="append", dest="kinds", help="Only these operation kinds.")
        parser.add_argument("--worker-id", default=None)
        parser.add_argument(
            "--poll",
            type=float,
            default=None,
            help="Longest idle wait in seconds before looking for due work without a ring "
            "(default GALLEY_SWEEP_SECONDS); the doorbell wakes the worker at once.",
        )

    def handle(
        self,
        *args: Any,
        until_idle: bool,
        kinds: list[str] | None,
        worker_id: str | None,
        poll: float | None,
        **options: Any,
    ) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            # Only a flag: a signal handler must not take a lock the interrupted thread may hold.
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        worker_id = worker_id or default_worker_id()
        self.stdout.write(f"worker {worker_id} started")
        for name, outcome in run_startup_checks().items():
            self.stdout.write(f"{name}: {outcome}")
        self.stdout.flush()

        def report(_started: float, outcomes: Counter[str]) -> bool:
            if outcomes:
                self.stdout.write(f"drained: {dict(outcomes)}")
                self.stdout.flush()
            return False

        wakeup = Wakeup()
        listener = start_doorbell(wakeup)
        try:
            serve(
                worker_id=worker_id,
                wakeup=wakeup,
                stop=lambda: stopping,
                poll=settings.GALLEY_SWEEP_SECONDS if poll is None else poll,
                kinds=kinds,
                until_idle=until_idle,
                reconcile_every=settings.GALLEY_SWEEP_SECONDS,
                after_pass=report,
            )
        finally:
            if listener is not None:
                listener.stop()
        self.stdout.write(f"worker {worker_id} stopped")
