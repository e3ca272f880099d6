"""Debian's PgBouncer in front of the test database, per test (galley.testing.pgbouncer starts it):
`start_pgbouncer(pool_mode)` starts one on a free port of 127.0.0.1 for the test, in "transaction" or
"session" pooling, and stops it at the end.

In transaction pooling it has fewer server connections than a worker has clients, so that clients share
them as they do in production (the measured "_pg3_0 already exists" needs two clients on one); session
pooling gives each client its own, so enough for every client of a test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from galley.testing import pgbouncer
from galley.testing.pgbouncer import PgBouncer
from tests.processes import child_database_url

POOL_SIZES = {"transaction": 3, "session": 40}


def database_url(bouncer: PgBouncer) -> str:
    """The test database through `bouncer`, as a child process's DATABASE_URL."""
    return child_database_url(host="127.0.0.1", port=bouncer.port)


@pytest.fixture
def start_pgbouncer() -> Iterator[Callable[[str], PgBouncer]]:
    """start_pgbouncer(pool_mode): Debian's PgBouncer in front of the test database, in "transaction" or
    "session" pooling, started and answering; stopped, with its folder removed, at the test's end."""
    if not pgbouncer.PGBOUNCER.exists():
        pytest.skip(f"Debian's pgbouncer is not installed at {pgbouncer.PGBOUNCER} (`make pgbouncer` installs it)")
    started: list[PgBouncer] = []

    def start(pool_mode: str) -> PgBouncer:
        bouncer = pgbouncer.start(pool_mode, connection.settings_dict, pool_size=POOL_SIZES[pool_mode])
        started.append(bouncer)
        return bouncer

    yield start
    for bouncer in started:
        bouncer.stop()
