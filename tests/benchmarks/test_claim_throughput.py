"""Claim throughput: claim_operations (one UPDATE … FOR UPDATE SKIP LOCKED … RETURNING, batch 8)
against the naive pattern (SELECT … LIMIT 1, then UPDATE … WHERE status = 'pending', retried on
a lost race), each on 4 concurrent connections draining the same number of fresh pending operations.

Both claimers go until they find nothing to claim. Every claimed id is recorded, so a row
claimed twice (a double claim) is counted, not assumed away.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.conf import settings
from django.db import connection, transaction

from tests.benchmarks.support import Result
from workers.actions.claims import claim_operations
from workers.actions.enqueue import enqueue_operation
from workers.models import Attempt, Operation

pytestmark = pytest.mark.django_db(transaction=True)

OPERATIONS = 2000
CONNECTIONS = 4
BATCH = 8
HASH = "0" * 64

NAIVE_SELECT = """
SELECT id FROM workers_operation
WHERE status = 'pending' AND kind = %s AND next_attempt_at <= statement_timestamp()
ORDER BY next_attempt_at, id
LIMIT 1
"""
NAIVE_UPDATE = """
UPDATE workers_operation
SET status = 'running',
    lease_owner = %s,
    lease_expires_at = statement_timestamp() + make_interval(secs => %s),
    fencing_token = fencing_token + 1,
    attempts = attempts + 1,
    updated_at = statement_timestamp()
WHERE id = %s AND status = 'pending'
"""


def enqueue(kind: str) -> None:
    """OPERATIONS fresh pending operations of `kind`, through the real enqueue, in one transaction."""
    with transaction.atomic(durable=True):
        for n in range(OPERATIONS):
            enqueue_operation(
                key=f"{kind}:{n:05d}", kind=kind, payload_hash=HASH, subject_type="bench", subject_id=str(n)
            )


def run_claimers(claim_once: Callable[[str], tuple[list[int], int]]) -> tuple[float, list[int], int]:
    """Run CONNECTIONS threads, each on its own connection, calling claim_once(worker_id) until it
    returns no ids and no lost race. Returns (seconds, every claimed id, lost races)."""
    barrier = threading.Barrier(CONNECTIONS + 1)
    claimed: list[list[int]] = [[] for _ in range(CONNECTIONS)]
    lost = [0] * CONNECTIONS
    errors: list[BaseException] = []

    def claimer(index: int) -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=30)
            while True:
                ids, lost_now = claim_once(f"bench-claimer-{index}")
                claimed[index].extend(ids)
                lost[index] += lost_now
                if not ids and not lost_now:
                    return
        except BaseException as exc:
            errors.append(exc)
            raise
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(i,), name=f"claimer-{i}") for i in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    barrier.wait(timeout=30)
    started = time.perf_counter()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), "a claimer did not finish within 120 s"
    elapsed = time.perf_counter() - started
    assert not errors, errors
    return elapsed, [i for ids in claimed for i in ids], sum(lost)


def double_claims(ids: list[int]) -> int:
    return sum(n - 1 for n in Counter(ids).values() if n > 1)


def test_claim_throughput(bench_report):
    lease = settings.GALLEY_LEASE_SECONDS

    enqueue("bench-galley")

    def galley_claim(worker_id: str) -> tuple[list[int], int]:
        jobs = claim_operations(worker_id=worker_id, limit=BATCH, kinds=["bench-galley"])
        return [job.operation_id for job in jobs], 0

    galley_seconds, galley_ids, _ = run_claimers(galley_claim)

    enqueue("bench-naive")

    def naive_claim(worker_id: str) -> tuple[list[int], int]:
        with transaction.atomic(durable=True), connection.cursor() as cursor:
            cursor.execute(NAIVE_SELECT, ["bench-naive"])
            row = cursor.fetchone()
            if row is None:
                return [], 0
            cursor.execute(NAIVE_UPDATE, [worker_id, lease, row[0]])
            return ([row[0]], 0) if cursor.rowcount == 1 else ([], 1)

    naive_seconds, naive_ids, naive_lost = run_claimers(naive_claim)

    # Every operation claimed, by someone; Galley's each exactly once, with one attempt row each.
    galley = Operation.objects.filter(kind="bench-galley")
    assert set(galley_ids) == set(galley.values_list("id", flat=True))
    assert galley.filter(status="running", attempts=1, fencing_token=1).count() == OPERATIONS
    assert Attempt.objects.filter(operation__kind="bench-galley").count() == OPERATIONS
    assert double_claims(galley_ids) == 0, "claim_operations handed one operation to two claimers"
    naive = Operation.objects.filter(kind="bench-naive")
    assert set(naive_ids) == set(naive.values_list("id", flat=True))

    bench_report(
        Result(
            name=f"claim: {OPERATIONS} ops, {CONNECTIONS} connections",
            figure=OPERATIONS / galley_seconds,
            unit="claims/s",
            baseline=OPERATIONS / naive_seconds,
            baseline_unit="claims/s",
            baseline_label="naive SELECT LIMIT 1 + UPDATE",
            notes=(
                f"Galley batch {BATCH}, SKIP LOCKED, with attempt rows; "
                f"double claims: Galley {double_claims(galley_ids)}, naive {double_claims(naive_ids)}; "
                f"naive lost races {naive_lost}"
            ),
        )
    )
