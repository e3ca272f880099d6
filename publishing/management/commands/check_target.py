from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from publishing.clients.channels import client_for
from publishing.clients.target import TargetError
from publishing.models import Channel


class Command(BaseCommand):
    help = (
        "Check a channel's publishing target (--channel SLUG), or every enabled channel's: that it answers, "
        "accepts Galley's credentials, and (for WordPress) runs the companion plugin in the version Galley "
        "speaks with its revision fence on. One line per channel: the primary channel's (the GALLEY_TARGET_* "
        "settings) starts 'target ok:', another's 'SLUG: ok:'. Exits non-zero and says what is wrong if any "
        "is not ready. A target that answers but does not confirm a revision fence (GET /v1/status) passes "
        "with a WARNING: Galley cannot stop a late packet alone."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--channel", help="The slug of the one channel to check (default: every enabled one).")

    def handle(self, *args: Any, channel: str | None = None, **options: Any) -> None:
        if channel:
            channels = list(Channel.objects.filter(slug=channel).values_list("slug", "from_settings"))
            if not channels:
                raise CommandError(f"There is no channel {channel!r}.")
        else:
            channels = list(Channel.objects.filter(enabled=True).values_list("slug", "from_settings"))
        problems = []
        for slug, primary in channels:
            # The primary channel's lines are those check_target printed before there were channels.
            ok, not_ready, warning = (
                ("target ok: ", "The publishing target is not ready: ", "WARNING: ")
                if primary
                else (f"{slug}: ok: ", f"{slug}: not ready: ", f"{slug}: WARNING: ")
            )
            try:
                found = client_for(slug).examine()
            except TargetError as problem:
                problems.append(f"{not_ready}{problem}")
                continue
            self.stdout.write(f"{ok}{found.found}")
            if not found.fence_confirmed:
                # A warning, not a failure: the target works, and one with an unannounced fence is faithful.
                self.stderr.write(self.style.WARNING(f"{warning}{found.fence_warning}"))
        if problems:
            raise CommandError("\n".join(problems))
