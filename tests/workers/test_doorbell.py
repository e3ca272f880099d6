"""The doorbell (PostgreSQL LISTEN/NOTIFY) and the cheap publication path on real PostgreSQL: a ring
is sent at commit and never for a rolled-back intent, costs no queue row and no round trip of its
own; a claim is one statement; a success is one statement after the domain's finalize."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from tests.workers.test_operations import claim, enqueue, expire_leases
from workers import registry, tasks
from workers.actions.claims import claim_due, complete_operation
from workers.actions.enqueue import enqueue_operation
from workers.doorbell import Listener, claiming_next, ring_doorbell
from workers.drain import Wakeup
from workers.models import Attempt, Dependency, Operation
from workers.registry import Success
from workers.service import Service
from workers.sql import CHANNEL

pytestmark = pytest.mark.django_db(transaction=True)


class Rings:
    """A LISTEN on the doorbell's channel, on a connection of the test's own."""

    def __init__(self) -> None:
        self.conn = psycopg.connect(**connections["default"].get_connection_params(), autocommit=True)
        self.conn.execute(f"LISTEN {CHANNEL}")

    def count(self, *, wait: float = 0.3) -> int:
        """Rings delivered so far (and not counted before), waiting up to `wait` seconds for the first."""
        return sum(1 for _ in self.conn.notifies(timeout=wait))

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def handlers(monkeypatch):
    """Register test handlers for this test only."""

    def register(kind: str, handler: Any) -> None:
        monkeypatch.setitem(registry._handlers, kind, handler)

    return register


@pytest.fixture
def rings() -> Iterator[Rings]:
    listening = Rings()
    yield listening
    listening.close()


def statements(queries: CaptureQueriesContext) -> list[str]:
    """The first word of each captured statement (transaction control included)."""
    return [query["sql"].split()[0] for query in queries.captured_queries]


# --- the ring: at commit, only for committed work, no queue row ------------------------------------------


def test_doorbell__enqueue_rings_at_commit__never_before_and_never_for_a_rollback(rings):
    with transaction.atomic():
        enqueue_operation(key="k1", kind="test.echo", payload_hash="a" * 64, subject_type="test", subject_id="k1")
        assert rings.count() == 0  # the intent is not visible yet, nor is the ring
    assert rings.count() == 1

    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_operation(key="k2", kind="test.echo", payload_hash="a" * 64, subject_type="test", subject_id="k2")
        raise RuntimeError("the approval failed after its intent was written")
    assert rings.count() == 0
    assert not Operation.objects.filter(key="k2").exists()
    assert not OrmQ.objects.exists()  # a ring is no django-q2 task


def test_doorbell__the_ring_costs_no_round_trip_of_its_own__once_per_transaction(rings):
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        enqueue_operation(key="k1", kind="test.echo", payload_hash="a" * 64, subject_type="test", subject_id="k1")
        enqueue_operation(key="k2", kind="test.echo", payload_hash="a" * 64, subject_type="test", subject_id="k2")
        ring_doorbell()  # already rung in this transaction: nothing more is sent
    # One transaction, one statement per intent: the row, its prerequisites and the ring.
    assert statements(queries) == ["BEGIN", "WITH", "WITH", "COMMIT"]
    assert rings.count() == 1  # PostgreSQL folds identical notifications of one transaction


def test_doorbell__a_finished_operation_rings_only_for_its_dependents(rings):
    enqueue("alone")
    first = enqueue("first").operation
    with transaction.atomic():
        enqueue_operation(
            key="second",
            kind="test.other",  # not claimed below
            payload_hash="a" * 64,
            subject_type="test",
            subject_id="second",
            after=[(first, Dependency.Requires.SUCCESS)],
        )
    rings.count()
    (alone,) = claim_due(worker_id="w", limit=1, kinds=["test.echo"]).operations
    assert alone.key == "alone"
    complete_operation(alone, Success(), started=time.monotonic())
    assert rings.count() == 0  # nothing waits for it: nobody is woken
    (first_claim,) = claim("w")
    complete_operation(first_claim, Success(), started=time.monotonic())
    assert rings.count() == 1  # "second" may be claimed now


def test_doorbell__a_thread_that_claims_next_does_not_ring_for_its_own_continuation(rings):
    with claiming_next(), transaction.atomic():
        enqueue_operation(key="k1", kind="test.echo", payload_hash="a" * 64, subject_type="test", subject_id="k1")
        ring_doorbell()
    assert rings.count() == 0
    assert Operation.objects.filter(key="k1", status="pending").exists()


# --- one statement per claim and per success ---------------------------------------------------------


def test_atomic_claim__one_statement_takes_the_lease_and_opens_the_attempt():
    enqueue("k1")
    enqueue("k2")
    with CaptureQueriesContext(connection) as queries:
        claims = claim_due(worker_id="w1", limit=1, kinds=["test.echo"])
    assert statements(queries) == ["WITH"]  # in autocommit: no BEGIN, no COMMIT
    (job,) = claims.operations
    assert claims.more_due  # k2 is due too: the worker lets one more thread claim
    assert (job.key, job.fencing_token, job.attempt_number, job.ambiguous) == ("k1", 1, 1, False)
    attempt = Attempt.objects.get()
    assert (str(attempt.id), attempt.worker_id, attempt.number, attempt.fencing_token) == (job.attempt_id, "w1", 1, 1)
    assert attempt.finished_at is None
    assert not claim_due(worker_id="w1", limit=1, kinds=["test.echo"]).more_due  # k2 was the last


def test_atomic_claim__taking_over_an_expired_lease_closes_the_dead_attempt_and_opens_an_ambiguous_one():
    enqueue("k1")
    (dead,) = claim("w1")
    expire_leases()
    (taken_over,) = claim("w2")
    assert (taken_over.fencing_token, taken_over.attempt_number, taken_over.ambiguous) == (2, 2, True)
    attempts = list(Attempt.objects.order_by("number").values_list("worker_id", "error_kind", "finished_at"))
    assert [(worker, kind) for worker, kind, _at in attempts] == [("w1", "lease_expired"), ("w2", "")]
    assert attempts[0][2] is not None and attempts[1][2] is None
    assert str(Attempt.objects.get(number=1).id) == dead.attempt_id


def test_fencing__a_success_is_one_statement_after_the_fence_read():
    enqueue("k1")
    (job,) = claim("w1")
    with CaptureQueriesContext(connection) as queries:
        complete_operation(job, Success(result={"done": True}, usage={"tokens": 3}), started=time.monotonic())
    # The fenced record of the result, committed on its own (a lost lease runs no finalize; a finalize
    # that waits for a lock leaves the effect on record), then one transaction: the fenced success.
    assert statements(queries) == ["UPDATE", "BEGIN", "WITH", "COMMIT"]
    operation = Operation.objects.get()
    assert (operation.status, operation.lease_owner, operation.result) == ("succeeded", "", {"done": True})
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.usage, attempt.finished_at is not None) == ("succeeded", {"tokens": 3}, True)


def test_claim_order__a_continuation_keeps_its_job_s_place_ahead_of_newer_first_steps():
    enqueue("job-1/step-1")
    for index in range(2, 5):
        enqueue(f"job-{index}/step-1")
    (first,) = claim("w", limit=1)
    assert first.key == "job-1/step-1"

    def next_step() -> None:
        enqueue_operation(
            key="job-1/step-2",
            kind="test.echo",
            payload_hash="a" * 64,
            subject_type="test",
            subject_id="job-1",
            after=[(Operation.objects.get(id=first.operation_id), Dependency.Requires.SUCCESS)],
        )

    complete_operation(first, Success(finalize=next_step), started=time.monotonic())
    order = [job.key for job in claim("w", limit=10)]
    assert order == ["job-1/step-2", "job-2/step-1", "job-3/step-1", "job-4/step-1"]


# --- the listener and the service ----------------------------------------------------------------------


def wait_for(condition: Any, *, timeout: float = 10, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.01)


def test_doorbell__listener_wakes_on_a_ring_and_again_after_the_database_ended_its_session():
    woken = threading.Semaphore(0)
    listener = Listener(woken.release, reconnect_delay=lambda failures: 0.05, check_seconds=0.1)
    listener.start()
    try:
        assert listener.listening.wait(10)
        assert woken.acquire(timeout=5)  # once listening: rings sent before may have been missed
        ring_doorbell()
        assert woken.acquire(timeout=5)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query = %s AND pid <> pg_backend_pid()",
                [f"LISTEN {CHANNEL}"],
            )
            assert cursor.fetchall() == [(True,)]
        assert woken.acquire(timeout=10)  # listening again, and woken in case a ring was lost meanwhile
        ring_doorbell()
        assert woken.acquire(timeout=5)
    finally:
        listener.stop()
        listener.join(10)
    assert not listener.is_alive()


def test_doorbell__listener_heard_only_after_its_probe_and_not_while_disconnected__waits_are_short_polls_meanwhile(
    settings,
):
    settings.GALLEY_WAKEUP_POLL_SECONDS = 0.5
    wakeup = Wakeup()
    assert wakeup.longest_wait(60) == 0.5  # nothing heard yet: poll
    listener = Listener(wakeup.ring, heard=wakeup.hear, reconnect_delay=lambda failures: 0.2, check_seconds=0.1)
    listener.start()
    try:
        wait_for(lambda: wakeup.longest_wait(60) == 60, what="the probe ring heard")
        assert listener.heard_once.is_set() and not listener.deaf.is_set()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query = %s AND pid <> pg_backend_pid()",
                [f"LISTEN {CHANNEL}"],
            )
        wait_for(lambda: wakeup.longest_wait(60) == 0.5, what="the lost listener heard no more")
        wait_for(lambda: wakeup.longest_wait(60) == 60, what="heard again after reconnecting")
    finally:
        listener.stop()
        listener.join(10)
    assert not listener.is_alive()


def test_service__the_doorbell_wakes_it_long_before_its_poll__a_drain_task_waits_for_its_drain(handlers, monkeypatch):
    handled: list[str] = []
    handlers("test.echo", lambda job: handled.append(job.key) or Success())
    service = Service(worker_id="svc", poll=60)
    monkeypatch.setattr(tasks, "_service", service)
    service.start()
    try:
        assert service.listener.listening.wait(10)
        started = time.monotonic()
        enqueue("k1")
        wait_for(lambda: handled == ["k1"], what="the ring's drain")
        assert time.monotonic() - started < 10  # not the 60 s poll
        # A django-q2 doorbell task rings the service and returns once a drain after its ring ended.
        with transaction.atomic():
            enqueue("k2")
            enqueue("k3")
        outcomes = tasks.drain_operations()
        assert set(handled) == {"k1", "k2", "k3"}
        assert Operation.objects.filter(status="succeeded").count() == 3
        assert set(outcomes) <= {"succeeded"}  # what ended while the task waited, the ring's drain included
    finally:
        service.stop(timeout=10)
    assert not service.is_alive()
    assert not service.listener.is_alive()
