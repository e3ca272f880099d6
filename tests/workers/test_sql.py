"""The workers' SQL home (workers.sql): each rule spelled once, built from the models.

Where an ORM path keeps a rule the SQL also states (the fence, the released lease, the defaults
of a new operation), these tests hold the two equal on the database.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from tests.workers.test_operations import claim, enqueue, expire_leases
from workers.actions.claims import _fence
from workers.models import Operation
from workers.sql import (
    FENCE_COLUMNS,
    FENCE_SQL,
    FENCE_STATUS,
    LEASE_EXPIRED_SQL,
    OPERATION,
    RELEASED_LEASE,
    WAITING_DUE_SQL,
    insert_values,
    sql_list,
    sql_literal,
)


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        # An index the WHERE cannot prove it may use is then no choice at all: the plan says which. Without
        # sorts and bitmap scans, the order comes from an index too, whatever the table's statistics say
        # (an autovacuum's ANALYZE after an earlier test's thousands of rows made a sort look cheaper).
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", {"kinds": None, "busy_channels": []})
        (plan,) = cursor.fetchone()
    return plan if isinstance(plan, str) else json.dumps(plan)


@pytest.mark.django_db
def test_atomic_claim__each_due_case_reads_its_partial_index():
    waiting = f"SELECT o.id FROM {OPERATION} o WHERE {WAITING_DUE_SQL} ORDER BY o.next_attempt_at, o.id"
    expired = f"SELECT o.id FROM {OPERATION} o WHERE {LEASE_EXPIRED_SQL} ORDER BY o.lease_expires_at, o.id"
    assert "operation_due_idx" in _plan(waiting)
    assert "operation_lease_idx" in _plan(expired)


@pytest.mark.django_db
def test_fencing__the_orm_fence_selects_what_fence_sql_selects():
    enqueue("k1")
    (stale,) = claim("w1")
    expire_leases()
    (live,) = claim("w2")
    forged = type(live)(**{**live.__dict__, "worker_id": "w1"})
    assert set(_fence(live)) == set(FENCE_COLUMNS)
    for claimed, expected in ((live, [live.operation_id]), (stale, []), (forged, [])):
        orm = list(Operation.objects.filter(**_fence(claimed), status=FENCE_STATUS).values_list("id", flat=True))
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {OPERATION} WHERE {FENCE_SQL}", _fence(claimed))
            raw = [row_id for (row_id,) in cursor.fetchall()]
        assert orm == raw == expected


@pytest.mark.django_db
def test_fencing__a_released_lease_is_the_lease_of_an_operation_never_claimed():
    enqueued = enqueue("k1").operation
    stored = Operation.objects.get(id=enqueued.id)
    assert (
        {name: getattr(stored, name) for name in RELEASED_LEASE}
        == RELEASED_LEASE
        == {
            "lease_owner": "",
            "lease_expires_at": None,
        }
    )


@pytest.mark.django_db
def test_operation_identity__an_enqueued_operation_is_the_row_written_with_the_models_defaults():
    enqueued = enqueue("k1", subject_version=2, arguments={"revision": 2}).operation
    stored = Operation.objects.get(id=enqueued.id)
    fresh = Operation()
    given = {"id", "key", "kind", "payload_hash", "subject_type", "subject_id", "subject_version", "arguments"}
    given |= {"max_attempts", "next_attempt_at", "deadline", "created_at", "updated_at"}
    for field in Operation._meta.concrete_fields:
        assert getattr(enqueued, field.attname) == getattr(stored, field.attname), field.name
        if field.name not in given:
            assert getattr(stored, field.attname) == getattr(fresh, field.attname), field.name


def test_statements_from_the_models__constants_render_as_sql_literals():
    assert sql_list(["pending", "it's"]) == "'pending', 'it''s'"
    assert [sql_literal(value) for value in (None, True, False, 0, 7)] == ["NULL", "true", "false", "0", "7"]


def test_statements_from_the_models__an_insert_must_give_a_column_without_a_constant_default():
    with pytest.raises(TypeError, match=r"Operation\.arguments has no constant default"):
        insert_values(Operation, {"key": "%(key)s"})
    with pytest.raises(TypeError, match=r"no columns \[.nope.\]"):
        insert_values(Operation, {"nope": "1"})
