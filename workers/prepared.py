"""The statements every operation runs, prepared once per connection.

PostgreSQL spent longer planning the claim than running it (0.5 ms of planning against 0.25 ms of
execution, by EXPLAIN ANALYZE), and Django's psycopg cursors bind parameters on the client, so every
statement is planned again. The fixed raw statements of the hot path (claim, renew, success, enqueue,
a publication's checks and finalize) run here instead: on the same connection, hence in the caller's
transaction, through a server-binding psycopg cursor that prepares the statement the first time and
reuses its plan after. The ORM's own queries are unchanged. Where Django logs queries (DEBUG,
CaptureQueriesContext), these are logged too. With GALLEY_PREPARED_STATEMENTS off (behind a pooler that
does not keep prepared statements per client) they run through the same cursor, unprepared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, TypeVar, overload

import psycopg
from django.conf import settings
from django.db import connection
from django.db.models import Model
from psycopg.rows import Row, RowFactory

M = TypeVar("M", bound=Model)


@overload
def execute_prepared(sql: str, params: Mapping[str, Any]) -> psycopg.Cursor[tuple[Any, ...]]: ...


@overload
def execute_prepared(sql: str, params: Mapping[str, Any], *, row_factory: RowFactory[Row]) -> psycopg.Cursor[Row]: ...


def execute_prepared(
    sql: str, params: Mapping[str, Any], *, row_factory: RowFactory[Any] | None = None
) -> psycopg.Cursor[Any]:
    """Run `sql` as a prepared statement on this thread's connection; returns the cursor to read,
    whose rows `row_factory` makes (e.g. psycopg.rows.dict_row, to read columns by name; tuples
    without one). psycopg's errors come out as Django's, as from a Django cursor."""
    connection.ensure_connection()
    cursor: psycopg.Cursor[Any] = (
        psycopg.Cursor(connection.connection)
        if row_factory is None
        else psycopg.Cursor(connection.connection, row_factory=row_factory)
    )
    started = time.monotonic()
    try:
        with connection.wrap_database_errors:
            cursor.execute(sql, params, prepare=settings.GALLEY_PREPARED_STATEMENTS)
    finally:
        if connection.queries_logged:
            connection.queries_log.append({"sql": sql.strip(), "time": f"{time.monotonic() - started:.3f}"})
    return cursor


def the_row(cursor: psycopg.Cursor[Row]) -> Row:
    """The one row a statement always returns (an aggregate, a row locked by a foreign key, an upsert's
    outcome); a statement that returned none is a defect, said so."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row")
    return row


def json_value(value: Any) -> Any:
    """A json or jsonb column as read here: Django's connection loads them as text (Django's JSONField
    decodes it), so a raw cursor decodes it too."""
    return json.loads(value) if isinstance(value, str) else value


def inserted(instance: M) -> M:
    """`instance`, built from what an INSERT … RETURNING just wrote, as a row loaded from the database:
    no second round trip to read it back."""
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance
