from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from publishing.clients.target import TargetError
from publishing.handlers.reconciliation import reconcile_channel
from publishing.models import Channel


class Command(BaseCommand):
    help = (
        "After a database failover that may have lost commits (asynchronous replication): compare what each "
        "enabled channel's target holds per brief with Galley's records, adopt every application Galley lost "
        "(a publication recorded, never a second post) and list the approvals lost with the old primary, to "
        "be approved again. One summary line per channel, then one line per lost approval and per application "
        "Galley cannot account for. Idempotent; exits non-zero when a target cannot answer "
        "(docs/operations.md#failover)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--channel", help="The slug of the one channel to reconcile (default: every enabled one).")
        parser.add_argument("--brief", action="append", dest="briefs", help="Only this brief (repeatable).")

    def handle(self, *args: Any, channel: str | None = None, briefs: list[str] | None = None, **options: Any) -> None:
        channels = Channel.objects.filter(enabled=True)
        if channel:
            channels = Channel.objects.filter(slug=channel)
            if not channels.exists():
                raise CommandError(f"There is no channel {channel!r}.")
        problems = []
        for slug in channels.order_by("-from_settings", "slug").values_list("slug", flat=True):
            try:
                found = reconcile_channel(slug, brief_ids=briefs)
            except TargetError as problem:
                problems.append(f"{slug}: not reconciled: {problem}")
                continue
            self.stdout.write(str(found))
            for key in found.lost_approvals:
                self.stdout.write(
                    f"{slug}: approval lost: {key} is at the target, unapproved in Galley; approve it again"
                )
            for key in found.unaccounted:
                self.stdout.write(f"{slug}: unaccounted: {key} is at the target with no such revision in Galley")
        if problems:
            raise CommandError("\n".join(problems))
