"""pytest plugin: a throwaway embedded PostgreSQL for the suite when DATABASE_URL is not set.

DATABASE_URL must be set before pytest-django reads the settings, hence a wrapper around
pytest_load_initial_conftests (wrappers run before every plain implementation): it names the
server's socket folder (its data folder, where pgserver puts the socket) before the server exists.
The server itself starts once the tests are collected, and only if one of them is marked
`integration` (tests/conftest.py marks every test that needs the database or starts processes):
`pytest -m "not integration"` starts no PostgreSQL. It lives in a temporary folder and is stopped
and deleted when pytest exits; the `make run` database under var/ is never touched.

Under pytest-xdist (`-n N`) the controller collects nothing, so it starts the server as the session
starts, before the workers exist; they inherit DATABASE_URL and share the one server, each with a
test database of its own (pytest-django names them `test_postgres_gw0`, `test_postgres_gw1`, …).

GALLEY_TEST_PGBOUNCER=transaction (or session) puts Debian's PgBouncer in that pooling between the tests and
their server, the embedded one or DATABASE_URL's (docs/testing.md#pgbouncer-pass): DATABASE_URL names a free port
of 127.0.0.1 before the settings are read, and PgBouncer starts on it once the server is up, by the same
process and at the same moment as the server (galley.testing.pgbouncer). In transaction pooling the tests and
every process they start run as Galley's hosts behind it must (docs/operations.md#pgbouncer):
GALLEY_PREPARED_STATEMENTS=off and GALLEY_WAKEUP=poll, the lock bounds SET on PgBouncer's server connections
(it does not pass libpq's options on). The xdist workers inherit all of it.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import pytest

from galley import embedded_database
from galley.env import database_config
from galley.testing import pgbouncer
from galley.testing.ports import free_port

POOLING_ENV = "GALLEY_TEST_PGBOUNCER"
# Server connections per test database (each xdist worker's): fewer than the clients a test can have (its
# own connection, a worker's handler threads, a second connection holding a lock), so that clients share
# them as behind a production pooler; enough for every transaction a test holds open at once.
POOL_SIZE = 8

_pgdata_key = pytest.StashKey[Path]()
_direct_url_key = pytest.StashKey[str]()
_pooling_key = pytest.StashKey[tuple[str, int]]()
_started_key = pytest.StashKey[bool]()
_server_key = pytest.StashKey[Any]()
_pgbouncer_key = pytest.StashKey[pgbouncer.PgBouncer]()


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Generator[None, None, None]:
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    pool_mode = os.environ.get(POOLING_ENV)
    pooled = bool(pool_mode) and not os.environ.get("PYTEST_XDIST_WORKER")  # a worker inherits the controller's
    # Refused before the server's folder exists: a usage error ends pytest before pytest_unconfigure.
    if pooled and pool_mode not in pgbouncer.POOL_MODES:
        raise pytest.UsageError(f"{POOLING_ENV}={pool_mode!r}: use {' or '.join(pgbouncer.POOL_MODES)}")
    if pooled and not pgbouncer.PGBOUNCER.exists():
        raise pytest.UsageError(f"{POOLING_ENV}: no pgbouncer at {pgbouncer.PGBOUNCER} (`make pgbouncer`)")
    if not os.environ.get("DATABASE_URL"):
        pgdata = (Path(tempfile.mkdtemp(prefix="galley-test-pg-")) / "pgdata").resolve()
        os.environ["DATABASE_URL"] = embedded_database.database_url(pgdata)
        early_config.stash[_pgdata_key] = pgdata
    if pooled and pool_mode:
        port = free_port()
        early_config.stash[_direct_url_key] = os.environ["DATABASE_URL"]
        early_config.stash[_pooling_key] = (pool_mode, port)
        os.environ["DATABASE_URL"] = through_pgbouncer(os.environ["DATABASE_URL"], port)
        if pool_mode == "transaction":
            os.environ["GALLEY_PREPARED_STATEMENTS"] = "off"
            os.environ["GALLEY_WAKEUP"] = "poll"
    return (yield)


def through_pgbouncer(url: str, port: int) -> str:
    """`url`'s database and user, through a PgBouncer on `port` of 127.0.0.1."""
    server = database_config(url)
    auth = quote(server["USER"], safe="") + (":" + quote(server["PASSWORD"], safe="") if server["PASSWORD"] else "")
    query = f"?{urlencode(server['OPTIONS'])}" if server["OPTIONS"] else ""
    return f"postgresql://{auth}@127.0.0.1:{port}/{quote(server['NAME'], safe='')}{query}"


def _distributes(config: pytest.Config) -> bool:
    """True in the controller of an xdist run: it hands the tests to workers and collects none."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)  # before xdist's own sessionstart starts the workers
def pytest_sessionstart(session: pytest.Session) -> None:
    if _distributes(session.config) and not session.config.option.collectonly:
        _start(session)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the server if a selected test needs it (after `-m` and `-k` have deselected)."""
    if session.config.option.collectonly or _started_key in session.config.stash:
        return
    if any(item.get_closest_marker("integration") for item in session.items):
        _start(session)


def _start(session: pytest.Session) -> None:
    stash = session.config.stash
    stash[_started_key] = True
    pgdata = stash.get(_pgdata_key, None)
    if pgdata is not None:
        server = embedded_database.start(pgdata, delete_on_exit=True)
        stash[_server_key] = server
        expected = urlsplit(stash.get(_direct_url_key, os.environ["DATABASE_URL"])).query
        if urlsplit(server.get_uri()).query != expected:
            # pgserver put the socket elsewhere (a data folder path too long for a socket): the settings,
            # read already, point at nothing; better to stop here than to fail every test obscurely.
            pytest.exit(f"embedded PostgreSQL listens at {server.get_uri()}, not at {expected}", returncode=4)
    pooling = stash.get(_pooling_key, None)
    if pooling is not None:
        pool_mode, port = pooling
        try:
            stash[_pgbouncer_key] = pgbouncer.start(
                pool_mode,
                database_config(stash[_direct_url_key]),
                pool_size=POOL_SIZE,
                port=port,
                server_settings=_session_settings(),
            )
        except RuntimeError as error:
            pytest.exit(f"{POOLING_ENV}={pool_mode}: {error}", returncode=4)


def _session_settings() -> dict[str, str]:
    """What the settings send as libpq's `options` (`-c name=value`: the lock bounds), which PgBouncer does
    not pass on: it SETs them on its server connections instead, as the role's settings do behind a pooler
    in production (docs/configuration.md#lock-bounds)."""
    from django.conf import settings  # read by now: pytest-django loads them before the session starts

    words = settings.DATABASES["default"]["OPTIONS"].get("options", "").split()
    return dict(word.removeprefix("-c").split("=", 1) for word in words if word != "-c")


def pytest_unconfigure(config: pytest.Config) -> None:
    bouncer = config.stash.get(_pgbouncer_key, None)
    if bouncer is not None:
        bouncer.stop()
    server = config.stash.get(_server_key, None)
    if server is not None:
        server.cleanup()
    pgdata = config.stash.get(_pgdata_key, None)
    if pgdata is not None and pgdata.parent.exists() and not any(pgdata.parent.iterdir()):
        pgdata.parent.rmdir()
