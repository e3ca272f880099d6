"""The read-only PublicationSchedule admin (docs/operations.md#admin, docs/schedules.md): operators see every
schedule — brief, revision, T in UTC and in its zone, the state approvals.selectors derives, each channel's
firing and lateness, who cancelled it and why — find one by the brief's id, and change nothing there."""

from __future__ import annotations

import pytest
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from approvals.models import PublicationSchedule
from publishing.actions.briefs import check_create_brief
from tests.approvals.test_schedules import AMSTERDAM, approve, cancel, in_minutes, pass_time
from tests.publishing.handlers.test_publications import run_worker
from workers.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

SCHEDULES = "/admin/approvals/publicationschedule/"


@pytest.fixture
def operator_client(client, operator) -> Client:
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    client.force_login(operator)
    return client


def test_schedule_admin__waiting_fired_cancelled__t_in_utc_and_its_zone_state_firing_and_who_cancelled(
    operator_client, story, revise, approver, editor, targets
):
    other = check_create_brief(title="Port reopens", source_material="Text.", acting_user=editor)
    fired = revise(other, "The port reopened at noon.")
    approve(fired, by=approver, publish_at=in_minutes(30), zone="UTC")
    pass_time(fired, minutes=2)
    assert run_worker() == {"succeeded": 2}  # both channels' publish, each verified in its attempt
    waiting = revise(story, "Dockers walked out at dawn.")
    approve(waiting, by=approver, publish_at="2027-03-28T10:00", zone=AMSTERDAM)  # CEST: 08:00 UTC

    page = operator_client.get(SCHEDULES)

    assertContains(page, "2027-03-28 08:00:00 UTC")
    assertContains(page, "2027-03-28 10:00:00 CEST (Europe/Amsterdam)")
    assertContains(page, "partner-feed: pending, not fired; web: pending, not fired")
    assertContains(page, '<td class="field-state">waiting</td>', html=False)
    assertContains(page, '<td class="field-state">fired</td>', html=False)
    assertContains(page, "web: succeeded, fired ")
    assertContains(page, " s late")

    assert cancel(waiting, by=approver, reason="The source lifted the embargo: hold it.")
    found = operator_client.get(SCHEDULES, {"q": story.public_id.upper()})
    assertContains(found, '<td class="field-state">cancelled</td>', html=False)
    assertContains(found, approver.username)
    assertContains(found, "The source lifted the embargo: hold it.")
    assertNotContains(found, other.public_id)


def test_schedule_admin__read_only__no_add_change_delete_nothing_written(
    operator_client, story, revise, approver, targets
):
    revision = revise(story, "Dockers walked out at dawn.")
    approve(revision, by=approver, publish_at=in_minutes(60), zone=AMSTERDAM)
    schedule = PublicationSchedule.objects.get()
    audit = AuditEvent.objects.count()

    assert operator_client.get(f"{SCHEDULES}add/").status_code == 403
    page = operator_client.get(f"{SCHEDULES}{schedule.id}/change/")
    assert page.status_code == 200  # the view page: every field read-only, no save button
    assertNotContains(page, 'name="_save"')
    assert operator_client.post(f"{SCHEDULES}{schedule.id}/change/", {"zone": "UTC"}).status_code == 403
    assert operator_client.post(f"{SCHEDULES}{schedule.id}/delete/", {"post": "yes"}).status_code == 403

    assert PublicationSchedule.objects.get().zone == AMSTERDAM
    assert AuditEvent.objects.count() == audit
