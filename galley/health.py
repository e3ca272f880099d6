"""Probes for load balancers and process supervisors: /healthz (the process answers) and /readyz (it can work).

Both answer without a session or sign-in, over plain HTTP too (settings exempt them from the HTTPS
redirect), in plain text. /healthz never touches the database: a web process whose database is down
is alive, and restarting it would not help. /readyz asks the database one question per call: are the
migrations this code needs applied? It answers 503 while the database cannot be reached or lags
behind the code (a deploy that has not migrated yet), so the balancer sends no traffic there.

A 503 from /readyz is an expected answer, not a server error: it is logged at WARNING when the
process's answer changes (ready → not ready, or another reason), not at ERROR on every probe, which
Django's request logger would otherwise do for each 5xx (a balancer probes every few seconds).
"""

from __future__ import annotations

import logging
from functools import cache

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, ProgrammingError, connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)

# The last answer this process gave, so that only a change of answer is logged.
_last_answer = "ready"


@cache
def _latest_migrations() -> frozenset[tuple[str, str]]:
    """The leaf migration of every app, from the code on disk (read once per process)."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return frozenset(loader.graph.leaf_nodes())


def _plain(status: int, text: str) -> HttpResponse:
    return HttpResponse(f"{text}\n", status=status, content_type="text/plain; charset=utf-8")


@require_GET
@never_cache
@login_not_required
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: 200 as long as the process serves requests."""
    return _plain(200, "ok")


# What the database has applied, in one query: django's own table, named by its model.
APPLIED_MIGRATIONS_SQL = f"SELECT app, name FROM {MigrationRecorder.Migration._meta.db_table}"  # noqa: S608


@require_GET
@never_cache
@login_not_required
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: 200 when the database answers and holds every migration of this code, else 503 saying which."""
    expected = _latest_migrations()
    try:
        with connection.cursor() as cursor:
            cursor.execute(APPLIED_MIGRATIONS_SQL)
            applied = set(cursor.fetchall())
    except ProgrammingError:  # no django_migrations table: a database never migrated
        applied = set()
    except DatabaseError as exc:
        return _answer("database unreachable", cause=str(exc))
    missing = sorted(expected - applied)
    if missing:
        return _answer("migrations not applied: " + ", ".join(f"{app}.{name}" for app, name in missing))
    return _answer("ready")


def _answer(text: str, *, cause: str = "") -> HttpResponse:
    """200 "ready" or 503 with `text`; a change of answer is logged once (WARNING when not ready)."""
    global _last_answer  # one process's last answer, kept to log changes only
    changed, _last_answer = text != _last_answer, text
    if text == "ready":
        if changed:
            logger.info("readyz: ready again")
        return _plain(200, text)
    if changed:
        logger.warning("readyz: not ready: %s%s", text, f" ({cause})" if cause else "")
    response = _plain(503, text)
    # Logged above (or already, when unchanged): Django's request logger would add an ERROR per probe.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
