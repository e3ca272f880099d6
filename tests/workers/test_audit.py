"""docs/invariants.md#i13, audit: the audit log is append-only and commits with the change.

The database refuses UPDATE and DELETE of an audit row, whoever sends it; record_audit_event
joins the caller's transaction, so an event exists exactly when the change it records does.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, connection, transaction

from publishing.actions.briefs import check_create_brief
from publishing.models import Brief
from workers.audit import record_audit_event
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db


class Boom(Exception):
    """Raised on purpose to roll a transaction back."""


@pytest.fixture
def event(editor) -> AuditEvent:
    return record_audit_event(
        acting_user=editor,
        event_type="operation.retried",
        subject_type="operation",
        subject_id="publish:brief-042:revision-3",
        old_state={"state": "failed"},
        new_state={"state": "pending"},
    )


def assert_unchanged(event: AuditEvent) -> None:
    stored = AuditEvent.objects.get(pk=event.pk)
    assert (
        stored.actor_id,
        stored.event_type,
        stored.subject_type,
        stored.subject_id,
        stored.old_state,
        stored.new_state,
        stored.created_at,
    ) == (
        event.actor_id,
        "operation.retried",
        "operation",
        "publish:brief-042:revision-3",
        {"state": "failed"},
        {"state": "pending"},
        event.created_at,
    )


def count_in_other_connection(subject_id: str) -> int:
    """Count events for `subject_id` as another database session sees them (committed rows only)."""
    seen: list[int] = []

    def look() -> None:
        try:
            seen.append(AuditEvent.objects.filter(subject_id=subject_id).count())
        finally:
            connection.close()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(timeout=30)
    assert seen, "the other connection did not answer"
    return seen[0]


def test_audit_record__fields__stored_as_given(event, editor):
    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.actor == editor
    assert stored.created_at is not None
    assert_unchanged(event)


@pytest.mark.parametrize("acting_user", [None, AnonymousUser()], ids=["system", "anonymous"])
def test_audit_record__no_signed_in_user__actor_empty(acting_user):
    event = record_audit_event(
        acting_user=acting_user, event_type="reconciler.adopted", subject_type="operation", subject_id="op-1"
    )
    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.actor is None
    assert (stored.old_state, stored.new_state) == (None, None)


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("UPDATE workers_auditevent SET event_type = %s WHERE id = %s", ["operation.cancelled"]),
        ("UPDATE workers_auditevent SET new_state = %s::jsonb WHERE id = %s", ['{"state": "done"}']),
        ("UPDATE workers_auditevent SET actor_id = NULL WHERE id = %s", []),
        ("UPDATE workers_auditevent SET created_at = created_at WHERE id = %s", []),
    ],
    ids=["event-type", "new-state", "actor", "no-op"],
)
def test_audit_append_only__raw_sql_update__refused(event, sql, params):
    with (
        pytest.raises(IntegrityError, match="workers_auditevent rows are immutable: UPDATE refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [*params, event.pk])

    assert_unchanged(event)


def test_audit_append_only__raw_sql_delete__refused(event):
    with (
        pytest.raises(IntegrityError, match="workers_auditevent rows are immutable: DELETE refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM workers_auditevent")

    assert_unchanged(event)
    assert AuditEvent.objects.count() == 1


def test_audit_append_only__orm_update__refused(event):
    with (
        pytest.raises(IntegrityError, match="workers_auditevent rows are immutable: UPDATE refused"),
        transaction.atomic(),
    ):
        AuditEvent.objects.filter(pk=event.pk).update(new_state={"state": "done"})

    assert_unchanged(event)


def test_audit_append_only__orm_save__refused(event):
    event.subject_id = "publish:brief-042:revision-4"
    with (
        pytest.raises(IntegrityError, match="workers_auditevent rows are immutable: UPDATE refused"),
        transaction.atomic(),
    ):
        event.save()

    event.subject_id = "publish:brief-042:revision-3"
    assert_unchanged(event)


def test_audit_append_only__orm_delete__refused(event):
    with (
        pytest.raises(IntegrityError, match="workers_auditevent rows are immutable: DELETE refused"),
        transaction.atomic(),
    ):
        AuditEvent.objects.filter(pk=event.pk).delete()

    assert_unchanged(event)


def test_audit_record__outer_transaction_rolls_back__event_gone(editor):
    with pytest.raises(Boom), transaction.atomic():
        record_audit_event(
            acting_user=editor,
            event_type="operation.retried",
            subject_type="operation",
            subject_id="op-7",
        )
        assert AuditEvent.objects.filter(subject_id="op-7").exists()
        raise Boom

    assert not AuditEvent.objects.filter(subject_id="op-7").exists()


def test_audit_record__action_rolled_back__change_and_event_gone_together(editor):
    events_before = AuditEvent.objects.count()

    with pytest.raises(Boom), transaction.atomic(durable=True):
        brief = check_create_brief(title="Doomed brief", source_material="", acting_user=editor)
        assert AuditEvent.objects.filter(event_type="brief.created", subject_id=brief.public_id).exists()
        raise Boom

    assert not Brief.objects.filter(title="Doomed brief").exists()
    assert AuditEvent.objects.count() == events_before


@pytest.mark.django_db(transaction=True)
def test_audit_record__joins_caller_transaction__invisible_until_commit_gone_on_rollback(editor):
    with transaction.atomic(durable=True):
        record_audit_event(
            acting_user=editor, event_type="operation.retried", subject_type="operation", subject_id="op-kept"
        )
        # Not committed on its own: another session cannot see it while the caller's transaction is open.
        assert count_in_other_connection("op-kept") == 0
    assert count_in_other_connection("op-kept") == 1

    with pytest.raises(Boom), transaction.atomic(durable=True):
        record_audit_event(
            acting_user=editor,
            event_type="operation.retried",
            subject_type="operation",
            subject_id="op-lost",
        )
        assert AuditEvent.objects.filter(subject_id="op-lost").count() == 1
        raise Boom

    assert AuditEvent.objects.filter(subject_id="op-lost").count() == 0
    assert count_in_other_connection("op-lost") == 0
    assert count_in_other_connection("op-kept") == 1
