"""Drain due operations: claim in batches, run handlers with several calls in flight, finish fenced.

One drain is what a django-q2 task (or `manage.py run_worker`) does when the doorbell rings.
Handlers run on a pool of threads, each with its own database connection, so a worker is
never limited to one network call at a time. No database transaction is open while a
handler runs: the claim commits before, and each outcome commits after.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connections
from django.db.models import Min
from django.utils import timezone

from workers.actions.claims import (
    claim_operations,
    complete_operation,
    fail_operation,
    record_lease_lost,
    supersede_running_operation,
)
from workers.crashpoints import crash_point
from workers.errors import FailureKind, LeaseLost, OperationFailed, Superseded
from workers.models import Operation, OperationStatus
from workers.registry import ClaimedOperation, get_handler, startup_checks

logger = logging.getLogger(__name__)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


_checked = threading.Event()

# The database is out of reach for now (a restart, a failover, a dropped connection). Django wraps
# psycopg's errors in its own; psycopg's may still surface unwrapped from outside a Django cursor.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, psycopg.OperationalError)
# After these an attempt records no outcome of its own: a lost lease leaves it to the new owner, a
# lost database (whose last commit may or may not have happened) to the lease's expiry.
NO_OUTCOME: tuple[type[Exception], ...] = (LeaseLost, *DATABASE_UNAVAILABLE)
RECONNECT_BASE_SECONDS = 0.2
RECONNECT_MAX_SECONDS = 5.0


def drop_broken_connections(problem: Exception, doing: str, *, extra: dict[str, object] | None = None) -> None:
    """The database went away while this thread was `doing` something: close the thread's
    connections, so that its next query opens a new one, and log it in one line."""
    connections.close_all()
    logger.warning("database unavailable while %s: %s", doing, " ".join(str(problem).split()), extra=extra)


def reconnect_delay(failures: int) -> float:
    """Seconds to wait after `failures` database outages in a row: exponential with jitter, capped."""
    ceiling = min(RECONNECT_MAX_SECONDS, RECONNECT_BASE_SECONDS * 2 ** (failures - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 -- jitter, not security


def run_startup_checks_once() -> None:
    """The startup checks, the first time a process asks (a django-q2 worker's first task)."""
    if not _checked.is_set():
        run_startup_checks()


def run_startup_checks() -> dict[str, str]:
    """Run the registered startup checks and log each outcome; returns them by name. A failure
    is logged with what is wrong, never raised."""
    _checked.set()
    outcomes: dict[str, str] = {}
    for name, check in startup_checks().items():
        try:
            outcomes[name] = f"ok: {check()}"
        except Exception as problem:  # a check reports; it must not stop the worker
            outcomes[name] = f"NOT READY: {problem}"
            logger.error("startup check %s: %s", name, problem)
        else:
            logger.info("startup check %s: %s", name, outcomes[name])
    return outcomes


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def shutdown_pool() -> None:
    """Close every pool thread's database connection, then stop the pool (tests, process exit).

    Each closing task waits at a barrier until all have started, so each runs on its own thread.
    """
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is None:
        return
    size = pool._max_workers
    barrier = threading.Barrier(size)

    def close_connections() -> None:
        barrier.wait(timeout=10)
        connections.close_all()

    for future in [pool.submit(close_connections) for _ in range(size)]:
        future.result()
    pool.shutdown(wait=True)


def _get_pool() -> ThreadPoolExecutor:
    """One pool per process, reused across drains so its threads keep their database connections."""
    global _pool
    with _pool_lock:
        if _pool is not None and _pool._max_workers != settings.GALLEY_WORKER_CONCURRENCY:
            raise RuntimeError("GALLEY_WORKER_CONCURRENCY changed while the worker pool runs; shut it down first")
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.GALLEY_WORKER_CONCURRENCY, thread_name_prefix="galley-worker"
            )
        return _pool


def run_operation(claimed: ClaimedOperation) -> str:
    """Run one claimed operation to an outcome; returns the outcome's name. Never raises.

    If the database goes away meanwhile, the attempt writes nothing more (a write under way
    committed or rolled back with the session): an unfinished operation stays running under this
    lease, and once the lease has expired a new claim takes it over as ambiguous (looking the key
    up first), as after a crash.
    """
    started = time.monotonic()
    try:
        close_old_connections()
        return _attempt(claimed, started=started)
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, f"running {claimed.key}, left to its lease", extra=claimed.log_extra())
        return "database_unavailable"
    finally:
        close_old_connections()


def _attempt(claimed: ClaimedOperation, *, started: float) -> str:
    extra = claimed.log_extra()
    try:
        try:
            success = get_handler(claimed.kind)(claimed)
        except OperationFailed as failure:
            decision = fail_operation(claimed, failure, started=started)
            logger.info(
                "attempt failed: %s (%s) -> %s",
                failure.message,
                failure.kind,
                decision.disposition,
                extra=extra,
            )
            return str(decision.disposition)
        except Superseded as superseded:
            supersede_running_operation(claimed, str(superseded), started=started)
            logger.info("superseded: %s", superseded, extra=extra)
            return "superseded"
        except NO_OUTCOME:
            raise
        except Exception as exc:  # a handler bug must not kill the worker or lose the intent
            logger.exception("handler raised unexpectedly", extra=extra)
            unexpected = OperationFailed(FailureKind.UNEXPECTED, f"{type(exc).__name__}: {exc}")
            return str(fail_operation(claimed, unexpected, started=started).disposition)
        crash_point("before_finalize", kind=claimed.kind)
        try:
            complete_operation(claimed, success, started=started)
        except NO_OUTCOME:
            raise
        except Exception as exc:  # the domain's finalize write failed and rolled back with the success
            logger.exception("finalize failed", extra=extra)
            unexpected = OperationFailed(FailureKind.UNEXPECTED, f"finalize failed: {type(exc).__name__}: {exc}")
            return str(fail_operation(claimed, unexpected, started=started).disposition)
        crash_point("after_finalize", kind=claimed.kind)
        logger.info("succeeded", extra=extra)
        return "succeeded"
    except LeaseLost:
        logger.warning("lease lost: another worker owns %s now; wrote nothing", claimed.key, extra=extra)
        record_lease_lost(claimed, started=started)
        return "lease_lost"


def seconds_until_due(kinds: list[str] | None = None) -> float | None:
    """Seconds until the next waiting operation is due (0 if one is due now), or None."""
    waiting = Operation.objects.filter(status__in=[OperationStatus.PENDING, OperationStatus.RETRY_WAIT])
    running = Operation.objects.filter(status=OperationStatus.RUNNING)
    if kinds:
        waiting, running = waiting.filter(kind__in=kinds), running.filter(kind__in=kinds)
    moments = [
        waiting.aggregate(at=Min("next_attempt_at"))["at"],
        running.aggregate(at=Min("lease_expires_at"))["at"],
    ]
    moments = [moment for moment in moments if moment is not None]
    if not moments:
        return None
    return max(0.0, (min(moments) - timezone.now()).total_seconds())


def drain(
    *,
    worker_id: str | None = None,
    kinds: list[str] | None = None,
    time_budget: float | None = None,
    idle_wait: float | None = None,
) -> Counter[str]:
    """Claim and run due operations until none is due within `idle_wait` seconds or the budget ends.

    Safe to run twice, concurrently, or after a crash: claims are disjoint and every outcome
    is fenced. Returns a count of outcomes.
    """
    worker_id = worker_id or default_worker_id()
    budget = settings.GALLEY_DRAIN_SECONDS if time_budget is None else time_budget
    idle_wait = settings.GALLEY_DRAIN_IDLE_WAIT_SECONDS if idle_wait is None else idle_wait
    deadline = time.monotonic() + budget
    concurrency = settings.GALLEY_WORKER_CONCURRENCY
    pool = _get_pool()
    in_flight: set[Future[str]] = set()
    outcomes: Counter[str] = Counter()
    idle_since: float | None = None
    while True:
        free = concurrency - len(in_flight)
        if free > 0 and time.monotonic() < deadline:
            try:
                claims = claim_operations(
                    worker_id=worker_id, limit=min(free, settings.GALLEY_CLAIM_BATCH), kinds=kinds
                )
            except DATABASE_UNAVAILABLE:
                # Leave once the handlers in flight have ended their attempts, so that the next
                # drain never runs more of them than the pool has threads.
                wait(in_flight)
                raise
            if claims:
                crash_point("after_claim")
            in_flight.update(pool.submit(run_operation, claimed) for claimed in claims)
        if in_flight:
            idle_since = None
            finished, in_flight = wait(in_flight, timeout=0.5, return_when=FIRST_COMPLETED)
            outcomes.update(future.result() for future in finished)
            continue
        # Nothing claimable now. Wait a little for work due soon; operations that are due but
        # blocked by a prerequisite another worker holds count as idle time.
        now = time.monotonic()
        idle_since = idle_since or now
        due_in = seconds_until_due(kinds)
        if due_in is None or due_in > idle_wait or now - idle_since > idle_wait or now + due_in > deadline:
            return outcomes
        time.sleep(min(max(due_in, 0.2), 1.0))
