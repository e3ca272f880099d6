"""Issue 21's browser proof, with real parts only: a brief approved to three channels through the revision
page's form in a real browser (Debian's Chromium through Playwright), each channel a reference target of
its own (real HTTP), a `run_worker` process publishing, and one channel answering 503 from the start.

On the approver's open page, never reloaded: the two healthy channels' receipts turn verified while the
down one waits, saying why; a comment the approver types meanwhile (and does not send) stays in its box
through every poll, the down channel's recovery included; its receipt turns verified; then the comment
is sent and shows in the thread. Each target applied the story exactly once (docs/invariants.md#i14)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from galley.reference_target import Faults, ReferenceTarget
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.identities import PRIMARY_CHANNEL, publish_key
from publishing.models import Publication
from publishing.roles import Role
from tests.acceptance.conftest import DESKTOP, PHONE
from tests.browser import PASSWORD, assert_fits_window, screenshot, sign_in
from tests.processes import Child, child_database_url, process_env, stop
from tests.reference_target import TOKEN
from workers.models import Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DOWN = "newsletter"
HEALTHY = (PRIMARY_CHANNEL, "partner-feed")
# Every wait on the worker is bounded only against hanging: a loaded machine may take long, and a
# 503 with Retry-After: 1 keeps the down channel waiting for as long as its fault is on.
WORKER_TIMEOUT_MS = 90_000
TYPED = "The partner feed shows it already.\nShould the newsletter wait for the photo?"
# The down channel's 503 (Retry-After) in plain words: its own answer, or the pause it set for every
# worker (publishing.trouble).
WAITING_WHY = re.compile(r"^(The website|Newsletter) asked Galley to (slow down|pause sending for a while)$")


def start_worker(spawn: Callable[..., Child], web_url: str) -> Child:
    """One `run_worker` process, the primary channel being the settings' target; short backoff."""
    env = process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_TARGET_URL=web_url,
        GALLEY_TARGET_TOKEN=TOKEN,
        GALLEY_BACKOFF_BASE_SECONDS="0.2",
        GALLEY_BACKOFF_MAX_SECONDS="1",
        GALLEY_CRASH_POINT="",
    )
    return spawn("worker", "run_worker", "--worker-id", "worker", "--poll", "0.2", env=env)


def swaps(page: Page, count: int) -> None:
    """Wait until the page's poll has swapped its live region in `count` more times."""
    settled = "() => new Promise(resolve => document.body.addEventListener('htmx:afterSettle', resolve, {once: true}))"
    for _poll in range(count):
        page.evaluate(settled)


def test_invariant_14__browser__one_channel_down_then_recovered__receipts_change_live_and_a_typed_comment_survives(
    browser, live_server, make_user, start_target, add_channel, spawn
):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("ava", Role.APPROVER, password=PASSWORD)
    targets: dict[str, ReferenceTarget] = {
        PRIMARY_CHANNEL: start_target(),
        "partner-feed": add_channel("partner-feed"),
        DOWN: add_channel(DOWN, Faults(rate_503=1.0, retry_after=1)),
    }
    with transaction.atomic(durable=True):  # as the views do: the actions lock the brief's row
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
        check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=eddie
        )
    worker = start_worker(spawn, targets[PRIMARY_CHANNEL].url)

    ava = sign_in(browser, live_server, "ava")
    ava.set_viewport_size(DESKTOP)
    console_errors: list[str] = []
    ava.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    ava.goto(f"{live_server.url}/briefs/{brief.public_id}/revisions/1/")

    # The decision form offers the three channels, all ticked (the brief's defaults): approved as they are.
    choices = ava.locator("#channel-choices input[name=channels]")
    expect(choices).to_have_count(3)
    for slug in targets:
        expect(choices.and_(ava.locator(f'[value="{slug}"]'))).to_be_checked()
    screenshot(ava, "channels-decision-form")
    ava.get_by_role("button", name="Approve revision 1").click()
    expect(ava.get_by_text("Approved: revision 1.")).to_be_visible()
    expect(ava.locator("#approval-channels li[data-channel]")).to_have_count(3)
    ava.evaluate("window.__marker = 1")  # gone if the page reloads

    # Without a reload: the healthy channels verified, the down one waiting, saying why.
    receipts = ava.locator("#channel-receipts li.receipt")
    expect(receipts).to_have_count(3)
    receipt = {slug: ava.locator(f'#channel-receipts li.receipt[data-channel="{slug}"]') for slug in targets}
    for slug in HEALTHY:
        expect(receipt[slug]).to_have_attribute("data-state", "verified", timeout=WORKER_TIMEOUT_MS)
        permalink = Publication.objects.get(brief=brief, channel__slug=slug).permalink
        expect(receipt[slug].get_by_test_id("receipt-permalink")).to_have_text(permalink)
    expect(receipt[DOWN]).to_have_attribute("data-state", "waiting", timeout=WORKER_TIMEOUT_MS)
    expect(receipt[DOWN].get_by_test_id("receipt-why")).to_have_text(WAITING_WHY)
    # The publication card is the website's (the primary channel): its permalink, never another's.
    web_permalink = Publication.objects.get(brief=brief, channel__slug=PRIMARY_CHANNEL).permalink
    expect(ava.get_by_test_id("permalink")).to_have_text(web_permalink)
    # The down channel has applied nothing while it answers 503, and its publish is still to be done.
    assert targets[DOWN].ledger() == []
    assert Operation.objects.unfinished().filter(channel=DOWN).exists()
    screenshot(ava, "channels-one-down-desktop")
    ava.set_viewport_size(PHONE)
    expect(receipt[DOWN]).to_be_visible()
    assert_fits_window(ava, "channels-one-down-phone", viewport=PHONE)
    ava.set_viewport_size(DESKTOP)

    # The approver types a comment, and does not send it; the page goes on polling meanwhile.
    comment_box = ava.get_by_label("Start a thread")
    comment_box.press_sequentially(TYPED[:12])
    comment_box.fill(TYPED)
    swaps(ava, 2)
    expect(comment_box).to_have_value(TYPED)

    # The down channel recovers: its receipt turns verified live, and the typed text is still there.
    targets[DOWN].faults = Faults()
    expect(receipt[DOWN]).to_have_attribute("data-state", "verified", timeout=WORKER_TIMEOUT_MS)
    permalink = Publication.objects.get(brief=brief, channel__slug=DOWN).permalink
    expect(receipt[DOWN].get_by_test_id("receipt-permalink")).to_have_text(permalink)
    for slug in HEALTHY:
        expect(receipt[slug]).to_have_attribute("data-state", "verified")
    expect(comment_box).to_have_value(TYPED)
    expect(comment_box).to_be_focused()
    assert ava.evaluate("window.__marker") == 1
    screenshot(ava, "channels-recovered-desktop")
    ava.set_viewport_size(PHONE)
    expect(receipt[DOWN]).to_be_visible()
    assert_fits_window(ava, "channels-recovered-phone", viewport=PHONE)
    ava.set_viewport_size(DESKTOP)

    # Each target applied the story exactly once, under its channel's key.
    for slug, target in targets.items():
        assert [row["operation_key"] for row in target.ledger()] == [publish_key(brief.public_id, 1, slug)], slug
    assert not Operation.objects.unfinished().exists()
    assert worker.process.poll() is None, worker.output()

    # Sent now, the comment is saved and shows in the revision's thread.
    ava.get_by_role("button", name="Start thread").click()
    thread = ava.get_by_test_id("thread")
    expect(thread).to_have_count(1)
    for line in TYPED.splitlines():
        expect(thread.locator(".comment-body")).to_contain_text(line)
    expect(ava.get_by_label("Start a thread")).to_have_value("")
    screenshot(ava, "channels-comment-saved")
    assert console_errors == [], console_errors
    assert stop(worker.process) == 0, worker.output()
