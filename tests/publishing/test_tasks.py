"""publishing.tasks: the hourly retention of the API's Idempotency-Key records and the drift check's
rounds, scheduled by workers.schedules under dotted names."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import Schedule

from publishing.actions.drift import do_enqueue_drift_checks
from publishing.actions.idempotency import claim_idempotency_key, do_record_idempotent_response
from publishing.identities import DRIFT_CHECK
from publishing.models import IdempotencyRecord
from publishing.tasks import alert_overdue_schedules, check_drift, purge_idempotency_keys
from tests.publishing.handlers.test_publications import approve, assert_published, run_worker
from tests.workers.test_database_restart import lose_the_connection
from workers.models import Operation
from workers.schedules import ensure_schedules


def record(user, key: str, *, age: timedelta) -> None:
    with transaction.atomic(durable=True):
        do_record_idempotent_response(user=user, key=key, fingerprint="f" * 64, status=201, body="{}")
    IdempotencyRecord.objects.filter(user=user, key=key).update(created_at=timezone.now() - age)


@pytest.mark.django_db
def test_schedule__ensure_schedules__runs_the_idempotency_purge_hourly_by_dotted_name():
    ensure_schedules()
    ensure_schedules()  # idempotent
    schedule = Schedule.objects.get(name="galley-purge-idempotency-keys")
    assert (schedule.func, schedule.schedule_type, schedule.repeats) == (
        "publishing.tasks.purge_idempotency_keys",
        Schedule.HOURLY,
        -1,
    )
    # What django-q2 will import and call.
    module, name = schedule.func.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is purge_idempotency_keys


@pytest.mark.django_db
def test_purge_idempotency_keys__deletes_records_older_than_retention__keeps_newer(editor, approver, settings):
    settings.GALLEY_RETENTION_DAYS = 7
    record(editor, "old", age=timedelta(days=8))
    record(approver, "old", age=timedelta(days=7, minutes=1))
    record(editor, "recent", age=timedelta(days=6, hours=23))
    record(approver, "new", age=timedelta(0))

    assert purge_idempotency_keys() == 2
    assert sorted(IdempotencyRecord.objects.values_list("user__username", "key")) == [
        ("ava", "new"),
        ("eddie", "recent"),
    ]
    assert purge_idempotency_keys() == 0


@pytest.mark.django_db(transaction=True)
def test_purge_idempotency_keys__request_in_flight__neither_blocked_nor_loses_its_record(editor, settings):
    """A request in flight holds its key by an advisory lock, with no row yet (the action writes
    its record at commit): the purge neither waits for it nor touches what it then commits."""
    settings.GALLEY_RETENTION_DAYS = 7
    record(editor, "expired", age=timedelta(days=30))
    claimed, release, done = threading.Event(), threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def request_in_flight() -> None:
        try:
            with transaction.atomic(durable=True):
                assert claim_idempotency_key(user=editor, key="in-flight", fingerprint="a" * 64) is None
                claimed.set()
                assert release.wait(timeout=20)
                do_record_idempotent_response(user=editor, key="in-flight", fingerprint="a" * 64, status=201, body="{}")
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=request_in_flight)
    thread.start()
    try:
        assert claimed.wait(timeout=20)
        assert purge_idempotency_keys() == 1
    finally:
        release.set()
        thread.join(timeout=30)
    assert done.is_set() and not failures
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["in-flight"]


@pytest.mark.django_db(transaction=True)
def test_purge_idempotency_keys__database_connection_lost__logs_and_returns_then_reconnects(editor, caplog):
    """As workers.tasks.purge: the outage is logged in one line and the task returns; the next
    run (the next hour) does the work on a new session."""
    record(editor, "expired", age=timedelta(days=365))
    lose_the_connection()
    assert purge_idempotency_keys() == 0
    assert [r.levelname for r in caplog.records if "database unavailable" in r.getMessage()] == ["WARNING"]
    assert purge_idempotency_keys() == 1


@pytest.mark.django_db
def test_schedule__ensure_schedules__runs_the_drift_check_every_ten_minutes_by_dotted_name():
    ensure_schedules()
    schedule = Schedule.objects.get(name="galley-drift-check")
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "publishing.tasks.check_drift",
        Schedule.MINUTES,
        10,
        -1,
    )
    module, name = schedule.func.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is check_drift


@pytest.mark.django_db(transaction=True)
def test_check_drift__reference_target__cannot_drift_nothing_enqueued_a_check_breaks_nothing(
    target, brief, revise, approver
):
    """The reference target reports no live content: the round checks nothing there, and a check run
    there anyway (a target changed to it later) finds nothing to compare and succeeds."""
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    assert run_worker() == {"succeeded": 1}
    assert_published(brief, revision)

    assert check_drift() == 0
    assert not Operation.objects.filter(kind=DRIFT_CHECK).exists()
    with transaction.atomic(durable=True):
        do_enqueue_drift_checks(limit=10, interval=timedelta(0))
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"succeeded": 1}
    assert Operation.objects.get(kind=DRIFT_CHECK).result == {"live_hash": None, "drift": False}
    assert_published(brief, revision)


@pytest.mark.django_db
def test_schedule__ensure_schedules__runs_the_overdue_schedule_alerts_every_minute_by_dotted_name():
    ensure_schedules()
    schedule = Schedule.objects.get(name="galley-overdue-schedules")
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "publishing.tasks.alert_overdue_schedules",
        Schedule.MINUTES,
        1,
        -1,
    )
    module, name = schedule.func.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is alert_overdue_schedules
