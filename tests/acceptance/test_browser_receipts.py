"""The receipts per channel in a real browser (Debian's Chromium through Playwright) against a real
HTTP server: one channel's publication moves on while another waits, and the brief page shows each
receipt change without a reload."""

from __future__ import annotations

import datetime

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import expect

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.identities import PRIMARY_CHANNEL
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in
from tests.publishing.test_channel_receipts import S, add_channel, move, publication, send
from workers.errors import FailureKind

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_browser__brief_page__each_channels_receipt_changes_live_without_a_reload(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    add_channel("partner-feed", "Partner feed")
    add_channel("newsletter", "Newsletter")
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
        revision, _ = check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=eddie
        )
    operations = {slug: send(revision, slug) for slug in (PRIMARY_CHANNEL, "partner-feed", "newsletter")}

    page = sign_in(browser, live_server, "eddie")
    page.goto(f"{live_server.url}/briefs/{brief.public_id}/")
    receipt = page.locator("#channel-receipts .receipt")
    for slug in operations:
        expect(receipt.and_(page.locator(f'[data-channel="{slug}"]'))).to_have_attribute("data-state", "queued")
    page.evaluate("window.__marker = 1")  # gone if the page reloads

    move(operations[PRIMARY_CHANNEL], S.SUCCEEDED)
    publication(revision, PRIMARY_CHANNEL, verified=True)
    soon = timezone.now() + datetime.timedelta(minutes=2)
    move(operations["partner-feed"], S.RETRY_WAIT, last_error_kind=FailureKind.CONNECTION, next_attempt_at=soon)

    web = page.locator(f'#channel-receipts [data-channel="{PRIMARY_CHANNEL}"]')
    partner = page.locator('#channel-receipts [data-channel="partner-feed"]')
    expect(web).to_have_attribute("data-state", "verified", timeout=10_000)
    expect(web.get_by_test_id("receipt-permalink")).to_have_text(f"http://{PRIMARY_CHANNEL}.example/story/1")
    expect(partner).to_have_attribute("data-state", "waiting")
    expect(partner.get_by_test_id("receipt-why")).to_have_text("Partner feed is not answering")
    expect(page.locator('#channel-receipts [data-channel="newsletter"]')).to_have_attribute("data-state", "queued")
    assert page.evaluate("window.__marker") == 1
    screenshot(page, "brief-receipts")
