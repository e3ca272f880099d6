"""Nothing lost (docs/invariants.md#i12) when PostgreSQL restarts under the workers.

A worker rides out a restart or failover of the database: it reconnects with backoff and never
exits. An attempt the outage cut short writes nothing more (what it was writing rolled back with
the lost session) and stays running under its lease, which expires and is taken over like a dead
worker's, so its intent is neither lost nor recorded with a false outcome. The django-q2 doorbell
tasks return instead of raising: the next doorbell or sweep carries on.

The acceptance test restarts a PostgreSQL server of its own (not the session's), with `pg_ctl`
on the same data folder and socket, while a real `run_worker` has publications in flight.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from django.db import connection

from publishing.identities import PUBLISH, VERIFY
from tests import postgres
from tests.acceptance import conftest as acceptance
from tests.acceptance import test_crash_points as recovery
from tests.acceptance.test_crash_points import worker_env
from tests.postgres import SETUP_TIMEOUT, run_to_end, unfinished
from tests.processes import manage, wait_until
from tests.workers.test_operations import enqueue, expire_leases
from workers import registry, tasks
from workers.actions.housekeeping import reconcile_expired_leases
from workers.drain import drain
from workers.errors import FailureKind, OperationFailed
from workers.models import Attempt, Operation
from workers.registry import ClaimedOperation, Success

# Real processes and the reference target, as in the acceptance tests.
spawn = acceptance.spawn
own_database = postgres.own_database
start_target = recovery.start_target

BRIEFS = 12
# Each publish is held at the target this long, so that publications are in flight when the database
# stops; the client's timeout and the lease leave room for a loaded CPU (lease > 2.5 x timeout).
LATENCY_MS = 1000
TIMEOUT_SECONDS = 4
# An attempt the outage cut short is taken over once its lease expires: short, so the test ends soon.
LEASE_SECONDS = 12
# How long the database stays down after the worker first noticed, for several reconnection tries.
DOWN_SECONDS = 4
FINISH_TIMEOUT = 300


@pytest.mark.acceptance
def test_nothing_lost__worker_rides_out_a_database_restart(own_database, start_target, spawn, tmp_path):
    target = start_target("--latency-ms", str(LATENCY_MS))
    env = worker_env(target, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS) | {
        "DATABASE_URL": own_database.url,
        "GALLEY_WORKER_CONCURRENCY": "4",
        "GALLEY_MAX_ATTEMPTS": "20",  # interruptions on a loaded machine must never make a dead letter
    }
    for name, args in [
        ("migrate", ["migrate", "--no-input"]),
        ("simulate", ["simulate", "--briefs", str(BRIEFS), "--revisions", "1"]),
    ]:
        log = tmp_path / f"{name}.log"
        run_to_end(manage(*args, env=env, log=log), what=name, log=log)
    publish_keys = sorted(
        key for (key,) in own_database.rows("SELECT key FROM workers_operation WHERE kind = %s", (PUBLISH,))
    )
    assert len(publish_keys) == BRIEFS  # one approved revision per brief, each with its publish intent

    worker = spawn("worker", "run_worker", "--worker-id", "rider", "--poll", "0.2", env=env)
    wait_until(
        lambda: target.applications() and own_database.rows("SELECT 1 FROM workers_operation WHERE status = 'running'"),
        timeout=SETUP_TIMEOUT,
        what="publications in flight after the first one",
    )
    own_database.stop()
    # The worker meets the outage, and must still be running while the database is down.
    worker.wait_for_output("database unavailable", timeout=SETUP_TIMEOUT)
    time.sleep(DOWN_SECONDS)
    assert worker.process.poll() is None, worker.output()
    own_database.start()

    deadline = time.monotonic() + FINISH_TIMEOUT
    while unfinished(own_database.rows):
        assert worker.process.poll() is None, f"the worker exited ({worker.process.returncode})\n{worker.output()}"
        assert time.monotonic() < deadline, f"operations unfinished after {FINISH_TIMEOUT} s\n{worker.output()}"
        time.sleep(0.5)
    assert worker.process.poll() is None, worker.output()  # it never exited on its own
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=120) == 0, worker.output()

    # Every intent completed: each publish succeeded with its verification (in its attempt, or by a verify
    # operation that succeeded too), each brief is published.
    statuses = own_database.rows("SELECT kind, status, count(*) FROM workers_operation GROUP BY kind, status")
    assert (PUBLISH, "succeeded", BRIEFS) in statuses
    assert {(kind, status) for kind, status, _count in statuses} <= {(PUBLISH, "succeeded"), (VERIFY, "succeeded")}
    assert own_database.rows(
        "SELECT status, published_revision_number, count(*) FROM publishing_brief GROUP BY 1, 2"
    ) == [("published", 1, BRIEFS)]
    # Exactly one application per key at the target, each recorded once in Galley and verified.
    ledger = {row["operation_key"]: row["payload_hash"] for row in target.applications()}
    assert len(target.applications()) == len(ledger), "a key was applied twice"
    assert sorted(ledger) == publish_keys
    publications = own_database.rows(
        "SELECT operation_key, payload_hash, verified_at IS NOT NULL FROM publishing_publication"
    )
    assert sorted(publications) == [(key, ledger[key], True) for key in publish_keys]
    # No attempt left open, and none recorded a failure the outage did not prove (the old finalize did).
    assert own_database.rows("SELECT count(*) FROM workers_attempt WHERE finished_at IS NULL") == [(0,)]
    assert own_database.rows("SELECT count(*) FROM workers_attempt WHERE error_kind = 'unexpected'") == [(0,)]


# --- in process, on the session's database: the server ends the session as a restart does ---------


def lose_the_connection() -> None:
    """The server ends this thread's database session (pg_terminate_backend, as a fast shutdown does)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [pid] = cursor.fetchone()
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

            def gone() -> bool:
                cursor.execute("SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)", [pid])
                return cursor.fetchone()[0]

            wait_until(gone, timeout=30, what="the end of the session")  # termination is only a signal
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_nothing_lost__finalize_cut_off_by_the_database__left_to_its_lease__no_false_outcome(monkeypatch):
    def finalize_as_the_database_goes() -> None:
        with connection.cursor() as cursor:  # the server ends the session inside the finalize transaction
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    def succeed_as_the_database_goes(job: ClaimedOperation) -> Success:
        return Success(result={"done": job.key}, finalize=finalize_as_the_database_goes)

    def succeed(job: ClaimedOperation) -> Success:
        return Success(result={"done": job.key})

    monkeypatch.setitem(registry._handlers, "test.echo", succeed_as_the_database_goes)
    enqueue("k1")

    outcomes = drain(worker_id="w1", kinds=["test.echo"], time_budget=30, idle_wait=0.2)

    assert outcomes == {"database_unavailable": 1}
    # Nothing of the success committed, and nothing else was written but the handler's result, recorded
    # before the finalize (so that the lost lease does not count as a failed attempt): still running
    # under w1's lease.
    operation = Operation.objects.get()
    assert (operation.status, operation.lease_owner, operation.fencing_token) == ("running", "w1", 1)
    assert (operation.last_error_kind, operation.result) == ("", {"done": "k1"})
    attempt = Attempt.objects.get()
    assert (attempt.finished_at, attempt.outcome, attempt.error_kind) == (None, "", "")

    # Once the lease has expired the reconciler hands it on, and the next attempt succeeds.
    expire_leases()
    assert reconcile_expired_leases()["expired_leases"] == 1
    monkeypatch.setitem(registry._handlers, "test.echo", succeed)
    assert drain(worker_id="w2", kinds=["test.echo"], time_budget=30, idle_wait=0.2) == {"succeeded": 1}
    operation.refresh_from_db()
    assert (operation.status, operation.result) == ("succeeded", {"done": "k1"})
    attempts = Attempt.objects.order_by("number").values_list("worker_id", "outcome", "error_kind")
    assert list(attempts) == [("w1", "", "lease_expired"), ("w2", "succeeded", "")]


@pytest.mark.django_db(transaction=True)
def test_nothing_lost__failure_record_stalls_past_the_idle_bound__worker_lives_left_to_its_lease(monkeypatch):
    # A worker starved of CPU while it records a failed attempt: PostgreSQL ends its session for idling
    # in the transaction (as GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS bounds it) and Django raises an
    # InternalError at the next query. The worker must ride it out as an outage, not exit.
    from workers.actions import claims

    def time_out(job: ClaimedOperation) -> Success:
        raise OperationFailed(FailureKind.TIMEOUT, "no answer within 1 s; the request may have been applied")

    end_attempt = claims._end_attempt

    def stall_then_end_attempt(*args: Any, **kwargs: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL idle_in_transaction_session_timeout = '100ms'")
        time.sleep(1.0)
        end_attempt(*args, **kwargs)

    monkeypatch.setitem(registry._handlers, "test.echo", time_out)
    monkeypatch.setattr(claims, "_end_attempt", stall_then_end_attempt)
    enqueue("k1")

    outcomes = drain(worker_id="w1", kinds=["test.echo"], time_budget=30, idle_wait=0.2)

    assert outcomes == {"database_unavailable": 1}
    # Nothing of the failure committed: still running under w1's lease, for its expiry to hand on.
    operation = Operation.objects.get()
    assert (operation.status, operation.lease_owner, operation.last_error_kind) == ("running", "w1", "")
    assert Attempt.objects.get().finished_at is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("task", "returned"),
    [
        (tasks.drain_operations, {}),
        (tasks.sweep, {"rounds": 0, "expired_leases": 0, "dead": 0}),
        (tasks.purge, 0),
    ],
)
def test_nothing_lost__doorbell_task_meets_a_lost_connection__returns_and_the_next_query_reconnects(
    task, returned, caplog
):
    lose_the_connection()
    assert task() == returned
    assert [record.levelname for record in caplog.records if "database unavailable" in record.getMessage()] == [
        "WARNING"
    ]
    assert not Operation.objects.exists()  # a new session: the worker goes on
