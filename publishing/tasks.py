"""django-q2 tasks of the publishing app, named by dotted path in workers.schedules (which may
not import a domain app). Each is a thin call of an action, safe to run twice or concurrently."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.db import transaction

from publishing.actions.drift import do_enqueue_drift_checks
from publishing.actions.idempotency import purge_idempotency_records
from publishing.actions.overdue import do_alert_overdue_schedules
from workers.outages import DATABASE_UNAVAILABLE, drop_broken_connections


def purge_idempotency_keys() -> int:
    """Retention of the API's Idempotency-Key records (GALLEY_RETENTION_DAYS); returns how many went.

    As workers.tasks.purge does, a database outage is logged and the task returns: nothing is
    lost, the next hour's run deletes what this one did not.
    """
    try:
        return purge_idempotency_records()
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, "purging idempotency records")
        return 0


def check_drift() -> int:
    """One round of the drift check (workers.schedules, every 10 minutes): enqueue at most
    GALLEY_DRIFT_CHECKS_PER_RUN checks of published revisions, none checked within
    GALLEY_DRIFT_CHECK_INTERVAL_MINUTES; returns how many. Only a target that
    reports what it shows now (WordPress's plugin) can be checked; the reference target cannot drift."""
    if settings.GALLEY_TARGET_KIND != "wordpress":
        return 0
    try:
        with transaction.atomic(durable=True):
            return do_enqueue_drift_checks(
                limit=settings.GALLEY_DRIFT_CHECKS_PER_RUN,
                interval=datetime.timedelta(minutes=settings.GALLEY_DRIFT_CHECK_INTERVAL_MINUTES),
            )
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, "enqueuing drift checks")
        return 0


# Alerts one sweep writes at most: a spike of missed schedules is told over a few minutes, not in one
# transaction holding thousands of new rows.
OVERDUE_ALERTS_PER_RUN = 500


def alert_overdue_schedules() -> int:
    """Every minute (workers.schedules): write the alert of each schedule newly overdue
    (GALLEY_SCHEDULE_LATENESS_SECONDS past its time, docs/operations.md#overdue-schedules); returns how
    many. Several hosts' runs at once write each alert once (publishing.actions.overdue)."""
    try:
        with transaction.atomic(durable=True):
            return do_alert_overdue_schedules(limit=OVERDUE_ALERTS_PER_RUN)
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, "alerting overdue schedules")
        return 0
