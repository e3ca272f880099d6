"""Drain due operations: every free thread claims for itself, runs what it claimed, finishes fenced.

A worker process keeps a pool of handler threads, each with its own database connection, so it is
never limited to one network call at a time. Each thread claims one operation per statement and,
when it has run it, claims the next one itself while work is due: no thread idles behind a serial
claimer. The coordinator (the thread that called `drain` or `serve`) only starts more claiming
threads, when a claim says more work is due or the doorbell rings. No database transaction is open
while a handler runs: the claim commits before, and each outcome commits after.

`serve` is a worker's life: drain whenever the doorbell rings (doorbell.Listener) or work falls
due, ride out database outages. `manage.py run_worker` runs it on its main thread; each django-q2
worker process runs it on a thread of its own (`Service`), and a doorbell task waits for it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

from workers.actions.claims import (
    claim_due,
    complete_operation,
    fail_operation,
    record_lease_lost,
    supersede_running_operation,
)
from workers.actions.housekeeping import reconcile_expired_leases
from workers.crashpoints import crash_point
from workers.doorbell import Listener, claiming_next
from workers.errors import FailureKind, LeaseLost, OperationFailed, Superseded
from workers.prepared import execute_prepared
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
    # No connection health check per job: a connection the database dropped fails the thread's
    # next claim, which writes nothing, and the thread reconnects before it claims again.
    started = time.monotonic()
    try:
        return _attempt(claimed, started=started)
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, f"running {claimed.key}, left to its lease", extra=claimed.log_extra())
        return "database_unavailable"


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


SECONDS_UNTIL_DUE_SQL = """
SELECT extract(epoch FROM LEAST(
    (SELECT min(next_attempt_at) FROM workers_operation
     WHERE status IN ('pending', 'retry_wait') AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))),
    (SELECT min(lease_expires_at) FROM workers_operation
     WHERE status = 'running' AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[])))
) - statement_timestamp())
"""


def seconds_until_due(kinds: list[str] | None = None) -> float | None:
    """Seconds until the next waiting operation is due or the next lease expires (0 if one is due
    now, even if a prerequisite still holds it back), or None if nothing waits; database clock."""
    with execute_prepared(SECONDS_UNTIL_DUE_SQL, {"kinds": kinds}) as cursor:
        (seconds,) = cursor.fetchone()  # type: ignore[misc]
    return None if seconds is None else max(0.0, float(seconds))


class Wakeup:
    """Where a coordinator waits: rung by the doorbell's listener, nudged by its claiming threads."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._rung = False
        self._nudged = False

    def ring(self) -> None:
        with self._condition:
            self._rung = True
            self._condition.notify_all()

    def nudge(self) -> None:
        with self._condition:
            self._nudged = True
            self._condition.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for a ring or a nudge; returns whether the doorbell rang
        since the last call, and forgets both."""
        with self._condition:
            if not (self._rung or self._nudged):
                self._condition.wait(max(0.0, timeout))
            rung = self._rung
            self._rung = self._nudged = False
            return rung


class _Drain:
    """The claiming threads of one drain or service, and what they report to their coordinator."""

    def __init__(
        self,
        *,
        worker_id: str,
        kinds: list[str] | None,
        deadline: float,
        wakeup: Wakeup,
        stop: Callable[[], bool],
    ) -> None:
        self.worker_id = worker_id
        self.kinds = kinds
        self.deadline = deadline
        self.wakeup = wakeup
        self.stop = stop
        self.concurrency = settings.GALLEY_WORKER_CONCURRENCY
        self.pool = _get_pool()
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._running = 0  # claiming threads alive
        self._more = 0  # claims that found more work due, since the coordinator last looked
        self._claimed = 0
        # What stopped a claiming thread other than an outcome: a database outage while claiming, or
        # anything a handler's outcome could not catch (a simulated crash in tests); raised by run_pass.
        self._error: BaseException | None = None

    def open(self) -> bool:
        return self._error is None and not self.stop() and time.monotonic() < self.deadline

    def run_pass(self) -> int:
        """Claim and run until no thread finds work due; returns how many operations were claimed.

        Starts one claiming thread, and one more each time a claim finds more work due or the
        doorbell rings, up to the pool's size. If claiming met a database outage (or a thread met
        anything else it could not handle), raises it once every thread has stopped.
        """
        claimed_before = self._claimed
        self._start()
        # A ring while every thread is busy waits for a free one: the thread that made the last
        # claim before the ring's commit may be ending without another.
        ring_pending = False
        while True:
            ring_pending |= self.wakeup.wait(0.5)
            with self._lock:
                running, more, error = self._running, self._more, self._error
                self._more = 0
            if self.open():
                for _ in range(min(more + ring_pending, self.concurrency - running)):
                    self._start()
                    running += 1
                    ring_pending = False
            if running == 0:
                self._error = None
                if error is not None:
                    raise error
                return self._claimed - claimed_before

    def _start(self) -> None:
        with self._lock:
            self._running += 1
        self.pool.submit(self._claim_and_run)

    def _claim_and_run(self) -> None:
        """On a pool thread: claim one operation for this thread and run it, again and again, until
        none is due, the drain closes, or the database goes away."""
        try:
            while self.open():
                try:
                    claims = claim_due(worker_id=self.worker_id, limit=1, kinds=self.kinds)
                except DATABASE_UNAVAILABLE:
                    # Nothing was claimed. The connection may only have been dropped (a restart since
                    # this thread last worked): once more on a new one. If the database is still away
                    # this raises, and the coordinator's caller reports the outage and backs off.
                    connections.close_all()
                    try:
                        claims = claim_due(worker_id=self.worker_id, limit=1, kinds=self.kinds)
                    except DATABASE_UNAVAILABLE:
                        connections.close_all()
                        raise
                if not claims.operations:
                    return
                crash_point("after_claim")
                with self._lock:
                    self._claimed += 1
                    self._more += claims.more_due
                if claims.more_due:
                    self.wakeup.nudge()
                # A worker limited to some kinds may not be able to claim the continuation: it rings.
                with claiming_next() if self.kinds is None else contextlib.nullcontext():
                    outcome = run_operation(claims.operations[0])
                with self._lock:
                    self.outcomes[outcome] += 1
                if outcome == "database_unavailable":
                    return
        except BaseException as error:  # run_operation catches every outcome; this is the rest
            with self._lock:
                self._error = self._error or error
        finally:
            with self._lock:
                self._running -= 1
            self.wakeup.nudge()


def drain(
    *,
    worker_id: str | None = None,
    kinds: list[str] | None = None,
    time_budget: float | None = None,
    idle_wait: float | None = None,
) -> Counter[str]:
    """Claim and run due operations until none is due within `idle_wait` seconds or the budget ends.

    Safe to run twice, concurrently, or after a crash: claims are disjoint and every outcome
    is fenced. Returns a count of outcomes. Raises DATABASE_UNAVAILABLE if the database goes away.
    """
    budget = settings.GALLEY_DRAIN_SECONDS if time_budget is None else time_budget
    idle_wait = settings.GALLEY_DRAIN_IDLE_WAIT_SECONDS if idle_wait is None else idle_wait
    deadline = time.monotonic() + budget
    work = _Drain(
        worker_id=worker_id or default_worker_id(),
        kinds=kinds,
        deadline=deadline,
        wakeup=Wakeup(),
        stop=lambda: False,
    )
    idle_since: float | None = None
    while True:
        if work.run_pass():
            idle_since = None
        # Nothing claimable now. Wait a little for work due soon; operations that are due but
        # blocked by a prerequisite another worker holds count as idle time.
        now = time.monotonic()
        idle_since = idle_since or now
        due_in = seconds_until_due(kinds)
        if due_in is None or due_in > idle_wait or now - idle_since > idle_wait or now + due_in > deadline:
            return work.outcomes
        time.sleep(min(max(due_in, 0.2), 1.0))


def serve(
    *,
    worker_id: str,
    wakeup: Wakeup,
    stop: Callable[[], bool],
    poll: float,
    kinds: list[str] | None = None,
    until_idle: bool = False,
    reconcile_every: float | None = None,
    after_pass: Callable[[float, Counter[str]], bool] | None = None,
) -> None:
    """A worker's life: drain whenever the doorbell rings (`wakeup`) or work falls due, until `stop()`.

    Between drains it waits for a ring, at most until the next operation is due and at most `poll`
    seconds (a lost ring costs no more than that). With `until_idle` it returns once nothing is due
    or waiting. Every `reconcile_every` seconds it reconciles expired leases. A database outage is
    logged and ridden out with backoff, never raised. `after_pass(started, outcomes)` is told about
    each drain pass; it returns True to have another one at once.
    """
    work = _Drain(worker_id=worker_id, kinds=kinds, deadline=math.inf, wakeup=wakeup, stop=stop)
    outages = 0  # failed rounds in a row, for the backoff
    next_reconcile = 0.0
    wait_until = 0.0  # when to look for due work if no ring comes first
    while not stop():
        started = time.monotonic()
        try:
            if reconcile_every is not None and started >= next_reconcile:
                reconcile_expired_leases()
                next_reconcile = started + reconcile_every
            before = Counter(work.outcomes)
            claimed = work.run_pass()
            again = after_pass is not None and after_pass(started, work.outcomes - before)
            # A ring whose work another worker took tells nothing new about when work falls due next
            # (rings are for work due now), so the wait computed before goes on.
            if claimed or until_idle or time.monotonic() >= wait_until:
                due_in = seconds_until_due(kinds)
                if until_idle and due_in is None:
                    return
                # Due now yet nothing claimable: blocked behind a prerequisite held elsewhere, whose end rings.
                wait_until = time.monotonic() + (poll if not due_in else min(poll, due_in))
        except DATABASE_UNAVAILABLE as problem:
            # A restart or failover loses nothing: every write after a claim is fenced, and an attempt
            # the outage cut short stays running until its lease expires and it is taken over.
            outages += 1
            delay = reconnect_delay(outages)
            drop_broken_connections(problem, f"draining; trying again in {delay:.1f} s")
            _pause(delay, stop)
            continue
        outages = 0
        if again:
            continue
        while not stop() and (remaining := wait_until - time.monotonic()) > 0:
            # In slices, so that a stop request (a flag a signal handler may set) is seen soon.
            if wakeup.wait(min(remaining, 0.5)):
                break


def _pause(seconds: float, stop: Callable[[], bool]) -> None:
    until = time.monotonic() + seconds
    while not stop() and (remaining := until - time.monotonic()) > 0:
        time.sleep(min(remaining, 0.5))


class Service:
    """`serve` on a thread of its own, with its doorbell listener: how a django-q2 worker process
    drains. `poke_and_wait` is what a doorbell task does with it."""

    def __init__(self, *, worker_id: str, poll: float) -> None:
        self.worker_id = worker_id
        self.poll = poll
        self.wakeup = Wakeup()
        self._stopping = threading.Event()
        self._condition = threading.Condition()
        self._poked_at = 0.0
        self._last_pass_started = 0.0
        self._outcomes: Counter[str] = Counter()
        self.listener = Listener(self.wakeup.ring, reconnect_delay=reconnect_delay)
        self._thread = threading.Thread(target=self._run, name="galley-service", daemon=True)

    def start(self) -> None:
        self.listener.start()
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, *, timeout: float | None = None) -> None:
        """Stop claiming, let the attempts in flight end (at most `timeout` seconds), stop listening."""
        self._stopping.set()
        self.wakeup.ring()
        self.listener.stop()
        self._thread.join(timeout)
        self.listener.join(timeout)

    def poke_and_wait(self, timeout: float) -> Counter[str]:
        """Ring, and wait until a drain pass that started after the ring has ended (every operation
        due at the ring has been run), at most `timeout` seconds; returns the outcomes of the passes
        that ended meanwhile."""
        with self._condition:
            poked_at = self._poked_at = time.monotonic()
            counted = Counter(self._outcomes)
        self.wakeup.ring()
        with self._condition:
            self._condition.wait_for(lambda: self._last_pass_started > poked_at, timeout)
            return self._outcomes - counted

    def _after_pass(self, started: float, outcomes: Counter[str]) -> bool:
        with self._condition:
            self._last_pass_started = started
            self._outcomes.update(outcomes)
            self._condition.notify_all()
            return self._poked_at > started

    def _run(self) -> None:
        run_startup_checks_once()
        while not self._stopping.is_set():
            try:
                serve(
                    worker_id=self.worker_id,
                    wakeup=self.wakeup,
                    stop=self._stopping.is_set,
                    poll=self.poll,
                    after_pass=self._after_pass,
                )
            except Exception:  # a bug must not leave the process without its drain
                logger.exception("the drain service failed; starting it again")
                self._stopping.wait(RECONNECT_MAX_SECONDS)
        connections.close_all()
