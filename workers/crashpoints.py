"""Named crash points for recovery tests: the process dies there, as under kill -9.

GALLEY_CRASH_POINT names one point (optionally qualified by operation kind, e.g.
"after_finalize:publish"); a process that reaches it calls os._exit at once, skipping every
cleanup, atexit hook and transaction commit, exactly like a SIGKILL at that line.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

CRASH_EXIT_CODE = 137


def crash_point(name: str, *, kind: str = "") -> None:
    wanted = os.environ.get("GALLEY_CRASH_POINT")
    if not wanted:
        return
    if wanted == name or (kind and wanted == f"{name}:{kind}"):
        sys.stderr.write(f"galley: crash point {wanted} reached; exiting\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
