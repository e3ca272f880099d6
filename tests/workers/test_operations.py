"""The durable machinery on real PostgreSQL: enqueue, claim, leases, fencing, dependencies, retry
policy, reconciler, retention, operator actions. Test names say which invariant they guard."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.test.utils import override_settings
from django.utils import timezone

from tests.benchmarks.bulk import insert_finished_operations
from workers import registry
from workers.actions.claims import claim_operations, complete_operation, fail_operation, renew_lease
from workers.actions.enqueue import enqueue_operation
from workers.actions.housekeeping import purge_finished_operations, reconcile_expired_leases
from workers.actions.operator import do_cancel_operation, do_resolve_conflict, do_retry_operation_now
from workers.drain import drain
from workers.errors import FailureKind, LeaseLost, OperationFailed
from workers.models import (
    NEEDS_OPERATOR,
    OPERATION_TRANSITIONS,
    Attempt,
    AuditEvent,
    Conflict,
    Dependency,
    Operation,
    OperationStatus,
)
from workers.policy import backoff_seconds
from workers.registry import Success

HASH_A = "a" * 64
HASH_B = "b" * 64


def enqueue(key: str, *, payload_hash: str = HASH_A, kind: str = "test.echo", **kwargs):
    with transaction.atomic():
        return enqueue_operation(
            key=key, kind=kind, payload_hash=payload_hash, subject_type="test", subject_id=key, **kwargs
        )


def claim(worker: str = "w1", *, limit: int = 10, kinds=("test.echo",)):
    return claim_operations(worker_id=worker, limit=limit, kinds=list(kinds))


# Inside a test's transaction the database clock (now()) stands still at the test's start, so
# "due" and "expired" are set an hour in the past rather than at the Python clock's now.
def expire_leases() -> None:
    Operation.objects.filter(status="running").update(lease_expires_at=timezone.now() - datetime.timedelta(hours=1))


def make_due(**filters) -> None:
    Operation.objects.filter(**filters).update(next_attempt_at=timezone.now() - datetime.timedelta(hours=1))


@pytest.fixture
def handlers(monkeypatch):
    """Register test handlers for this test only."""

    def register(kind: str, handler) -> None:
        monkeypatch.setitem(registry._handlers, kind, handler)

    return register


# --- docs/invariants.md#i1 and #i2: operation identity, loud key conflicts ---------------------


@pytest.mark.django_db
def test_operation_identity__same_key_same_hash__one_operation():
    first = enqueue("publish:brief-001:revision-1")
    second = enqueue("publish:brief-001:revision-1")
    assert first.created and not second.created
    assert second.operation.id == first.operation.id
    assert Operation.objects.count() == 1


@pytest.mark.django_db
def test_key_conflict_is_loud__same_key_other_hash__recorded_never_success():
    enqueue("publish:brief-001:revision-1", payload_hash=HASH_A)
    result = enqueue("publish:brief-001:revision-1", payload_hash=HASH_B)
    assert not result.created
    assert result.conflict is not None
    assert result.operation.payload_hash == HASH_A  # the intent was not replaced
    conflict = Conflict.objects.get()
    assert (conflict.existing_payload_hash, conflict.conflicting_payload_hash) == (HASH_A, HASH_B)
    assert AuditEvent.objects.filter(event_type="operation.key_conflict").count() == 1
    assert Operation.objects.count() == 1


@pytest.mark.django_db
def test_operation_identity__every_attempt_has_its_own_id():
    enqueue("k1")
    (job,) = claim()
    fail_operation(job, OperationFailed(FailureKind.SERVER_ERROR, "boom"), started=time.monotonic())
    make_due()
    (job2,) = claim()
    assert job.attempt_id != job2.attempt_id
    assert set(Attempt.objects.values_list("number", flat=True)) == {1, 2}


@pytest.mark.django_db
def test_subject_version__enqueued_stored_and_claimed_with_the_operation():
    enqueued = enqueue("publish:brief-001:revision-3", subject_version=3, arguments={"revision": 3})
    unversioned = enqueue("k-without-version")
    assert enqueued.operation.subject_version == 3
    assert dict(Operation.objects.values_list("key", "subject_version")) == {
        "publish:brief-001:revision-3": 3,
        "k-without-version": None,
    }
    claimed = {job.key: job for job in claim()}
    assert claimed["publish:brief-001:revision-3"].subject_version == 3
    assert claimed[unversioned.operation.key].subject_version is None
    assert claimed["publish:brief-001:revision-3"].arguments == {"revision": 3}


# --- docs/invariants.md#i8: atomic claim, lease, fencing --------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_atomic_claim__concurrent_workers_claim_disjoint_operations():
    for index in range(40):
        enqueue(f"k{index}")
    barrier = threading.Barrier(4)
    claimed: dict[str, list[int]] = {}

    def worker(name: str) -> None:
        barrier.wait()
        try:
            ids: list[int] = []
            while batch := claim(name, limit=3):
                ids.extend(job.operation_id for job in batch)
            claimed[name] = ids
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    all_ids = [op_id for ids in claimed.values() for op_id in ids]
    assert len(all_ids) == 40
    assert len(set(all_ids)) == 40
    assert Operation.objects.filter(status="running", attempts=1, fencing_token=1).count() == 40


@pytest.mark.django_db(transaction=True)
def test_atomic_claim__skip_locked__a_locked_row_is_skipped_not_waited_for():
    enqueue("k1")
    enqueue("k2")
    locked = threading.Event()
    release = threading.Event()

    def hold_lock() -> None:
        try:
            with transaction.atomic():
                Operation.objects.select_for_update().get(key="k1")
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert locked.wait(10)
    try:
        jobs = claim()
        assert [job.key for job in jobs] == ["k2"]
    finally:
        release.set()
        holder.join()


@pytest.mark.django_db
def test_fencing__every_claim_increments_the_token_and_the_old_owner_writes_nothing():
    enqueue("k1")
    (first,) = claim("w1")
    expire_leases()
    (second,) = claim("w2")
    assert second.fencing_token == first.fencing_token + 1
    assert second.ambiguous  # the first attempt never recorded an outcome
    with pytest.raises(LeaseLost):
        complete_operation(first, Success(result={"by": "w1"}), started=time.monotonic())
    with pytest.raises(LeaseLost):
        renew_lease(first)
    with pytest.raises(LeaseLost):
        fail_operation(first, OperationFailed(FailureKind.SERVER_ERROR, "late"), started=time.monotonic())
    operation = Operation.objects.get()
    assert (operation.status, operation.lease_owner, operation.result) == ("running", "w2", None)
    complete_operation(second, Success(result={"by": "w2"}), started=time.monotonic())
    operation.refresh_from_db()
    assert (operation.status, operation.result) == ("succeeded", {"by": "w2"})


@pytest.mark.django_db
def test_fencing__lease_lost_rolls_back_the_domain_commit():
    enqueue("k1")
    (first,) = claim("w1")
    expire_leases()
    claim("w2")
    written = []
    with pytest.raises(LeaseLost):
        complete_operation(first, Success(finalize=lambda: written.append(enqueue("k-next"))), started=time.monotonic())
    # The fenced update failed first, so the domain commit never ran.
    assert written == []
    assert not Operation.objects.filter(key="k-next").exists()


@pytest.mark.django_db
def test_lease__expiry_is_on_the_database_clock():
    enqueue("k1")
    claim("w1")
    with connection.cursor() as cursor:
        cursor.execute("SELECT lease_expires_at - statement_timestamp() FROM workers_operation WHERE key = 'k1'")
        (remaining,) = cursor.fetchone()
    assert datetime.timedelta(seconds=0) < remaining <= datetime.timedelta(seconds=60)


@pytest.mark.django_db
def test_claim__each_attempt_keeps_when_its_operation_became_claimable__due_time_or_lease_expiry():
    """The queue time of /metrics: from the due time (or, for a takeover, the lease's expiry) to the claim."""
    enqueue("k1")
    make_due(key="k1")
    due = Operation.objects.get(key="k1").next_attempt_at
    claim("w1")
    expire_leases()
    expired = Operation.objects.get(key="k1").lease_expires_at
    claim("w2")

    first, second = Attempt.objects.filter(operation__key="k1").order_by("number")
    assert (first.due_at, second.due_at) == (due, expired)
    assert first.started_at >= first.due_at and second.started_at >= second.due_at


@pytest.mark.django_db
@pytest.mark.parametrize("status", OperationStatus.values)
@pytest.mark.parametrize("flag", [True, False])
def test_needs_operator__the_loaded_rows_property_is_the_querysets_definition(status, flag):
    """NEEDS_OPERATOR (the ops page's tile and list, the admin filter, /metrics) and the property the
    templates read are one rule: the database evaluates the one, Python the other, for every state."""
    assert Operation(status=status, needs_operator=flag).needs_an_operator == NEEDS_OPERATOR.check(
        {"status": status, "needs_operator": flag}
    )


# --- docs/invariants.md#i7: durable dependencies --------------------------------------------------------


@pytest.mark.django_db
def test_durable_dependencies__dependent_enqueued_first_is_never_claimed_before_prerequisite_succeeded():
    with transaction.atomic():
        dependent = enqueue_operation(
            key="step:2", kind="test.echo", payload_hash=HASH_A, subject_type="t", subject_id="x"
        ).operation
        prerequisite = enqueue_operation(
            key="step:1", kind="test.echo", payload_hash=HASH_A, subject_type="t", subject_id="x"
        ).operation
        Dependency.objects.create(operation=dependent, prerequisite=prerequisite)
    make_due(key="step:2")
    jobs = claim(limit=10)
    assert [job.key for job in jobs] == ["step:1"]  # idle capacity left, still not claimed
    assert claim(limit=10) == []
    fail_operation(jobs[0], OperationFailed(FailureKind.SERVER_ERROR, "x"), started=time.monotonic())
    make_due(key="step:1")
    (retry,) = claim(limit=10)
    assert retry.key == "step:1"
    complete_operation(retry, Success(), started=time.monotonic())
    assert [job.key for job in claim(limit=10)] == ["step:2"]


@pytest.mark.django_db
def test_durable_dependencies__success_edge_blocks_forever_after_prerequisite_dies():
    prerequisite = enqueue("step:1").operation
    enqueue("step:2", after=[(prerequisite, Dependency.Requires.SUCCESS)])
    (job,) = claim(limit=1)
    fail_operation(job, OperationFailed(FailureKind.INVALID, "bad input"), started=time.monotonic())
    assert claim() == []
    assert Operation.objects.get(key="step:2").status == "pending"


@pytest.mark.django_db
def test_durable_dependencies__completion_edge_releases_after_prerequisite_dies():
    prerequisite = enqueue("publish:1").operation
    enqueue("publish:2", after=[(prerequisite, Dependency.Requires.COMPLETION)])
    (job,) = claim(limit=5)
    assert job.key == "publish:1"
    fail_operation(job, OperationFailed(FailureKind.INVALID, "bad input"), started=time.monotonic())
    assert [j.key for j in claim()] == ["publish:2"]


# --- docs/invariants.md#i9: retry by failure kind ------------------------------------------------------


def _db_seconds_until(key: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM next_attempt_at - statement_timestamp()) FROM workers_operation WHERE key = %s",
            [key],
        )
        return float(cursor.fetchone()[0])


@pytest.mark.django_db
def test_retry_by_failure_kind__throttled__honours_retry_after():
    enqueue("k1")
    (job,) = claim()
    fail_operation(job, OperationFailed(FailureKind.THROTTLED, "429", retry_after=42, http_status=429), started=0)
    operation = Operation.objects.get()
    assert operation.status == "retry_wait"
    assert 41 <= _db_seconds_until("k1") <= 42.5
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.error_kind, attempt.http_status) == ("retry", "throttled", 429)


@pytest.mark.django_db
@override_settings(GALLEY_BACKOFF_BASE_SECONDS=2.0, GALLEY_BACKOFF_MAX_SECONDS=30.0)
def test_retry_by_failure_kind__server_error__exponential_backoff_with_jitter():
    import random

    rng = random.Random(7)
    delays = {attempt: [backoff_seconds(attempt, rng=rng) for _ in range(200)] for attempt in (1, 2, 3, 6)}
    assert all(1.0 <= d <= 2.0 for d in delays[1])
    assert all(2.0 <= d <= 4.0 for d in delays[2])
    assert all(4.0 <= d <= 8.0 for d in delays[3])
    assert all(15.0 <= d <= 30.0 for d in delays[6])  # capped
    assert len({round(d, 6) for d in delays[3]}) > 100  # jittered, not constant


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kind", "status", "needs_operator"),
    [
        (FailureKind.INVALID, "dead", False),
        (FailureKind.QUALITY_GATE, "dead", False),
        (FailureKind.AUTH, "dead", True),
        (FailureKind.KEY_CONFLICT, "conflict", True),
    ],
)
def test_retry_by_failure_kind__terminal_kinds_are_never_retried(kind, status, needs_operator):
    enqueue("k1")
    (job,) = claim()
    fail_operation(job, OperationFailed(kind, f"{kind} happened"), started=time.monotonic())
    operation = Operation.objects.get()
    assert (operation.status, operation.needs_operator, operation.attempts) == (status, needs_operator, 1)
    assert operation.finished_at is not None
    assert operation.last_error_message == f"{kind} happened"
    make_due()
    assert claim() == []
    if kind == FailureKind.KEY_CONFLICT:
        assert Conflict.objects.filter(operation=operation, source="target").count() == 1


@pytest.mark.django_db
def test_retry_by_failure_kind__attempts_exhausted__dead_with_reason():
    enqueue("k1", max_attempts=3)
    for _ in range(3):
        (job,) = claim()
        fail_operation(job, OperationFailed(FailureKind.TIMEOUT, "timed out"), started=time.monotonic())
        make_due(status="retry_wait")
    operation = Operation.objects.get()
    assert operation.status == "dead"
    assert operation.needs_operator
    assert operation.last_error_message.startswith("attempts exhausted (3 of 3)")
    assert Attempt.objects.count() == 3


@pytest.mark.django_db
def test_retry_by_failure_kind__timeout_makes_the_next_attempt_ambiguous():
    enqueue("k1")
    (job,) = claim()
    assert not job.ambiguous
    fail_operation(job, OperationFailed(FailureKind.TIMEOUT, "read timeout"), started=time.monotonic())
    make_due()
    (retry,) = claim()
    assert retry.ambiguous


@pytest.mark.django_db
def test_retry_by_failure_kind__total_time_bounded_by_deadline():
    enqueue("k1")
    Operation.objects.update(deadline=timezone.now() + datetime.timedelta(seconds=5))
    (job,) = claim()
    fail_operation(job, OperationFailed(FailureKind.THROTTLED, "slow down", retry_after=60), started=0)
    operation = Operation.objects.get()
    assert operation.status == "dead"
    assert "deadline" in operation.last_error_message


# --- docs/invariants.md#i12: the reconciler -----------------------------------------------------------


@pytest.mark.django_db
def test_nothing_lost__reconciler_makes_expired_leases_claimable_with_a_new_token():
    enqueue("k1")
    claim("w1")
    assert reconcile_expired_leases() == {"expired_leases": 0, "dead": 0}
    expire_leases()
    assert reconcile_expired_leases() == {"expired_leases": 1, "dead": 0}
    operation = Operation.objects.get()
    assert (operation.status, operation.lease_owner, operation.fencing_token) == ("retry_wait", "", 2)
    (retry,) = claim("w2")
    assert retry.ambiguous
    assert retry.fencing_token == 3
    first_attempt = Attempt.objects.get(number=1)
    assert first_attempt.finished_at is not None and first_attempt.error_kind == "lease_expired"


@pytest.mark.django_db
def test_nothing_lost__reconciler_turns_exhausted_expired_operations_into_dead_letters():
    enqueue("k1", max_attempts=1)
    claim("w1")
    expire_leases()
    assert reconcile_expired_leases() == {"expired_leases": 1, "dead": 1}
    operation = Operation.objects.get()
    assert (operation.status, operation.needs_operator) == ("dead", True)


def _stop_inside_the_finalize(claimed) -> None:
    """complete_operation for `claimed` that stops inside its finalize, after the handler's result was
    recorded: as a worker frozen or killed there leaves it."""

    def frozen() -> None:
        raise RuntimeError("the worker stopped inside its finalize")

    with pytest.raises(RuntimeError):
        complete_operation(claimed, Success(result={"external_id": "p-1"}, finalize=frozen), started=time.monotonic())


@pytest.mark.django_db
def test_budget__lease_lost_after_the_effect_was_recorded__takeover_ambiguous_and_not_counted():
    enqueue("k1", max_attempts=1)
    (first,) = claim("w1")
    _stop_inside_the_finalize(first)
    expire_leases()

    (takeover,) = claim("w2")  # its one allowed attempt did not fail: the effect is on record

    assert takeover.ambiguous
    operation = Operation.objects.get()
    assert (operation.attempts, operation.waits, operation.result) == (2, 1, {"external_id": "p-1"})
    complete_operation(takeover, Success(result={"external_id": "p-1"}), started=time.monotonic())
    assert Operation.objects.get().status == "succeeded"


@pytest.mark.django_db
def test_nothing_lost__reconciler__lease_lost_after_the_effect_was_recorded__retried_not_dead():
    enqueue("k1", max_attempts=1)
    (first,) = claim("w1")
    _stop_inside_the_finalize(first)
    expire_leases()

    assert reconcile_expired_leases() == {"expired_leases": 1, "dead": 0}

    operation = Operation.objects.get()
    assert (operation.status, operation.needs_operator, operation.attempts - operation.waits) == (
        "retry_wait",
        False,
        0,
    )
    (retry,) = claim("w2")
    assert retry.ambiguous


# --- docs/invariants.md#i11: retention ----------------------------------------------------------------


@pytest.mark.django_db
def test_key_retention__purge_keeps_unfinished_and_recent_operations():
    old = timezone.now() - datetime.timedelta(days=40)
    for key in ("done-old", "done-new", "prereq-old"):
        enqueue(key)
    for claimed in claim(limit=10):
        complete_operation(claimed, Success(), started=time.monotonic())
    enqueue("pending-old")
    Operation.objects.filter(key__in=["done-old", "prereq-old"]).update(finished_at=old)
    Operation.objects.filter(key="pending-old").update(created_at=old)
    Dependency.objects.create(
        operation=Operation.objects.get(key="pending-old"),
        prerequisite=Operation.objects.get(key="prereq-old"),
    )
    assert purge_finished_operations(older_than_days=30) == 1
    assert set(Operation.objects.values_list("key", flat=True)) == {"done-new", "pending-old", "prereq-old"}
    # The purged operation's attempt went with it; the kept ones keep theirs.
    assert Attempt.objects.count() == 2


@pytest.mark.django_db
def test_key_retention__purge_of_a_backlog__in_batches_leaves_only_the_rows_still_needed():
    """What a claim reads beside (operations, their attempts and dependency edges) stays few: a backlog of
    finished publish/verify pairs goes batch after batch, edges and attempts with it, in both directions of
    an edge; what is left is work in flight, the prerequisite it waits on, and what finished lately."""
    enqueue("done-lately")
    (done,) = claim()
    complete_operation(done, Success(), started=time.monotonic())
    # In the test's transaction (begun by the statements above), so the bulk's own block is a savepoint of it.
    insert_finished_operations(connection.connection, count=40)  # 20 pairs, each with attempts and an edge
    Operation.objects.exclude(key="done-lately").update(finished_at=timezone.now() - datetime.timedelta(days=40))
    prerequisite = Operation.objects.filter(kind="publish").order_by("id").first()
    waiting = enqueue("waits-on-a-finished-one").operation
    Dependency.objects.create(operation=waiting, prerequisite=prerequisite)

    assert purge_finished_operations(older_than_days=30, batch=7) == 39  # five full batches, then the last 4

    assert set(Operation.objects.values_list("key", flat=True)) == {prerequisite.key, waiting.key, "done-lately"}
    assert set(Attempt.objects.values_list("operation__key", flat=True)) == {prerequisite.key, "done-lately"}
    # The kept publish's edge from its verify went with the verify; the waiting operation's stays.
    assert list(Dependency.objects.values_list("operation__key", "prerequisite__key")) == [
        (waiting.key, prerequisite.key)
    ]


@pytest.mark.django_db
def test_key_retention__purge_inside_a_transaction__refused():
    """Each batch commits on its own: a purge inside a caller's transaction would hold all of it (and the MVCC
    horizon) until that one ends."""
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        purge_finished_operations()


# --- docs/invariants.md#i13: audited, idempotent operator actions ----------------------------------------


@pytest.mark.django_db
def test_audit__operator_retry_now_on_a_dead_letter_is_audited_and_idempotent(operator):
    enqueue("k1", max_attempts=1)
    (job,) = claim()
    fail_operation(job, OperationFailed(FailureKind.SERVER_ERROR, "500"), started=time.monotonic())
    operation = Operation.objects.get()
    assert operation.status == "dead"
    with transaction.atomic():
        assert do_retry_operation_now(operation, acting_user=operator)
    operation.refresh_from_db()
    assert (operation.status, operation.max_attempts, operation.finished_at) == ("retry_wait", 2, None)
    with transaction.atomic():
        assert do_retry_operation_now(operation, acting_user=operator) is False  # already due: no-op
    events = AuditEvent.objects.filter(event_type="operation.retry_now")
    assert events.count() == 1
    assert events.get().actor == operator
    assert events.get().old_state["status"] == "dead"
    (retry,) = claim()
    assert retry.attempt_number == 2


@pytest.mark.django_db
def test_audit__operator_reconcile_marks_the_next_attempt_ambiguous(operator):
    enqueue("k1")
    (job,) = claim()
    fail_operation(job, OperationFailed(FailureKind.AUTH, "401"), started=time.monotonic())
    with transaction.atomic():
        assert do_retry_operation_now(Operation.objects.get(), acting_user=operator, reconcile=True)
    (retry,) = claim()
    assert retry.ambiguous
    assert AuditEvent.objects.filter(event_type="operation.reconcile_requested", actor=operator).count() == 1


@pytest.mark.django_db
def test_audit__cancel_refuses_a_running_operation_and_cancels_a_waiting_one(operator):
    enqueue("k1")
    enqueue("k2")
    (job,) = claim(limit=1)
    running = Operation.objects.get(id=job.operation_id)
    waiting = Operation.objects.exclude(id=job.operation_id).get()
    with transaction.atomic():
        assert do_cancel_operation(running, reason="stop", acting_user=operator) is False
        assert do_cancel_operation(waiting, reason="duplicate brief", acting_user=operator) is True
        assert do_cancel_operation(waiting, reason="again", acting_user=operator) is False
    running.refresh_from_db()
    waiting.refresh_from_db()
    assert (running.status, waiting.status, waiting.last_error_message) == (
        "running",
        "cancelled",
        "duplicate brief",
    )
    assert AuditEvent.objects.filter(event_type="operation.cancelled").count() == 1


@pytest.mark.django_db
def test_audit__resolving_a_conflict_is_recorded_once(operator):
    enqueue("k1", payload_hash=HASH_A)
    conflict = enqueue("k1", payload_hash=HASH_B).conflict
    with transaction.atomic():
        assert do_resolve_conflict(conflict, resolution="the second request was a client bug", acting_user=operator)
        assert not do_resolve_conflict(conflict, resolution="again", acting_user=operator)
    conflict.refresh_from_db()
    assert conflict.resolved_by == operator and conflict.resolution == "the second request was a client bug"
    assert AuditEvent.objects.filter(event_type="operation.conflict_resolved").count() == 1


# --- the runner: several calls in flight, outcomes fenced ---------------------------------------------


@pytest.mark.django_db(transaction=True)
@override_settings(GALLEY_WORKER_CONCURRENCY=6)
def test_drain__runs_several_handlers_at_once_and_finishes_every_operation(handlers):
    lock = threading.Lock()
    state = {"now": 0, "max": 0}
    four_at_once = threading.Event()

    def slow_echo(job):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            if state["now"] >= 4:
                four_at_once.set()
        # In flight until four handlers overlap, however slowly a loaded CPU starts the pool's threads
        # (a fixed sleep would assume they start within it). A runner that never runs four at once
        # makes the first handler give up after 10 s, and the assertion on the maximum below fails.
        if not four_at_once.wait(timeout=10):
            four_at_once.set()
        with lock:
            state["now"] -= 1
        return Success(result={"key": job.key})

    handlers("test.echo", slow_echo)
    for index in range(12):
        enqueue(f"k{index}")
    outcomes = drain(worker_id="w-test", kinds=["test.echo"], time_budget=30, idle_wait=0.2)
    assert outcomes == {"succeeded": 12}
    assert state["max"] >= 4
    assert Operation.objects.filter(status="succeeded").count() == 12
    assert Attempt.objects.filter(outcome="succeeded", finished_at__isnull=False).count() == 12


@pytest.mark.django_db(transaction=True)
def test_drain__a_handler_bug_is_retried_bounded_not_lost(handlers):
    def broken(job):
        raise RuntimeError("bug in handler")

    handlers("test.echo", broken)
    enqueue("k1", max_attempts=2)
    with override_settings(GALLEY_BACKOFF_BASE_SECONDS=0.01, GALLEY_BACKOFF_MAX_SECONDS=0.01):
        drain(worker_id="w", kinds=["test.echo"], time_budget=10, idle_wait=0.5)
    operation = Operation.objects.get()
    assert operation.status == "dead"
    assert "RuntimeError: bug in handler" in operation.last_error_message
    assert list(Attempt.objects.values_list("error_kind", flat=True)) == ["unexpected", "unexpected"]


# --- the operation's state machine: one table, enforced by the database --------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old", "new"), [(old, new) for old in OperationStatus.values for new in OperationStatus.values if old != new]
)
def test_operation_transitions__database_allows_exactly_the_moves_of_the_table(old, new):
    # Lease and finish time set, so that only the transition trigger can refuse the move.
    operation = Operation.objects.create(
        key="k1",
        kind="test.echo",
        payload_hash=HASH_A,
        subject_type="test",
        subject_id="k1",
        status=old,
        max_attempts=3,
        deadline=timezone.now() + datetime.timedelta(hours=1),
        lease_owner="w1",
        lease_expires_at=timezone.now() + datetime.timedelta(minutes=1),
        finished_at=timezone.now(),
    )
    try:
        with transaction.atomic():
            Operation.objects.filter(id=operation.id).update(status=new)
    except IntegrityError as refusal:
        assert f"operation k1: status cannot go from {old} to {new}" in str(refusal)
        moved = False
    else:
        moved = True
    assert moved == (new in OPERATION_TRANSITIONS[old])
    assert Operation.objects.get(id=operation.id).status == (new if moved else old)


# --- docs/invariants.md#i8: claims skip what they must not take, and leases run on the database clock ---


@pytest.mark.django_db
def test_atomic_claim__expired_lease_on_last_attempt__skipped_and_others_still_claimed():
    enqueue("spent", max_attempts=1)
    claim("w1")
    expire_leases()  # its worker died on its last allowed attempt; the reconciler has not run yet
    enqueue("due")

    claimed = claim("w2")

    assert [c.key for c in claimed] == ["due"]
    spent_row = Operation.objects.get(key="spent")
    assert (spent_row.status, spent_row.lease_owner, spent_row.attempts) == ("running", "w1", 1)
    assert reconcile_expired_leases() == {"expired_leases": 1, "dead": 1}


@pytest.mark.django_db
@pytest.mark.parametrize("skew_minutes", [-30, 30])
def test_atomic_claim__worker_clock_skewed__lease_expires_by_the_database_clock(monkeypatch, settings, skew_minutes):
    settings.GALLEY_LEASE_SECONDS = 60
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + datetime.timedelta(minutes=skew_minutes))
    enqueue("k1")
    (claimed,) = claim("w1")
    renew_lease(claimed)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXTRACT(EPOCH FROM lease_expires_at - statement_timestamp()) FROM workers_operation WHERE id = %s",
            [claimed.operation_id],
        )
        (remaining,) = cursor.fetchone()
    assert 50 <= float(remaining) <= 61


def _database_now() -> datetime.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_due_on_the_database_clock__a_scheduled_operation_is_not_claimed_before_its_time():
    """docs/invariants.md#i15 at the machinery: T is the claim's due time, and the deadline runs from T."""
    scheduled_for = _database_now() + datetime.timedelta(minutes=10)
    enqueue("k1", scheduled_for=scheduled_for)
    operation = Operation.objects.get(key="k1")
    assert (operation.scheduled_for, operation.next_attempt_at) == (scheduled_for, scheduled_for)
    assert operation.deadline - scheduled_for == datetime.timedelta(seconds=settings.GALLEY_OPERATION_DEADLINE_SECONDS)
    assert claim("w1") == []

    Operation.objects.filter(key="k1").update(
        scheduled_for=_database_now() - datetime.timedelta(seconds=1),
        next_attempt_at=_database_now() - datetime.timedelta(seconds=1),
    )
    assert [claimed.operation_id for claimed in claim("w1")] == [operation.id]


@pytest.mark.django_db
def test_due_on_the_database_clock__a_schedule_in_the_past_is_due_now():
    """An approval for a time already gone fires at once, its T kept for lateness; an unscheduled one has no T."""
    past = _database_now() - datetime.timedelta(hours=1)
    enqueue("k1", scheduled_for=past)
    enqueue("k2")
    scheduled, unscheduled = Operation.objects.get(key="k1"), Operation.objects.get(key="k2")
    assert scheduled.scheduled_for == past and scheduled.next_attempt_at >= _database_now() - datetime.timedelta(
        seconds=5
    )
    assert unscheduled.scheduled_for is None
    assert {claimed.operation_id for claimed in claim("w1")} == {scheduled.id, unscheduled.id}
