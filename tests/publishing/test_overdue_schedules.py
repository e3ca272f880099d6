"""Missed schedules (docs/invariants.md#i15: "lateness past a configured bound tells operators"): the rule
of overdue (publishing.selectors.overdue), and its alert, written once per schedule however many sweeps
run, on how many connections at once (publishing.actions.overdue), and told by a worker through the
operator-needed hooks (the operators' notification and its email)."""

from __future__ import annotations

import datetime

import pytest
from django.db import transaction

from approvals.models import Notification
from publishing.actions.overdue import do_alert_overdue_schedules
from publishing.actions.publications import do_request_publication
from publishing.actions.retractions import check_retract_brief
from publishing.identities import PUBLISH, RETRACT, SCHEDULE_OVERDUE, VERIFY, publish_key, schedule_overdue_key
from publishing.models import Publication
from publishing.selectors.briefs import list_briefs
from publishing.selectors.overdue import (
    UpcomingSchedules,
    count_overdue_schedules,
    get_overdue_by_key,
    list_overdue_schedules,
    list_upcoming_schedules,
)
from publishing.tasks import alert_overdue_schedules
from tests.concurrency import run_together
from tests.late_pages import serve_pages_late
from tests.publishing.handlers.test_publications import run_worker
from tests.schedules import database_now
from workers.actions.enqueue import supersede_waiting_operation
from workers.actions.operator import do_cancel_operation
from workers.models import AuditEvent, ChannelGate, Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]


@pytest.fixture
def operator_with_email(operator):
    operator.email = "otto@example.org"
    operator.save(update_fields=["email"])
    return operator


def alerts() -> list[Operation]:
    return list(Operation.objects.filter(kind=SCHEDULE_OVERDUE).order_by("id"))


def test_i15_overdue__past_t_plus_lateness_and_not_verified__overdue_before_it_not(brief, revise, schedule, settings):
    settings.GALLEY_SCHEDULE_LATENESS_SECONDS = 60
    revision = revise(brief, "Dockers walked out at dawn.")
    on_time = schedule(revision, ago=30)
    assert count_overdue_schedules() == 0 and list_overdue_schedules(limit=10) == []

    Operation.objects.filter(id=on_time.id).update(scheduled_for=database_now() - datetime.timedelta(seconds=90))
    (overdue,) = list_overdue_schedules(limit=10)
    assert (overdue.brief_id, overdue.revision, overdue.channel) == (brief.public_id, revision.number, "web")
    assert datetime.timedelta(seconds=89) < overdue.overdue_by < datetime.timedelta(seconds=120)
    assert "no worker has claimed it" in overdue.why
    assert count_overdue_schedules() == 1


def test_i15_overdue__published_and_verified__no_longer_overdue(brief, revise, schedule, target):
    revision = revise(brief, "Dockers walked out at dawn.")
    schedule(revision, ago=600)
    assert count_overdue_schedules() == 1
    assert run_worker() == {"succeeded": 1}  # published and verified in one attempt
    assert count_overdue_schedules() == 0


def test_i15_overdue__published_but_not_yet_verified__still_overdue(brief, revise, schedule, target):
    serve_pages_late(target)  # the page comes late: the verification is a verify operation, still due
    revision = revise(brief, "Dockers walked out at dawn.")
    schedule(revision, ago=600)
    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    (overdue,) = list_overdue_schedules(limit=10)
    assert overdue.why.startswith("the read-back is due")


def test_i15_overdue__superseded_schedule_and_unscheduled_publish__never_overdue(brief, revise, schedule):
    first = revise(brief, "Dockers walked out at dawn.")
    superseded = schedule(first, ago=600)
    assert supersede_waiting_operation(superseded, reason="rescheduled")
    second = revise(brief, "Dockers walked out at dawn, and stayed out.")
    with transaction.atomic(durable=True):
        do_request_publication(second, channel="web")  # no T: nothing is ever late
    assert count_overdue_schedules() == 0


def test_i15_overdue__channel_paused__why_names_the_pause_and_until_when(brief, revise, schedule):
    revision = revise(brief, "Dockers walked out at dawn.")
    publish = schedule(revision, ago=120)
    until = database_now() + datetime.timedelta(minutes=3)
    ChannelGate.objects.update_or_create(
        channel="web", defaults={"paused_until": until, "pause_reason": "the target answered 429"}
    )
    overdue = get_overdue_by_key([publish.key])[publish.key]
    assert overdue.why == f"web waiting: the target answered 429 until {until:%H:%M:%S} UTC"
    assert overdue.until == until


def test_i15_missed_schedule__swept_three_times__one_alert_one_audit_record_one_email_per_operator(
    brief, revise, schedule, operator_with_email
):
    revision = revise(brief, "Dockers walked out at dawn.")
    publish = schedule(revision, ago=600)
    assert [alert_overdue_schedules() for _ in range(3)] == [1, 0, 0]
    (alert,) = alerts()
    assert alert.key == schedule_overdue_key(publish_key(brief.public_id, revision.number))
    assert alert.channel == ""  # a paused channel must not hold its own alert
    (audit,) = AuditEvent.objects.filter(event_type="schedule.overdue")
    assert audit.subject_id == publish.key and audit.new_state["alert"] == alert.key

    assert run_worker(kinds=(SCHEDULE_OVERDUE,)) == {"succeeded": 1}
    (told,) = Notification.objects.filter(recipient=operator_with_email, event=Notification.Event.PUBLISH_FAILED)
    assert "(overdue): scheduled for" in told.message and "on web, overdue by 10 min" in told.message
    emails = Operation.objects.filter(kind="notification_email", subject_id=str(told.id))
    assert emails.count() == 1

    assert [alert_overdue_schedules() for _ in range(3)] == [0, 0, 0]
    assert len(alerts()) == 1 and run_worker(kinds=(SCHEDULE_OVERDUE,)) == {}


def test_i15_missed_schedule__concurrent_sweeps__one_alert_each(brief, revise, schedule, editor):
    from publishing.actions.briefs import check_create_brief

    revisions = [revise(brief, "Dockers walked out at dawn.")]
    for title in ("Port reopens", "Ferry delayed"):
        other = check_create_brief(title=title, source_material="Text.", acting_user=editor)
        revisions.append(revise(other, f"{title}."))
    for revision in revisions:
        schedule(revision, ago=600)
    outcomes = run_together(*(lambda: do_alert_overdue_schedules(limit=100) for _ in range(4)))
    assert all(state == "ok" for state, _ in outcomes), outcomes
    assert sum(written for _, written in outcomes) == 3
    assert len(alerts()) == 3
    assert AuditEvent.objects.filter(event_type="schedule.overdue").count() == 3


def test_i15_missed_schedule__published_before_the_alert_ran__alert_ends_without_telling(
    brief, revise, schedule, target, operator_with_email
):
    revision = revise(brief, "Dockers walked out at dawn.")
    schedule(revision, ago=600)
    assert alert_overdue_schedules() == 1
    assert run_worker(kinds=(PUBLISH, VERIFY)) == {"succeeded": 1}
    assert run_worker(kinds=(SCHEDULE_OVERDUE,)) == {"succeeded": 1}
    (alert,) = alerts()
    assert alert.result["told"] is False
    assert not Notification.objects.filter(event=Notification.Event.PUBLISH_FAILED).exists()


# --- a retraction scheduled for T (docs/retractions.md): the same rule, the same alert ---------------------


def retract_at_t(brief, *, by, ago: float) -> Operation:
    """`brief` retracted at a T `ago` seconds before the database's now (asked for T in an hour, then T
    moved into the past, as the clock would have)."""
    with transaction.atomic(durable=True):
        (enqueued,) = check_retract_brief(
            brief.public_id,
            reason="The source withdrew the claim.",
            confirm=True,
            acting_user=by,
            retract_at=database_now() + datetime.timedelta(hours=1),
        )
    due = database_now() - datetime.timedelta(seconds=ago)
    Operation.objects.filter(id=enqueued.operation.id).update(scheduled_for=due, next_attempt_at=due)
    return Operation.objects.get(id=enqueued.operation.id)


def test_i15_overdue__scheduled_retraction_not_retracted_by_t_plus_lateness__overdue_until_observed_retracted(
    published_brief, approver, operator_with_email, settings
):
    settings.GALLEY_SCHEDULE_LATENESS_SECONDS = 60
    retraction = retract_at_t(published_brief, by=approver, ago=30)
    assert count_overdue_schedules() == 0  # T passed, the lateness not yet
    assert [b.public_id for b in list_briefs(schedule="scheduled").briefs] == [published_brief.public_id]

    Operation.objects.filter(id=retraction.id).update(scheduled_for=database_now() - datetime.timedelta(seconds=600))
    (overdue,) = list_overdue_schedules(limit=10)
    assert (overdue.operation.key, overdue.revision, overdue.channel) == (retraction.key, 1, "web")
    assert overdue.why == "the retraction is due and no worker has claimed it (are the workers running?)"
    assert [b.public_id for b in list_briefs(schedule="overdue").briefs] == [published_brief.public_id]

    assert [alert_overdue_schedules() for _ in range(2)] == [1, 0]
    (alert,) = alerts()
    assert alert.key == schedule_overdue_key(retraction.key)
    assert run_worker(kinds=(SCHEDULE_OVERDUE,)) == {"succeeded": 1}
    (told,) = Notification.objects.filter(recipient=operator_with_email, event=Notification.Event.PUBLISH_FAILED)
    assert told.message.startswith(f"Retracting revision 1 of {published_brief.public_id} needs an operator")
    assert "(overdue): the retraction scheduled for" in told.message

    assert run_worker(kinds=(RETRACT,)) == {"succeeded": 1}  # read back retracted, the permalink gone
    assert Publication.objects.get(brief=published_brief).retracted_at is not None
    assert count_overdue_schedules() == 0
    assert list(list_briefs(schedule="overdue").briefs) == []


def test_i15_overdue__scheduled_retraction_cancelled__no_longer_overdue(published_brief, approver, operator):
    retraction = retract_at_t(published_brief, by=approver, ago=600)
    assert count_overdue_schedules() == 1
    with transaction.atomic(durable=True):
        assert do_cancel_operation(retraction, reason="legal withdrew the request", acting_user=operator)
    assert count_overdue_schedules() == 0
    assert list(list_briefs(schedule="overdue").briefs) == []


def test_i15_upcoming__scheduled_retraction__counted_with_its_channel_until_t(published_brief, approver):
    t = (database_now() + datetime.timedelta(minutes=30)).replace(microsecond=0)
    with transaction.atomic(durable=True):
        check_retract_brief(
            published_brief.public_id, reason="Takedown.", confirm=True, acting_user=approver, retract_at=t
        )
    assert list_upcoming_schedules() == [UpcomingSchedules(channel="web", count=1, next_at=t, within_hour=1)]
    assert count_overdue_schedules() == 0
