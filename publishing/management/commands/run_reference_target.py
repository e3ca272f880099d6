from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from galley import env
from publishing.reference_target import Faults, serve


class Command(BaseCommand):
    help = (
        "Run the bundled reference publishing target (PRODUCT.md §7.4) with its own SQLite storage "
        "and optional fault injection, until SIGTERM or Ctrl-C."
    )
    # The target is a separate service: it never touches Galley's database or apps, so the
    # system checks (and their cost) are irrelevant to it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001, help="0 picks a free port.")
        parser.add_argument(
            "--db",
            default=str(settings.VAR_DIR / "reference-target.sqlite3"),
            help="The target's own SQLite file (default: <VAR_DIR>/reference-target.sqlite3).",
        )
        parser.add_argument(
            "--token",
            default=env.env_str("GALLEY_TARGET_TOKEN", ""),
            help="Bearer token the target accepts (default: $GALLEY_TARGET_TOKEN).",
        )
        parser.add_argument("--latency-ms", type=int, default=0, help="Added to every valid POST.")
        parser.add_argument("--rate-429", type=float, default=0.0, help="Probability of 429 with Retry-After.")
        parser.add_argument("--rate-503", type=float, default=0.0, help="Probability of 503 with Retry-After.")
        parser.add_argument("--rate-500", type=float, default=0.0, help="Probability of 500.")
        parser.add_argument(
            "--rate-hang", type=float, default=0.0, help="Probability of commit, then hang before answering."
        )
        parser.add_argument("--hang-seconds", type=float, default=30.0, help="How long a hang lasts.")
        parser.add_argument(
            "--rate-drop",
            type=float,
            default=0.0,
            help="Probability of commit, then close without answering.",
        )
        parser.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds on 429/503.")
        parser.add_argument(
            "--fence-off", action="store_true", help="Accept older revisions (no stale_revision check)."
        )
        parser.add_argument("--seed", type=int, default=None, help="Seed for reproducible fault draws.")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["token"]:
            raise CommandError("No bearer token: pass --token or set GALLEY_TARGET_TOKEN.")
        try:
            faults = Faults(
                latency_ms=options["latency_ms"],
                rate_429=options["rate_429"],
                rate_503=options["rate_503"],
                rate_500=options["rate_500"],
                rate_hang=options["rate_hang"],
                hang_seconds=options["hang_seconds"],
                rate_drop=options["rate_drop"],
                retry_after=options["retry_after"],
                fence_off=options["fence_off"],
                seed=options["seed"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None

        def announce(url: str) -> None:
            self.stdout.write(f"reference target on {url}")
            self.stdout.flush()

        serve(
            host=options["host"],
            port=options["port"],
            db_path=options["db"],
            token=options["token"],
            faults=faults,
            on_listening=announce,
        )
