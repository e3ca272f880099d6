"""`make run`: the whole system in the foreground, stopped cleanly by Ctrl-C.

Starts (or reuses) the embedded PostgreSQL under var/pgdata unless DATABASE_URL is set,
migrates, creates the demo users, then runs as children, each in its own process group: the
web server, the django-q2 cluster, and two reference targets (unless GALLEY_TARGET_URL names
another target): the primary channel `web` and the demo's second channel `partner-feed`, so that
an approval fans out to both (docs/channels.md). On Ctrl-C or SIGTERM it stops every child it
started, then the database, and leaves no process behind. If a child dies on its own, everything
else is stopped and the exit is non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from galley import embedded_database
from galley.env import var_dir

BASE_DIR = Path(__file__).resolve().parent.parent
STOP_GRACE_SECONDS = 10


def manage(*args: str) -> list[str]:
    return [sys.executable, str(BASE_DIR / "manage.py"), *args]


def stop_all(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each child, then SIGKILL whatever is left of its process group after the grace period.

    Only the child itself gets SIGTERM: the django-q2 cluster stops its worker processes in
    order when its main process is asked to, but hangs when they are all signalled at once.
    """
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def installation_token(token_file: Path) -> str:
    """The token in `token_file`, generated there (owner-only) the first time."""
    if not token_file.exists():
        token_file.write_text(secrets.token_urlsafe(32))
        token_file.chmod(0o600)
    return token_file.read_text().strip()


def reference_target(host: str, port: int, db: Path, token: str) -> subprocess.Popen[bytes]:
    """A bundled reference target accepting `token` (given in its environment, not its visible command line)."""
    command = [sys.executable, "-m", "galley.reference_target", "--host", host, "--port", str(port), "--db", str(db)]
    environment = {**os.environ, "GALLEY_TARGET_TOKEN": token}
    return subprocess.Popen(command, cwd=BASE_DIR, env=environment, start_new_session=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("GALLEY_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GALLEY_PORT", "8000")))
    parser.add_argument("--target-port", type=int, default=int(os.environ.get("GALLEY_REFERENCE_TARGET_PORT", "8001")))
    parser.add_argument(
        "--partner-target-port",
        type=int,
        default=int(os.environ.get("GALLEY_REFERENCE_TARGET_PORT_2", "8002")),
        help="The second reference target, the demo channel partner-feed.",
    )
    options = parser.parse_args(argv)
    state = var_dir()
    state.mkdir(parents=True, exist_ok=True)
    # The bundled reference target runs unless another target is configured: a URL of its own,
    # or WordPress (GALLEY_TARGET_KIND=wordpress with GALLEY_WORDPRESS_*).
    wordpress = os.environ.get("GALLEY_TARGET_KIND", "reference") == "wordpress"
    start_target = not wordpress and not os.environ.get("GALLEY_TARGET_URL")
    if start_target:
        os.environ["GALLEY_TARGET_URL"] = f"http://{options.host}:{options.target_port}"
    if not os.environ.get("GALLEY_TARGET_TOKEN"):
        # The bundled target and Galley share a token generated once per installation.
        os.environ["GALLEY_TARGET_TOKEN"] = installation_token(state / "target_token")
    partner_url = f"http://{options.host}:{options.partner_target_port}"
    partner_token = installation_token(state / "partner_feed_token")

    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    database = None
    if not os.environ.get("DATABASE_URL"):
        pgdata = embedded_database.run_pgdata()
        print(f"galley: starting embedded PostgreSQL (data in {pgdata})", flush=True)
        database = embedded_database.start(pgdata)
        os.environ["DATABASE_URL"] = database.get_uri()

    children: dict[str, subprocess.Popen[bytes]] = {}
    code = 0
    try:
        # The demo's second channel is the second bundled target; with a target of one's own there is none.
        # Its token goes in the environment, as the targets' do: not on a command line `ps` shows (and a
        # token may begin with "-", which an option parser would take for an option).
        demo = ["seed_demo", "--partner-feed-url", partner_url]
        seed_environment = {**os.environ, "GALLEY_PARTNER_FEED_TOKEN": partner_token}
        for step in (["migrate", "--noinput"], demo if start_target else ["seed_demo"]):
            if stopping or subprocess.run(manage(*step), check=False, env=seed_environment).returncode != 0:
                return 1 if not stopping else 0
        address = f"{options.host}:{options.port}"
        if start_target:
            children["reference target"] = reference_target(
                options.host, options.target_port, state / "reference-target.sqlite3", os.environ["GALLEY_TARGET_TOKEN"]
            )
            children["partner-feed target"] = reference_target(
                options.host, options.partner_target_port, state / "reference-target-2.sqlite3", partner_token
            )
        children["workers"] = subprocess.Popen(manage("qcluster"), start_new_session=True)
        children["web"] = subprocess.Popen(manage("runserver", address, "--noreload"), start_new_session=True)
        where = os.environ.get("GALLEY_WORDPRESS_URL", "") if wordpress else os.environ["GALLEY_TARGET_URL"]
        partner = f", channel partner-feed {partner_url}" if start_target else ""
        print(f"galley: web on http://{address}/, target {where}{partner}", flush=True)
        print("galley: Ctrl-C stops everything", flush=True)
        while not stopping:
            for name, child in children.items():
                if child.poll() is not None:
                    print(f"galley: {name} exited with code {child.returncode}; stopping", flush=True)
                    code = 1
                    stopping = True
            time.sleep(0.2)
    finally:
        stop_all(list(children.values()))
        if database is not None:
            database.cleanup()
            print("galley: embedded PostgreSQL stopped", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
