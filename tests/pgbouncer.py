"""Debian's PgBouncer (/usr/sbin/pgbouncer, `make pgbouncer`) in front of the test PostgreSQL, for tests of
Galley behind a pooler (docs/operations.md#pgbouncer): `start_pgbouncer(pool_mode)` starts one on a free
port of 127.0.0.1 for the test, in "transaction" or "session" pooling, and stops it at the end.

It serves every database name of the server (a `*` entry), so each pytest-xdist worker's own test
database is reached under its own name. Clients are trusted (a local test); it reaches PostgreSQL as the
test connection does (its socket folder or host, port, user and password). Its configuration and its
log are in a temporary folder of its own, which goes with it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection

from tests.processes import child_database_url, free_port, stop

PGBOUNCER = Path("/usr/sbin/pgbouncer")
START_TIMEOUT_SECONDS = 30


@dataclass
class PgBouncer:
    pool_mode: str
    port: int
    folder: Path
    process: subprocess.Popen[str]

    @property
    def database_url(self) -> str:
        """The test database through this PgBouncer, as a child process's DATABASE_URL."""
        return child_database_url(host="127.0.0.1", port=self.port)

    def output(self) -> str:
        return (self.folder / "pgbouncer.log").read_text(errors="replace")


def _config(*, pool_mode: str, port: int, folder: Path) -> str:
    server = connection.settings_dict
    target = f"host={server['HOST'] or '127.0.0.1'} port={server['PORT'] or 5432} user={server['USER']}"
    if server["PASSWORD"]:
        target += f" password={server['PASSWORD']}"
    # In transaction pooling fewer server connections than a worker has clients, so that clients share
    # them as they do in production (the measured "_pg3_0 already exists" needs two clients on one).
    # Session pooling gives each client its own, so enough for every client of a test.
    pool_size = 3 if pool_mode == "transaction" else 40
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
max_client_conn = 200
; libpq's options carry Galley's lock bounds (docs/configuration.md#lock-bounds); PgBouncer 1.18 refuses a
; client that sends it unless told to ignore it (then the bounds belong on the role, as the docs say).
ignore_startup_parameters = extra_float_digits, options
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


@pytest.fixture
def start_pgbouncer() -> Iterator[Callable[[str], PgBouncer]]:
    """start_pgbouncer(pool_mode): Debian's PgBouncer in front of the test database, in "transaction" or
    "session" pooling, started and answering; stopped, with its folder removed, at the test's end."""
    if not PGBOUNCER.exists():
        pytest.skip(f"Debian's pgbouncer is not installed at {PGBOUNCER} (`make pgbouncer` installs it)")
    started: list[PgBouncer] = []

    def start(pool_mode: str) -> PgBouncer:
        assert pool_mode in ("transaction", "session"), pool_mode
        folder = Path(tempfile.mkdtemp(prefix=f"galley-pgbouncer-{pool_mode}-"))
        port = free_port()
        (folder / "pgbouncer.ini").write_text(_config(pool_mode=pool_mode, port=port, folder=folder))
        (folder / "users.txt").write_text(f'"{connection.settings_dict["USER"]}" ""\n')
        user = _run_as(connection.settings_dict["HOST"] or "")
        if user is not None:
            for path in (folder, *folder.iterdir()):
                shutil.chown(path, user=user)
        argv = [str(PGBOUNCER), *(["-u", user] if user else []), str(folder / "pgbouncer.ini")]
        # Not daemonized: it logs to stderr, into a file this process opened.
        with open(folder / "pgbouncer.log", "a") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        bouncer = PgBouncer(pool_mode, port, folder, process)
        started.append(bouncer)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while "process up" not in bouncer.output():
            assert process.poll() is None, f"pgbouncer exited ({process.returncode})\n{bouncer.output()}"
            assert time.monotonic() < deadline, f"pgbouncer did not start within {START_TIMEOUT_SECONDS} s"
            time.sleep(0.05)
        return bouncer

    yield start
    for bouncer in started:
        stop(bouncer.process)
        shutil.rmtree(bouncer.folder, ignore_errors=True)
