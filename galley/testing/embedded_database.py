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
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from galley import embedded_database

_pgdata_key = pytest.StashKey[Path]()
_server_key = pytest.StashKey[Any]()


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Generator[None, None, None]:
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    if not os.environ.get("DATABASE_URL"):
        pgdata = (Path(tempfile.mkdtemp(prefix="galley-test-pg-")) / "pgdata").resolve()
        os.environ["DATABASE_URL"] = embedded_database.database_url(pgdata)
        early_config.stash[_pgdata_key] = pgdata
    return (yield)


def _distributes(config: pytest.Config) -> bool:
    """True in the controller of an xdist run: it hands the tests to workers and collects none."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)  # before xdist's own sessionstart starts the workers
def pytest_sessionstart(session: pytest.Session) -> None:
    if _distributes(session.config) and not session.config.option.collectonly:
        _start(session)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the server if a selected test needs it (after `-m` and `-k` have deselected)."""
    if session.config.option.collectonly or _server_key in session.config.stash:
        return
    if any(item.get_closest_marker("integration") for item in session.items):
        _start(session)


def _start(session: pytest.Session) -> None:
    pgdata = session.config.stash.get(_pgdata_key, None)
    if pgdata is None:
        return
    server = embedded_database.start(pgdata, delete_on_exit=True)
    session.config.stash[_server_key] = server
    expected = urlsplit(os.environ["DATABASE_URL"]).query
    if urlsplit(server.get_uri()).query != expected:
        # pgserver put the socket elsewhere (a data folder path too long for a socket): the settings,
        # read already, point at nothing; better to stop here than to fail every test obscurely.
        pytest.exit(f"embedded PostgreSQL listens at {server.get_uri()}, not at {expected}", returncode=4)


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_server_key, None)
    if server is not None:
        server.cleanup()
    pgdata = config.stash.get(_pgdata_key, None)
    if pgdata is not None and pgdata.parent.exists() and not any(pgdata.parent.iterdir()):
        pgdata.parent.rmdir()
