"""Every database session carries Galley's lock and idle bounds (GALLEY_LOCK_TIMEOUT_SECONDS,
GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS), set through libpq's `options` beside any the
DATABASE_URL gives."""

from __future__ import annotations

import pytest
from django.db import connection

from galley.env import postgres_options


@pytest.mark.django_db
def test_database_session__lock_and_idle_bounds_are_the_settings(settings):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, setting FROM pg_settings"
            " WHERE name IN ('lock_timeout', 'idle_in_transaction_session_timeout') ORDER BY name"
        )
        bounds = dict(cursor.fetchall())
    assert bounds == {
        "idle_in_transaction_session_timeout": str(round(settings.GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS * 1000)),
        "lock_timeout": str(round(settings.GALLEY_LOCK_TIMEOUT_SECONDS * 1000)),
    }


def test_postgres_options__database_url_options_kept__the_bounds_replaced():
    given = "-c search_path=galley,public -c lock_timeout=0 -cidle_in_transaction_session_timeout=0"
    assert postgres_options(given, lock_timeout="5000ms", idle_in_transaction_session_timeout="60000ms") == (
        "-c search_path=galley,public -c lock_timeout=5000ms -c idle_in_transaction_session_timeout=60000ms"
    )
    assert postgres_options("", lock_timeout="1000ms") == "-c lock_timeout=1000ms"
