"""A schedule in a real browser (Debian's Chromium through Playwright) against a real HTTP server: the
approver's browser is in Tokyo, so the zone select starts there (Intl, no external script); they approve
"at" a local time, and the revision page shows it in Tokyo time and in UTC with a countdown that runs."""

from __future__ import annotations

import datetime
import re

import pytest
from django.db import transaction
from playwright.sync_api import expect

from approvals.models import PublicationSchedule
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_browser__approve_at_a_time_in_the_browsers_zone__shown_in_zone_and_utc_with_a_countdown(
    browser, live_server, make_user, settings
):
    settings.TIME_ZONE = "Europe/Amsterdam"  # the fallback, which the browser's own zone overrides
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("ava", Role.APPROVER, password=PASSWORD)
    brief = check_create_brief(title="Harbour strike", source_material="Dockers walked out.", acting_user=eddie)
    with transaction.atomic():
        revision, _created = check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=eddie
        )

    page = sign_in(browser, live_server, "ava", timezone_id="Asia/Tokyo")
    page.goto(f"{live_server.url}{revision.get_absolute_url()}")
    expect(page.locator("#publish-zone")).to_have_value("Asia/Tokyo")
    page.get_by_label("Publish at").check()
    page.locator("#publish-at").fill("2027-03-28T10:00")
    page.get_by_role("button", name="Approve revision 1").click()

    card = page.get_by_test_id("schedule")
    expect(card).to_contain_text("Embargoed until 2027-03-28 10:00 Asia/Tokyo")
    expect(card).to_contain_text("(2027-03-28 01:00 UTC)")
    countdown = card.locator("time[data-countdown]")
    expect(countdown).to_have_text(re.compile(r"^in \d+ d \d+ h \d+ min$"))
    screenshot(page, "schedule-waiting")
    schedule = PublicationSchedule.objects.get()
    t = datetime.datetime(2027, 3, 28, 1, 0, tzinfo=datetime.UTC)
    assert (schedule.publish_at, schedule.zone) == (t, "Asia/Tokyo")
