"""`make run`: the whole system in the foreground, stopped cleanly by Ctrl-C.

Starts (or reuses) the embedded PostgreSQL under var/pgdata unless DATABASE_URL is set,
migrates, creates the demo users, then runs the web server as a child in its own process
group. On Ctrl-C or SIGTERM it stops every child it started, then the database, and leaves no
process behind. If a child dies on its own, everything else is stopped and the exit is non-zero.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from galley import embedded_database

BASE_DIR = Path(__file__).resolve().parent.parent
STOP_GRACE_SECONDS = 10


def manage(*args: str) -> list[str]:
    return [sys.executable, str(BASE_DIR / "manage.py"), *args]


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("GALLEY_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GALLEY_PORT", "8000")))
    options = parser.parse_args(argv)

    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    database = None
    if not os.environ.get("DATABASE_URL"):
        print(f"galley: starting embedded PostgreSQL (data in {embedded_database.RUN_PGDATA})", flush=True)
        database = embedded_database.start(embedded_database.RUN_PGDATA)
        os.environ["DATABASE_URL"] = database.get_uri()

    children: dict[str, subprocess.Popen[bytes]] = {}
    code = 0
    try:
        for step in (["migrate", "--noinput"], ["seed_demo"]):
            if stopping or subprocess.run(manage(*step), check=False).returncode != 0:
                return 1 if not stopping else 0
        address = f"{options.host}:{options.port}"
        children["web"] = subprocess.Popen(manage("runserver", address, "--noreload"), start_new_session=True)
        print(f"galley: web on http://{address}/ — Ctrl-C stops everything", flush=True)
        while not stopping:
            for name, child in children.items():
                if child.poll() is not None:
                    print(f"galley: {name} exited with code {child.returncode}; stopping", flush=True)
                    code = 1
                    stopping = True
            time.sleep(0.2)
    finally:
        for child in children.values():
            stop_process_group(child)
        if database is not None:
            database.cleanup()
            print("galley: embedded PostgreSQL stopped", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
