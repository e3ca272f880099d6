"""docs/invariants.md#i15 in a real browser (Debian's Chromium through Playwright) against a real HTTP server,
with a real `run_worker` process and two reference targets (real HTTP, served from threads): an approver in
Amsterdam approves a revision to publish at T, about half a minute ahead, through the decision form (Publish
at, a local time, the zone); the brief page shows the schedule and its countdown running; at T the worker
fires it, and the page, never reloaded, shows the schedule fired and each channel's receipt verified. Each
target applied the revision once, at or after T. The waits are generous bounds against hanging, never
timings."""

from __future__ import annotations

import datetime
import re
from zoneinfo import ZoneInfo

import pytest
from django.db import transaction
from playwright.sync_api import expect

from approvals.models import PublicationSchedule
from approvals.schedules import database_now
from approvals.selectors import ScheduleState, get_revision_schedule
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.identities import PRIMARY_CHANNEL, publish_key
from publishing.models import Publication
from publishing.roles import Role
from tests.acceptance.conftest import spawn as spawn_child  # noqa: F401  (a fixture: manage.py children)
from tests.acceptance.test_browser_channels import start_worker
from tests.browser import PASSWORD, screenshot, sign_in
from tests.processes import stop

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

AMSTERDAM = "Europe/Amsterdam"
PARTNER = "partner-feed"
# T is the first whole minute (the form's step) at least this far past the database's now: time enough to
# see the countdown run before it fires.
AHEAD_SECONDS = 30
# Bounds against hanging on a loaded machine, past T: the worker's claim, the target's calls, the page's poll.
FIRED_TIMEOUT_MS = 120_000
# The countdown a minute or two ahead of T: "in 0 min 42 s", "in 1 min 5 s".
COUNTDOWN = re.compile(r"^in \d+ min \d+ s$")


def next_minute_at_least(seconds: float) -> datetime.datetime:
    """The first whole minute at least `seconds` after the database's now (its clock decides T)."""
    soonest = database_now() + datetime.timedelta(seconds=seconds)
    return soonest.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1)


def test_i15__browser__approve_at_t__countdown_runs__fires_at_t__schedule_and_receipts_change_live(
    browser, live_server, make_user, start_target, add_channel, request
):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("ava", Role.APPROVER, password=PASSWORD)
    targets = {PRIMARY_CHANNEL: start_target(), PARTNER: add_channel(PARTNER)}
    with transaction.atomic(durable=True):  # as the views do: the actions lock the brief's row
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
        revision, _created = check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=eddie
        )
    worker = start_worker(request.getfixturevalue("spawn_child"), targets[PRIMARY_CHANNEL].url)

    ava = sign_in(browser, live_server, "ava", timezone_id=AMSTERDAM)
    console_errors: list[str] = []
    ava.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    ava.goto(f"{live_server.url}{revision.get_absolute_url()}")
    expect(ava.locator("#publish-zone")).to_have_value(AMSTERDAM)  # the browser's own zone (Intl)
    t = next_minute_at_least(AHEAD_SECONDS)
    local = t.astimezone(ZoneInfo(AMSTERDAM))
    ava.get_by_label("Publish at").check()
    ava.locator("#publish-at").fill(local.strftime("%Y-%m-%dT%H:%M"))
    ava.get_by_role("button", name="Approve revision 1").click()
    expect(ava.get_by_test_id("schedule")).to_have_attribute("data-state", ScheduleState.WAITING)
    schedule = PublicationSchedule.objects.get()
    assert (schedule.publish_at, schedule.zone) == (t, AMSTERDAM)

    # The brief page: the schedule in Amsterdam time and UTC, and a countdown that runs.
    ava.goto(f"{live_server.url}{brief.get_absolute_url()}")
    card = ava.get_by_test_id("schedule")
    expect(card).to_have_attribute("data-state", ScheduleState.WAITING)
    expect(card).to_contain_text(f"Embargoed until {local:%Y-%m-%d %H:%M} {AMSTERDAM}")
    expect(card).to_contain_text(f"({t:%Y-%m-%d %H:%M} UTC)")
    countdown = card.locator("time[data-countdown]")
    expect(countdown).to_have_text(COUNTDOWN)
    shown = countdown.inner_text()
    expect(countdown).not_to_have_text(shown)  # it ticks
    screenshot(ava, "schedule-brief-waiting")
    receipts = ava.locator("#channel-receipts li.receipt")
    receipt = {slug: receipts.and_(ava.locator(f'[data-channel="{slug}"]')) for slug in targets}
    for slug, target in targets.items():
        expect(receipt[slug]).not_to_have_attribute("data-state", "verified")
        assert target.ledger() == [], slug  # embargoed: nothing sent
    status = ava.locator("#brief-status .status")
    expect(status).not_to_have_text("Published")
    ava.evaluate("window.__marker = 1")  # gone if the page reloads

    # At T the worker fires it: without a reload, the schedule fired and each channel's receipt verified.
    expect(card).to_have_attribute("data-state", ScheduleState.FIRED, timeout=FIRED_TIMEOUT_MS)
    expect(countdown).to_have_count(0)
    for slug in targets:
        expect(receipt[slug]).to_have_attribute("data-state", "verified", timeout=FIRED_TIMEOUT_MS)
        permalink = Publication.objects.get(brief=brief, channel__slug=slug).permalink
        expect(receipt[slug].get_by_test_id("receipt-permalink")).to_have_text(permalink)
        expect(card.locator(f'li[data-channel="{slug}"]')).to_contain_text("s after its time")
    expect(status).to_have_text("Published")
    assert ava.evaluate("window.__marker") == 1
    screenshot(ava, "schedule-brief-fired")

    # Once per channel, at or after T; the firing and its lateness recorded on the database clock.
    for slug, target in targets.items():
        rows = target.ledger()
        assert [row["operation_key"] for row in rows] == [publish_key(brief.public_id, 1, slug)], slug
        assert datetime.datetime.fromisoformat(rows[0]["applied_at"]) >= t, (slug, rows[0]["applied_at"], t)
    fired = get_revision_schedule(revision)
    assert fired is not None and fired.state == ScheduleState.FIRED
    for firing in fired.channels:
        assert firing.fired_at is not None and firing.lateness is not None, firing
        assert firing.fired_at >= t and firing.lateness >= datetime.timedelta(0), firing
    assert console_errors == [], console_errors
    assert stop(worker.process) == 0, worker.output()
