"""Debian's PgBouncer (/usr/sbin/pgbouncer, `make pgbouncer`) in front of a test PostgreSQL, for tests of Galley
behind a pooler (docs/operations.md#pgbouncer, docs/testing.md#pgbouncer-pass): `start(pool_mode, server)` starts
one on 127.0.0.1 in "transaction" or "session" pooling and waits until it is up; `PgBouncer.stop()` stops it
and removes its folder. The suite's plugin (galley.testing.embedded_database, GALLEY_TEST_PGBOUNCER) puts one
in front of the whole session's server, tests/pgbouncer.py one per test.

It serves every database name of the server (a `*` entry), so each pytest-xdist worker's own test
database is reached under its own name. Clients are trusted (a local test); it reaches PostgreSQL as the
test connection does (its socket folder or host, port, user and password). Its configuration and its
log are in a temporary folder of its own, which goes with it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from galley.testing.ports import free_port

PGBOUNCER = Path("/usr/sbin/pgbouncer")
POOL_MODES = ("transaction", "session")
START_TIMEOUT_SECONDS = 30
STOP_TIMEOUT_SECONDS = 30


@dataclass
class PgBouncer:
    pool_mode: str
    port: int
    folder: Path
    process: subprocess.Popen[str]

    def output(self) -> str:
        return (self.folder / "pgbouncer.log").read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within STOP_TIMEOUT_SECONDS; its folder goes with it."""
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(STOP_TIMEOUT_SECONDS)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def config(
    *,
    pool_mode: str,
    port: int,
    folder: Path,
    server: Mapping[str, Any],
    pool_size: int,
    server_settings: Mapping[str, str],
) -> str:
    """pgbouncer.ini for `server`, a Django DATABASES entry (HOST, PORT, USER, PASSWORD), with
    `server_settings` SET on each server connection it opens."""
    target = f"host={server['HOST'] or '127.0.0.1'} port={server['PORT'] or 5432} user={server['USER']}"
    if server["PASSWORD"]:
        target += f" password={server['PASSWORD']}"
    if server_settings:
        # Double quotes: an identifier, which SET takes as a value, inside PgBouncer's single-quoted one.
        target += " connect_query='" + "; ".join(f'SET {name} = "{value}"' for name, value in server_settings.items())
        target += "'"
    return f"""\
[databases]
* = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 500
; libpq's options carry Galley's lock bounds (docs/configuration.md#lock-bounds); PgBouncer 1.18 refuses a
; client that sends it unless told to ignore it (then the bounds belong on the role, as the docs say).
ignore_startup_parameters = extra_float_digits, options
; A test database is dropped at the end of the run while PgBouncer is up: PostgreSQL's DROP DATABASE waits
; 5 s for the other sessions on it to end, so idle server connections are closed well before that.
server_idle_timeout = 2
log_connections = 0
log_disconnections = 0
"""


def _run_as(socket_folder: str) -> str | None:
    """PgBouncer refuses to run as root: then it runs as the owner of the server's socket folder (the
    embedded server's user, who can reach its socket), or as nobody for a server over TCP."""
    if os.geteuid() != 0:
        return None
    if socket_folder.startswith("/"):
        return pwd.getpwuid(os.stat(socket_folder).st_uid).pw_name
    return "nobody"


def start(
    pool_mode: str,
    server: Mapping[str, Any],
    *,
    pool_size: int,
    port: int | None = None,
    server_settings: Mapping[str, str] | None = None,
) -> PgBouncer:
    """Debian's PgBouncer in front of `server` (a Django DATABASES entry), in `pool_mode` pooling with
    `pool_size` server connections per database, on `port` (a free one if None), started and answering.
    `server_settings` (name: value) are SET on every server connection it opens, as a role's settings are.
    Raises RuntimeError if it exits or is not up within START_TIMEOUT_SECONDS (its log in the message)."""
    if pool_mode not in POOL_MODES:
        raise ValueError(f"pool_mode {pool_mode!r}: use one of {', '.join(POOL_MODES)}")
    folder = Path(tempfile.mkdtemp(prefix=f"galley-pgbouncer-{pool_mode}-"))
    port = free_port() if port is None else port
    (folder / "pgbouncer.ini").write_text(
        config(
            pool_mode=pool_mode,
            port=port,
            folder=folder,
            server=server,
            pool_size=pool_size,
            server_settings=server_settings or {},
        )
    )
    (folder / "users.txt").write_text(f'"{server["USER"]}" ""\n')
    user = _run_as(server["HOST"] or "")
    if user is not None:
        for path in (folder, *folder.iterdir()):
            shutil.chown(path, user=user)
    argv = [str(PGBOUNCER), *(["-u", user] if user else []), str(folder / "pgbouncer.ini")]
    # Not daemonized: it logs to stderr, into a file this process opened.
    with open(folder / "pgbouncer.log", "a") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    bouncer = PgBouncer(pool_mode, port, folder, process)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while "process up" not in bouncer.output():
        if process.poll() is not None or time.monotonic() > deadline:
            output = bouncer.output()
            bouncer.stop()
            raise RuntimeError(f"pgbouncer on port {port} did not start (exit {process.returncode}):\n{output}")
        time.sleep(0.05)
    return bouncer
