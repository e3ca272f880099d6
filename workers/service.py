"""A worker's life: drain whenever the doorbell rings (doorbell.Listener) or work falls due, ride
out database outages (`serve`). `manage.py run_worker` runs it on its main thread; each django-q2
worker process runs it on a thread of its own (`Service`), and a doorbell task waits for it. The
registered startup checks run once per process before its first drain.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

from django.conf import settings
from django.db import connections

from workers.actions.housekeeping import reconcile_expired_leases
from workers.crashpoints import crash_point
from workers.doorbell import Listener
from workers.drain import Drain, Wakeup, seconds_until_due
from workers.outages import DATABASE_UNAVAILABLE, RECONNECT_MAX_SECONDS, drop_broken_connections, reconnect_delay
from workers.registry import startup_checks

logger = logging.getLogger(__name__)

_checked = threading.Event()


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

    Between drains it waits for a ring, at most until the next operation is due and at most as long
    as `wakeup.longest_wait(poll)` says: `poll` seconds while the doorbell is heard (a lost ring costs
    no more than that), a short poll while it is not. With `until_idle` it returns once nothing is due
    or waiting. Every `reconcile_every` seconds it reconciles expired leases. A database outage is
    logged and ridden out with backoff, never raised. `after_pass(started, outcomes)` is told about
    each drain pass; it returns True to have another one at once.
    """
    work = Drain(worker_id=worker_id, kinds=kinds, deadline=math.inf, wakeup=wakeup, stop=stop)
    outages = 0  # failed rounds in a row, for the backoff
    next_reconcile = 0.0
    wait_until = 0.0  # when to look for due work if no ring comes first
    due_at = math.inf  # when the next waiting operation falls due, as last computed
    while not stop():
        started = time.monotonic()
        if started >= due_at:
            # Work fell due (a schedule's T, say) and this pass is about to claim it: a test's crash point.
            crash_point("due_before_claim")
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
                due_at = math.inf if not due_in else time.monotonic() + due_in
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
        # No longer than the wait rule allows now: a doorbell that is not heard leaves only polling.
        until = min(wait_until, time.monotonic() + wakeup.longest_wait(poll))
        while not stop() and (remaining := until - time.monotonic()) > 0:
            # In slices, so that a stop request (a flag a signal handler may set) is seen soon.
            if wakeup.wait(min(remaining, 0.5)):
                break


def _pause(seconds: float, stop: Callable[[], bool]) -> None:
    until = time.monotonic() + seconds
    while not stop() and (remaining := until - time.monotonic()) > 0:
        time.sleep(min(remaining, 0.5))


def start_doorbell(wakeup: Wakeup) -> Listener | None:
    """How this worker process learns that work fell due (GALLEY_WAKEUP): with `notify`, a started
    doorbell listener ringing `wakeup`, which checks it is heard and says so once if it is not; with
    `poll`, none, said once here. `wakeup` polls until rings are heard."""
    if settings.GALLEY_WAKEUP == "poll":
        logger.info(
            "no doorbell (GALLEY_WAKEUP=poll): looking for due work every %s s",
            f"{settings.GALLEY_WAKEUP_POLL_SECONDS:g}",
        )
        return None
    listener = Listener(wakeup.ring, heard=wakeup.hear, reconnect_delay=reconnect_delay)
    listener.start()
    return listener


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
        self.listener: Listener | None = None
        self._thread = threading.Thread(target=self._run, name="galley-service", daemon=True)

    def start(self) -> None:
        self.listener = start_doorbell(self.wakeup)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, *, timeout: float | None = None) -> None:
        """Stop claiming, let the attempts in flight end (at most `timeout` seconds), stop listening."""
        self._stopping.set()
        self.wakeup.ring()
        if self.listener is not None:
            self.listener.stop()
        self._thread.join(timeout)
        if self.listener is not None:
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
