"""The retraction in the web UI (docs/retractions.md): the brief page's Retract button (approvers, once
published_brief) → the confirm page listing each channel and the revision it holds → done; the brief page and
its timeline then show the retraction per channel, and the dashboard filters retracted briefs."""

from __future__ import annotations

import datetime
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.urls import reverse

from publishing.identities import RETRACT
from tests.schedules import database_now
from workers.drain import drain
from workers.models import AuditEvent, Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_retract__approver_confirms__taken_down_and_shown_per_channel_in_page_timeline_and_dashboard(
    published_brief, approver
):
    client = signed_in(approver)
    page = client.get(reverse("publishing:brief", args=[published_brief.public_id])).content.decode()
    assert 'data-testid="retract"' in page
    confirm = client.get(reverse("publishing:brief_retract", args=[published_brief.public_id])).content.decode()
    assert 'data-channel="web"' in confirm and "holds revision 1" in confirm

    done = client.post(
        reverse("publishing:brief_retract", args=[published_brief.public_id]),
        {"reason": "Legal asked for a takedown.", "confirm": "yes"},
    )
    assert done.status_code == 302 and done["Location"] == published_brief.get_absolute_url()
    drain(worker_id="w-test", kinds=[RETRACT], time_budget=30, idle_wait=0.5)

    page = client.get(reverse("publishing:brief", args=[published_brief.public_id])).content.decode()
    assert 'id="retractions"' in page and "Legal asked for a takedown." in page
    assert 'data-testid="retract"' not in page  # taken down: nothing left to retract
    assert "Retracted (revision 1)" in page
    assert "Revision 1 retracted on" in page  # the timeline's entry
    listed = client.get(reverse("publishing:dashboard"), {"status": "retracted"}).content.decode()
    assert published_brief.public_id in listed


@pytest.mark.parametrize(
    ("data", "message"),
    [({"reason": "Takedown."}, "Confirm the retraction"), ({"reason": " ", "confirm": "yes"}, "is required")],
    ids=["not-confirmed", "no-reason"],
)
def test_retract__refused__the_page_again_with_why__nothing_written(published_brief, approver, data, message):
    response = signed_in(approver).post(reverse("publishing:brief_retract", args=[published_brief.public_id]), data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Operation.objects.filter(kind=RETRACT).exists()


def test_retract__editor__no_button_and_refused(published_brief, editor):
    client = signed_in(editor)
    page = client.get(reverse("publishing:brief", args=[published_brief.public_id])).content.decode()
    assert 'data-testid="retract"' not in page
    response = client.get(reverse("publishing:brief_retract", args=[published_brief.public_id]))
    assert response.status_code == 403


# --- "Retract now / at" (docs/retractions.md#request): the approve form's fields, read by clean_schedule ------

AMSTERDAM = "Europe/Amsterdam"


def in_amsterdam(hours: float) -> datetime.datetime:
    """A wall-clock minute in Amsterdam `hours` after the database's now (the clock the claim uses)."""
    moment = (database_now() + datetime.timedelta(hours=hours)).astimezone(ZoneInfo(AMSTERDAM))
    return moment.replace(second=0, microsecond=0)


def test_i15_retract_at__amsterdam_wall_clock__due_at_t_in_utc__brief_page_shows_t_in_its_zone_with_countdown(
    published_brief, approver
):
    client = signed_in(approver)
    url = reverse("publishing:brief_retract", args=[published_brief.public_id])
    confirm = client.get(url).content.decode()
    assert "Retract now" in confirm and "Retract at" in confirm
    assert 'id="publish-zone"' in confirm and "publishing/schedule.js" in confirm  # the approve form's partial
    t = in_amsterdam(2)

    done = client.post(
        url,
        {
            "reason": "Embargoed takedown: the court order applies from then.",
            "confirm": "yes",
            "publish_when": "at",
            "publish_at": f"{t:%Y-%m-%dT%H:%M}",
            "zone": AMSTERDAM,
        },
        follow=True,
    )

    (operation,) = Operation.objects.filter(kind=RETRACT)
    assert operation.scheduled_for == t.astimezone(datetime.UTC) == operation.next_attempt_at
    assert operation.arguments["zone"] == AMSTERDAM
    said = " ".join(str(message) for message in done.context["messages"])
    assert f"taken down at {t:%Y-%m-%d %H:%M} {AMSTERDAM} on 1 channel(s)" in said
    page = done.content.decode()
    assert f"{t:%Y-%m-%d %H:%M} {AMSTERDAM}" in page
    assert f"({t.astimezone(datetime.UTC):%Y-%m-%d %H:%M} UTC)" in page
    assert "data-countdown" in page and 'data-due-now="due now: taken down when a worker claims it"' in page
    (audit,) = AuditEvent.objects.filter(event_type="brief.retraction_requested")
    utc = t.astimezone(datetime.UTC)
    assert (audit.new_state["retract_at"], audit.new_state["zone"]) == (utc.isoformat(), AMSTERDAM)
    assert drain(worker_id="w-test", kinds=[RETRACT], time_budget=5, idle_wait=0.2) == {}  # nothing before T


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ({"publish_when": "at", "publish_at": "", "zone": AMSTERDAM}, "Choose the date and time to retract at"),
        ({"publish_when": "at", "publish_at": "2027-01-05T10:00", "zone": "Mars/Olympus_Mons"}, "is not a time zone"),
        ({"publish_when": "at", "publish_at": "2020-01-05T10:00", "zone": AMSTERDAM}, "has passed"),
        ({"publish_when": "later"}, "neither now nor at"),
    ],
    ids=["at-without-time", "unknown-zone", "long-past", "unknown-choice"],
)
def test_retract_at__refused__the_page_again_with_what_was_typed__nothing_written(
    published_brief, approver, when, message
):
    data = {"reason": "Embargoed takedown.", "confirm": "yes", **when}
    response = signed_in(approver).post(reverse("publishing:brief_retract", args=[published_brief.public_id]), data)
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page and "Embargoed takedown." in page
    if when.get("publish_at"):
        assert f'value="{when["publish_at"]}"' in page
    assert not Operation.objects.filter(kind=RETRACT).exists()
