from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from publishing.demo.simulation import DEFAULT_APPROVER, DEFAULT_EDITOR, run_simulation
from publishing.errors import GalleyError


class Command(BaseCommand):
    help = (
        "Simulate editorial load through the real actions: create N briefs with K revisions each and "
        "approve every revision in order per brief, briefs interleaved in a shuffled order across threads."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--briefs", type=int, required=True, help="How many briefs to create.")
        parser.add_argument("--revisions", type=int, required=True, help="Revisions per brief.")
        parser.add_argument("--concurrency", type=int, default=4, help="Threads, each with its own connection.")
        parser.add_argument("--seed", type=int, default=None, help="Seed for a reproducible order.")
        parser.add_argument(
            "--stale-rate",
            type=float,
            default=0.0,
            help="Probability that a review goes stale (the next revision is saved before the approval lands).",
        )
        parser.add_argument("--editor", default=None, help=f"Existing editor's username (default: {DEFAULT_EDITOR}).")
        parser.add_argument(
            "--approver", default=None, help=f"Existing approver's username (default: {DEFAULT_APPROVER})."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            summary = run_simulation(
                briefs=options["briefs"],
                revisions=options["revisions"],
                concurrency=options["concurrency"],
                seed=options["seed"],
                stale_rate=options["stale_rate"],
                editor=options["editor"],
                approver=options["approver"],
            )
        except GalleyError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"simulation: {summary}")
