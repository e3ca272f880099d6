from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from publishing.clients.target import TargetError, examine_configured_target


class Command(BaseCommand):
    help = (
        "Check the configured publishing target (GALLEY_TARGET_KIND): that it answers, accepts Galley's "
        "credentials, and (for WordPress) runs the companion plugin in the version Galley speaks with its "
        "revision fence on. Exits non-zero and says what is wrong otherwise. A target that answers but does "
        "not confirm a revision fence (GET /v1/status) passes with a WARNING: Galley cannot stop a late "
        "packet alone."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            found = examine_configured_target()
        except TargetError as problem:
            raise CommandError(f"The publishing target is not ready: {problem}") from None
        self.stdout.write(f"target ok: {found.found}")
        if not found.fence_confirmed:
            # A warning, not a failure: the target works, and one with an unannounced fence is faithful.
            self.stderr.write(self.style.WARNING(f"WARNING: {found.fence_warning}"))
