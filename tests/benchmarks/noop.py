"""No-op work for the peers and the RSS figure.

- `noop`: the django-q2 no-op task (peer (c)).
- `python -m tests.benchmarks.noop <run_worker options>`: a Galley `run_worker` whose process also has a
  handler for the operation kind NOOP_KIND that does nothing and returns Success(): claims, attempts,
  fenced completion and doorbells are Galley's own, only the handler's network calls are left out.
  Galley registers no such kind itself; the handlers are registered the way the domain apps register theirs.
"""

from __future__ import annotations

import sys

NOOP_KIND = "bench-noop"


def noop() -> None:
    """A django-q2 task that does nothing."""


def main(argv: list[str]) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from workers.registry import ClaimedOperation, Success, register

    def handle_noop(claimed: ClaimedOperation) -> Success:
        return Success()

    register(NOOP_KIND, handle_noop)
    call_command("run_worker", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
