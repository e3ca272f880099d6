"""pytest plugin: a throwaway embedded PostgreSQL for the suite when DATABASE_URL is not set.

It must run before pytest-django reads the settings, hence a wrapper around
pytest_load_initial_conftests (wrappers run before every plain implementation). The server
lives in a temporary folder and is stopped and deleted when pytest exits; the `make run`
database under var/ is never touched.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from galley import embedded_database

_server_key = pytest.StashKey[Any]()


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Generator[None, None, None]:
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    if not os.environ.get("DATABASE_URL"):
        pgdata = Path(tempfile.mkdtemp(prefix="galley-test-pg-")) / "pgdata"
        server = embedded_database.start(pgdata, delete_on_exit=True)
        os.environ["DATABASE_URL"] = server.get_uri()
        early_config.stash[_server_key] = server
    return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_server_key, None)
    if server is not None:
        server.cleanup()
        pgdata_parent = Path(server.pgdata).parent
        if pgdata_parent.exists() and not any(pgdata_parent.iterdir()):
            pgdata_parent.rmdir()
