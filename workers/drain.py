"""Drain due operations: every free thread claims for itself, runs what it claimed, finishes fenced.

A worker process keeps a pool of handler threads, each with its own database connection, so it is
never limited to one network call at a time. Each thread claims one operation per statement and,
when it has run it, claims the next one itself while work is due: no thread idles behind a serial
claimer. The coordinator (the thread that called `drain` or `workers.service.serve`) only starts
more claiming threads, when a claim says more work is due or the doorbell rings. No database
transaction is open while a handler runs: the claim commits before, and each outcome commits after
(workers.attempts).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connections
from psycopg.rows import dict_row

from workers.actions.claims import Claims, claim_due
from workers.attempts import run_operation
from workers.crashpoints import crash_point
from workers.doorbell import claiming_next
from workers.outages import DATABASE_UNAVAILABLE
from workers.prepared import execute_prepared
from workers.sql import SECONDS_UNTIL_DUE_SQL

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


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


def seconds_until_due(kinds: list[str] | None = None) -> float | None:
    """Seconds until the next waiting operation is due or the next lease expires (0 if one is due
    now, even if a prerequisite still holds it back), or None if nothing waits; database clock."""
    with execute_prepared(SECONDS_UNTIL_DUE_SQL, {"kinds": kinds}, row_factory=dict_row) as cursor:
        seconds = cursor.fetchone()["seconds"]  # type: ignore[index]
    return None if seconds is None else max(0.0, float(seconds))


class Wakeup:
    """Where a coordinator waits: rung by the doorbell's listener, nudged by its claiming threads; and
    how long it may wait without a ring (`longest_wait`), which depends on whether rings reach it."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._rung = False
        self._nudged = False
        self._heard = False

    def hear(self, heard: bool) -> None:
        """The doorbell's listener says whether rings reach this process (workers.doorbell.Listener):
        they do once its probe arrived, and not while it is disconnected. Without a listener
        (GALLEY_WAKEUP=poll) nobody says so, and the waits stay short polls."""
        with self._condition:
            changed, self._heard = self._heard != heard, heard
        if changed and not heard:
            self.ring()  # a wait begun while rings came ends now, and the next is a short poll

    def longest_wait(self, poll: float) -> float:
        """The wait rule: between looks for due work a worker waits at most `poll` seconds while the
        doorbell is heard, and at most GALLEY_WAKEUP_POLL_SECONDS while it is not."""
        return poll if self._heard else min(poll, settings.GALLEY_WAKEUP_POLL_SECONDS)

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


class Drain:
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
        # Handler threads per channel, running or claiming (docs/invariants.md#i14): a channel holds at
        # most GALLEY_WORKER_CHANNEL_THREADS of them, so one that hangs never takes every thread. A
        # thread about to claim may claim for any channel, so it counts against every channel until it
        # knows; and no more threads claim at once than the bound, so that even a channel no thread has
        # held yet gets at most its share.
        self.channel_threads = settings.GALLEY_WORKER_CHANNEL_THREADS
        self._on_channel: Counter[str] = Counter()
        self._claiming = 0
        self._claim_slots = threading.BoundedSemaphore(self.channel_threads)
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

    def _busy_channels(self) -> list[str]:
        """The channels this thread may not claim for: those whose threads, with every other thread
        claiming now, could reach the bound. Takes this thread's claim slot; _claimed_for gives it back."""
        with self._lock:
            others = self._claiming
            self._claiming += 1
            return [channel for channel, held in self._on_channel.items() if held + others >= self.channel_threads]

    def _claimed_for(self, channel: str | None) -> None:
        with self._lock:
            self._claiming -= 1
            if channel:
                self._on_channel[channel] += 1

    def _ran_on(self, channel: str) -> None:
        if channel:
            with self._lock:
                self._on_channel[channel] -= 1

    def _claim(self) -> Claims:
        with self._claim_slots:
            return self._claim_in_slot()

    def _claim_in_slot(self) -> Claims:
        busy = self._busy_channels()
        claims: Claims | None = None
        try:
            try:
                claims = claim_due(worker_id=self.worker_id, limit=1, kinds=self.kinds, busy_channels=busy)
            except DATABASE_UNAVAILABLE:
                # Nothing was claimed. The connection may only have been dropped (a restart since
                # this thread last worked): once more on a new one. If the database is still away
                # this raises, and the coordinator's caller reports the outage and backs off.
                connections.close_all()
                try:
                    claims = claim_due(worker_id=self.worker_id, limit=1, kinds=self.kinds, busy_channels=busy)
                except DATABASE_UNAVAILABLE:
                    connections.close_all()
                    raise
        finally:
            self._claimed_for(claims.operations[0].channel if claims is not None and claims.operations else None)
        return claims

    def _claim_and_run(self) -> None:
        """On a pool thread: claim one operation for this thread and run it, again and again, until
        none is due, the drain closes, or the database goes away."""
        try:
            while self.open():
                claims = self._claim()
                if not claims.operations:
                    return
                claimed = claims.operations[0]
                try:
                    crash_point("after_claim")
                    with self._lock:
                        self._claimed += 1
                        self._more += claims.more_due
                    if claims.more_due:
                        self.wakeup.nudge()
                    # A worker limited to some kinds may not be able to claim the continuation: it rings.
                    with claiming_next() if self.kinds is None else contextlib.nullcontext():
                        outcome = run_operation(claimed)
                finally:
                    self._ran_on(claimed.channel)
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
    work = Drain(
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
