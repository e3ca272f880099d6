"""Named crash points for recovery tests: the process dies there, as under kill -9, or freezes there.

GALLEY_CRASH_POINT names one point (optionally qualified by operation kind, e.g.
"after_finalize:publish"); a process that reaches it calls os._exit at once, skipping every
cleanup, atexit hook and transaction commit, exactly like a SIGKILL at that line.

GALLEY_FREEZE_POINT names one the same way; the first time the process reaches it, it stops itself
with SIGSTOP, as a frozen process (a paused VM, a stalled host) stops at that line with whatever it
holds: its test then decides when to send SIGCONT or SIGKILL (tests/chaos.py).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

logger = logging.getLogger(__name__)

CRASH_EXIT_CODE = 137
_frozen_once = threading.Lock()


def _named(wanted: str | None, name: str, kind: str) -> bool:
    return bool(wanted) and (wanted == name or (bool(kind) and wanted == f"{name}:{kind}"))


def crash_point(name: str, *, kind: str = "") -> None:
    if _named(wanted := os.environ.get("GALLEY_CRASH_POINT"), name, kind):
        sys.stderr.write(f"galley: crash point {wanted} reached; exiting\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
    if _named(wanted := os.environ.get("GALLEY_FREEZE_POINT"), name, kind) and _frozen_once.acquire(blocking=False):
        sys.stderr.write(f"galley: freeze point {wanted} reached; stopping (SIGSTOP)\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
