"""django-q2 tasks: doorbells only. Each carries no state beyond what is in the database, and
is safe to receive twice, concurrently, or after a crash.

Each django-q2 worker process drains on a thread of its own, started when the process spawns
(`start_service`, on django-q2's post_spawn signal): it LISTENs for the doorbell and claims at once,
so no queue row stands between a commit and its claim. A drain task only rings that service and
waits for its drain; in a process without one (tests, a synchronous cluster) it drains itself.

A task cut short by the database going away (a restart, a failover) logs it and returns: the
next doorbell or sweep does the work, and every intent is still in the database.
"""

from __future__ import annotations

import multiprocessing.util
import time

from django.conf import settings
from psycopg.rows import dict_row

from workers.actions.housekeeping import purge_finished_operations, reconcile_expired_leases
from workers.crashpoints import crash_point
from workers.doorbell import ring_cluster, ring_doorbell
from workers.drain import default_worker_id, drain, seconds_until_due
from workers.outages import DATABASE_UNAVAILABLE, drop_broken_connections
from workers.prepared import execute_prepared
from workers.service import Service, run_startup_checks_once
from workers.sql import SWEEP_UNLOCK_SQL, TRY_SWEEP_LOCK_SQL

_service: Service | None = None


def start_service(**_signal: object) -> Service:
    """Start this django-q2 worker process's drain service (django-q2's post_spawn signal).

    When the process ends (django-q2 stops or recycles it), the service stops claiming and lets the
    attempts in flight end first, within a target call's timeout.
    """
    global _service
    if _service is not None and _service.is_alive():
        return _service
    service = Service(worker_id=default_worker_id(), poll=settings.GALLEY_SWEEP_SECONDS)
    service.start()
    _service = service
    stop_timeout = 2 * settings.GALLEY_TARGET_TIMEOUT_SECONDS + 5
    multiprocessing.util.Finalize(service, service.stop, kwargs={"timeout": stop_timeout}, exitpriority=10)
    return service


def drain_operations() -> dict[str, int]:
    try:
        if _service is not None:
            # A service that died (it should not) is started again: this task is its safety net.
            outcomes = start_service().poke_and_wait(settings.GALLEY_DRAIN_SECONDS)
        else:
            run_startup_checks_once()
            outcomes = drain()
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, "draining operations")
        return {}
    crash_point("before_ack")
    return dict(outcomes)


def sweep() -> dict[str, int]:
    """Every few seconds for about a minute: reconcile expired leases and ring for due work.

    django-q2 schedules run at most once a minute, so the minute's task loops; an advisory
    lock keeps overlapping sweeps (several clusters, a slow minute) from doubling up.
    """
    totals = {"rounds": 0, "expired_leases": 0, "dead": 0}
    try:
        with execute_prepared(TRY_SWEEP_LOCK_SQL, {}, row_factory=dict_row) as cursor:
            (lock,) = cursor.fetchall()
        if not lock["locked"]:
            return totals
        try:
            end = time.monotonic() + settings.GALLEY_SWEEP_DURATION_SECONDS
            while time.monotonic() < end:
                reconciled = reconcile_expired_leases()
                totals["rounds"] += 1
                totals["expired_leases"] += reconciled["expired_leases"]
                totals["dead"] += reconciled["dead"]
                if seconds_until_due() == 0:
                    # Work is due that no worker has taken: ring again, and through django-q2 too,
                    # which reaches a cluster process whose listener is gone.
                    ring_doorbell()
                    ring_cluster()
                time.sleep(settings.GALLEY_SWEEP_SECONDS)
        finally:
            execute_prepared(SWEEP_UNLOCK_SQL, {}).close()
    except DATABASE_UNAVAILABLE as problem:
        # The lock went with the lost session; the next minute's sweep carries on.
        drop_broken_connections(problem, "sweeping")
    return totals


def purge() -> int:
    try:
        return purge_finished_operations()
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, "purging finished operations")
        return 0
