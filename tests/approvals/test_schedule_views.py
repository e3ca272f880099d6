"""Schedules on the web UI (docs/schedules.md#ui): the decision form's "Publish now / at" with a zone, the
schedule on the revision and brief pages (its zone and UTC, a countdown, each channel), reschedule and cancel
forms for approvers only; forged fields and bad times refused with the comment kept; output escaped; CSRF."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client

from approvals.models import Approval, PublicationSchedule
from publishing.identities import PUBLISH
from tests.approvals.conftest import BODY
from workers.models import AuditEvent, Operation

pytestmark = pytest.mark.django_db


def decide(client, revision, **fields):
    data = {
        "revision_number": revision.number,
        "payload_hash": revision.payload_hash,
        "decision": "approved",
        "comment": "Checked the quotes.",
        **fields,
    }
    return client.post(f"/briefs/{revision.brief.public_id}/revisions/{revision.number}/decision/", data)


def test_decision_form__offers_publish_now_or_at__with_a_zone_select_defaulting_to_the_sites(
    client, story, revise, approver, settings
):
    settings.TIME_ZONE = "Europe/Amsterdam"
    revision = revise(story, BODY)
    client.force_login(approver)
    page = client.get(revision.get_absolute_url()).content.decode()
    assert 'name="publish_when" value="now" checked' in page
    assert 'type="datetime-local" name="publish_at"' in page
    assert 'data-zone-default="Europe/Amsterdam"' in page
    assert '<option value="Europe/Amsterdam" selected>' in page
    assert "publishing/schedule.js" in page


def test_decision_form__publish_at__scheduled_on_every_channel__shown_in_zone_and_utc(client, story, revise, approver):
    revision = revise(story, BODY)
    client.force_login(approver)

    response = decide(client, revision, publish_when="at", publish_at="2027-03-28T10:00", zone="Europe/Amsterdam")

    assert response.status_code == 302
    t = datetime.datetime(2027, 3, 28, 8, 0, tzinfo=datetime.UTC)
    assert list(Operation.objects.filter(kind=PUBLISH).values_list("scheduled_for", flat=True)) == [t, t]
    page = client.get(revision.get_absolute_url()).content.decode()
    assert "to be published at 2027-03-28 10:00 Europe/Amsterdam (08:00 UTC)" in page
    assert 'data-state="waiting"' in page
    assert "2027-03-28 10:00 Europe/Amsterdam" in page and "2027-03-28 08:00 UTC" in page
    assert 'data-countdown datetime="2027-03-28T08:00:00+00:00"' in page
    assert 'id="reschedule-form"' in page and 'id="cancel-schedule-form"' in page
    brief_page = client.get(story.get_absolute_url()).content.decode()
    assert 'data-testid="schedule"' in brief_page and "Embargoed until" in brief_page


def test_schedule_status__in_the_pages_live_regions__redrawn_as_it_fires(client, story, revise, approver):
    """The brief and revision pages' polls redraw the schedule's status (never its forms): a schedule set in
    another tab appears, and a firing shows without a reload."""
    revision = revise(story, BODY)
    client.force_login(approver)
    assert 'id="schedule"' in client.get(story.get_absolute_url()).content.decode()  # the region, empty
    decide(client, revision, publish_when="at", publish_at="2027-03-28T10:00", zone="Europe/Amsterdam")
    for path in (f"/briefs/{story.public_id}/live/", f"/briefs/{story.public_id}/revisions/1/live/"):
        answer = client.get(path, headers={"HX-Request": "true"}).content.decode()
        assert '<div id="schedule" aria-live="polite" hx-swap-oob="true">' in answer, path
        assert 'data-state="waiting"' in answer and "2027-03-28 10:00 Europe/Amsterdam" in answer
        assert "reschedule-form" not in answer and "<form" not in answer.split('id="schedule"')[1]


def test_schedule_card__an_editor_sees_it_without_the_forms(client, story, revise, approver, editor):
    revision = revise(story, BODY)
    client.force_login(approver)
    decide(client, revision, publish_when="at", publish_at="2027-03-28T10:00", zone="Europe/Amsterdam")
    client.force_login(editor)
    page = client.get(revision.get_absolute_url()).content.decode()
    assert 'data-testid="schedule"' in page
    assert 'id="reschedule-form"' not in page and 'id="cancel-schedule-form"' not in page


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"publish_when": "tomorrow"}, "neither now nor at"),
        ({"publish_when": "at", "publish_at": "2027-03-28T10:00", "zone": "<script>x</script>"}, "not a time zone"),
        ({"publish_when": "at", "publish_at": "2027-03-28T02:30", "zone": "Europe/Amsterdam"}, "clocks skip it"),
        ({"publish_when": "at", "publish_at": " ", "zone": "UTC"}, "Choose the date and time to publish at"),
    ],
    ids=["forged-choice", "forged-zone", "dst-gap", "at-without-a-time"],
)
def test_decision_form__bad_schedule__refused_with_the_comment_kept(client, story, revise, approver, fields, message):
    revision = revise(story, BODY)
    client.force_login(approver)
    response = decide(client, revision, **fields)
    page = response.content.decode()
    assert response.status_code == 400
    assert message in page
    assert "<script>x</script>" not in page
    assert "Checked the quotes." in page
    assert not Approval.objects.exists() and not Operation.objects.filter(kind=PUBLISH).exists()


def test_reschedule_and_cancel_forms__audited__reason_escaped(client, story, revise, approver, approver2):
    revision = revise(story, BODY)
    client.force_login(approver)
    decide(client, revision, publish_when="at", publish_at="2027-03-28T10:00", zone="Europe/Amsterdam")
    client.force_login(approver2)
    base = f"/briefs/{story.public_id}/revisions/1/schedule/"

    moved = client.post(base, {"publish_at": "2027-04-01T09:30", "zone": "Europe/London"})
    assert moved.status_code == 302
    assert PublicationSchedule.objects.get().publish_at == datetime.datetime(2027, 4, 1, 8, 30, tzinfo=datetime.UTC)
    refused = client.post(base, {"publish_at": "garbage", "zone": "Europe/London"})
    assert refused.status_code == 400 and "is not a date and time" in refused.content.decode()

    cancelled = client.post(base + "cancel/", {"reason": "<b>Source</b> asked to hold"})
    assert cancelled.status_code == 302
    page = client.get(revision.get_absolute_url()).content.decode()
    assert 'data-state="cancelled"' in page
    assert "&lt;b&gt;Source&lt;/b&gt; asked to hold" in page and "<b>Source</b>" not in page
    assert 'id="reschedule-form"' not in page
    assert AuditEvent.objects.filter(event_type="revision.schedule_cancelled", actor=approver2).exists()


def test_reschedule_form__editor_refused__csrf_enforced(client, story, revise, approver, editor):
    revision = revise(story, BODY)
    client.force_login(approver)
    decide(client, revision, publish_when="at", publish_at="2027-03-28T10:00", zone="Europe/Amsterdam")
    base = f"/briefs/{story.public_id}/revisions/1/schedule/"

    client.force_login(editor)
    assert client.post(base, {"publish_at": "2027-04-01T09:30", "zone": "UTC"}).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(approver)
    assert strict.post(base + "cancel/", {"reason": "hold"}).status_code == 403
    assert PublicationSchedule.objects.get().cancelled_at is None


def test_decision_form__an_approval_that_does_not_complete__told_its_time_is_only_recorded(
    client, targets, editor, revise, approver
):
    from publishing.actions.briefs import check_create_brief
    from publishing.models import Desk

    desk = Desk.objects.create(slug="politics", name="Politics", approvals_required=2)
    brief = check_create_brief(title="Harbour strike", source_material=BODY, desk=desk.slug, acting_user=editor)
    revision = revise(brief, BODY)
    client.force_login(approver)
    decide(client, revision, publish_when="at", publish_at="2027-03-28T10:00", zone="Europe/Amsterdam")
    page = client.get(revision.get_absolute_url()).content.decode()
    assert "the approval that completes the policy decides when it is published" in page
    assert not PublicationSchedule.objects.exists()
