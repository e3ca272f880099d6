"""``python -m galley.reference_target``: run the reference target until SIGTERM or Ctrl-C.

Standard library only, like the server: it reads no Django settings. Its defaults come from
the same environment variables Galley's settings read: GALLEY_VAR_DIR (where local state
lives; ``var/`` in the current directory without it), GALLEY_TARGET_TOKEN and LOG_LEVEL.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from galley.reference_target.faults import Faults
from galley.reference_target.harness import serve

# One option per Faults field (--latency-ms for latency_ms, ...), so the two cannot drift apart.
FAULT_HELP = {
    "latency_ms": "Milliseconds added to every valid POST.",
    "rate_429": "Probability of 429 with Retry-After.",
    "rate_503": "Probability of 503 with Retry-After.",
    "rate_500": "Probability of 500.",
    "rate_hang": "Probability of commit, then hang before answering.",
    "hang_seconds": "How long a hang lasts.",
    "rate_drop": "Probability of commit, then close without answering.",
    "retry_after": "Retry-After seconds on 429/503.",
    "fence_off": "Accept older revisions (no stale_revision check).",
    "seed": "Seed for reproducible fault draws.",
}


def default_db() -> Path:
    """<GALLEY_VAR_DIR>/reference-target.sqlite3, as Galley's settings resolve the variable; else under ./var."""
    configured = os.environ.get("GALLEY_VAR_DIR")
    return (Path(configured).resolve() if configured else Path("var")) / "reference-target.sqlite3"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m galley.reference_target",
        description="Run the bundled reference publishing target (docs/target-protocol.md) with its own SQLite "
        "storage and optional fault injection, until SIGTERM or Ctrl-C.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port (default: %(default)s).")
    parser.add_argument(
        "--db", type=Path, default=default_db(), help="The target's own SQLite file (default: %(default)s)."
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("GALLEY_TARGET_TOKEN", ""),
        help="Bearer token the target accepts (default: $GALLEY_TARGET_TOKEN).",
    )
    faults = parser.add_argument_group("fault injection")
    for field in dataclasses.fields(Faults):
        flag = "--" + field.name.replace("_", "-")
        if field.type in ("bool", bool):
            faults.add_argument(flag, action="store_true", help=FAULT_HELP[field.name])
        else:
            kind = float if "float" in str(field.type) else int
            help = f"{FAULT_HELP[field.name]} (default: %(default)s)"
            faults.add_argument(flag, type=kind, default=field.default, help=help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    if not options.token:
        parser.error("no bearer token: pass --token or set GALLEY_TARGET_TOKEN")
    try:
        faults = Faults(**{field.name: getattr(options, field.name) for field in dataclasses.fields(Faults)})
    except ValueError as exc:
        parser.error(str(exc))
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    if not isinstance(logging.getLevelName(level), int):
        parser.error(f"LOG_LEVEL={level!r} is not a logging level")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    serve(
        host=options.host,
        port=options.port,
        db_path=options.db,
        token=options.token,
        faults=faults,
        on_listening=lambda url: print(f"reference target on {url}", flush=True),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
