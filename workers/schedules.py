from __future__ import annotations

from django_q.models import Schedule

SCHEDULES = [
    # Sweeps every few seconds for a minute (django-q2 schedules at most once a minute).
    {"name": "galley-sweep", "func": "workers.tasks.sweep", "schedule_type": Schedule.MINUTES, "minutes": 1},
    # Retention: finished operations older than GALLEY_RETENTION_DAYS (docs/invariants.md#i11).
    {"name": "galley-purge", "func": "workers.tasks.purge", "schedule_type": Schedule.HOURLY},
    # Drift at the target: re-read a bounded number of published revisions (GALLEY_DRIFT_CHECKS_PER_RUN).
    {
        "name": "galley-drift-check",
        "func": "publishing.tasks.check_drift",
        "schedule_type": Schedule.MINUTES,
        "minutes": 10,
    },
    # Schedules past GALLEY_SCHEDULE_LATENESS_SECONDS tell operators, once each (docs/operations.md#overdue-schedules).
    {
        "name": "galley-overdue-schedules",
        "func": "publishing.tasks.alert_overdue_schedules",
        "schedule_type": Schedule.MINUTES,
        "minutes": 1,
    },
    # Retention of the JSON API's Idempotency-Key records (GALLEY_RETENTION_DAYS). A dotted name,
    # not an import: the machinery imports no domain app.
    {
        "name": "galley-purge-idempotency-keys",
        "func": "publishing.tasks.purge_idempotency_keys",
        "schedule_type": Schedule.HOURLY,
    },
]


def ensure_schedules(*, using: str = "default") -> None:
    """Create or update Galley's django-q2 schedules; idempotent."""
    for spec in SCHEDULES:
        defaults = {key: value for key, value in spec.items() if key != "name"}
        Schedule.objects.using(using).update_or_create(name=spec["name"], defaults={**defaults, "repeats": -1})
