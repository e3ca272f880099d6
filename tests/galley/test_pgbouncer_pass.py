"""The suite's way through PgBouncer (GALLEY_TEST_PGBOUNCER, docs/testing.md#pgbouncer-pass): the URL the tests
get and the configuration PgBouncer gets. `make test-pgbouncer` runs the publishing tests through it."""

from __future__ import annotations

from galley.env import database_config
from galley.testing.embedded_database import through_pgbouncer
from galley.testing.pgbouncer import config


def test_pooled_url__socket_server__same_database_and_user_on_the_pgbouncer_port_without_the_socket():
    url = through_pgbouncer("postgresql://postgres@/postgres?host=/tmp/galley-test-pg-x/pgdata&sslmode=disable", 6543)
    assert database_config(url) == {
        **database_config("postgresql://postgres@/postgres?host=/tmp/galley-test-pg-x/pgdata&sslmode=disable"),
        "HOST": "127.0.0.1",
        "PORT": "6543",
    }


def test_pooled_url__tcp_server_with_password__password_kept_quoted():
    url = through_pgbouncer("postgresql://galley:p%40ss@db.example:5432/galley", 6543)
    assert url == "postgresql://galley:p%40ss@127.0.0.1:6543/galley"


def test_pgbouncer_config__lock_bounds__set_on_every_server_connection(tmp_path):
    server = database_config("postgresql://postgres@/postgres?host=/tmp/pgdata")
    ini = config(
        pool_mode="transaction",
        port=6543,
        folder=tmp_path,
        server=server,
        pool_size=8,
        server_settings={"lock_timeout": "5000ms", "idle_in_transaction_session_timeout": "60000ms"},
    )
    [entry] = [line for line in ini.splitlines() if line.startswith("* = ")]
    assert entry == (
        "* = host=/tmp/pgdata port=5432 user=postgres connect_query="
        '\'SET lock_timeout = "5000ms"; SET idle_in_transaction_session_timeout = "60000ms"\''
    )
    assert "pool_mode = transaction" in ini.splitlines()
