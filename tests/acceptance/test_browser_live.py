"""Live status in a real browser (Debian's Chromium through Playwright) against a real HTTP server
and the reference target: an approver's page follows another approver's approval and the worker's
publish without reloading, and the comment they were typing survives the form going stale."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import expect

from publishing.actions.briefs import check_create_brief
from publishing.actions.resolutions import check_cancel_publication
from publishing.actions.revisions import check_create_revision
from publishing.identities import PUBLISH, VERIFY, publish_key
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in
from tests.publishing.handlers.test_publications import approve, run_worker
from workers.drain import drain
from workers.models import Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
TYPED = "The second paragraph needs a source:\nwho said the port is closed?"


def test_browser__approval_and_publish_while_typing__status_live_and_typed_text_kept(
    browser, live_server, make_user, target
):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("ava", Role.APPROVER, password=PASSWORD)
    make_user("abe", Role.APPROVER, password=PASSWORD)
    with transaction.atomic(durable=True):  # as the views do: the actions lock the brief's row
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
        check_create_revision(
            brief.public_id,
            base_number=0,
            title="Harbour strike",
            body="Dockers walked out at dawn.\nThe port is closed.",
            acting_user=eddie,
        )
    revision_url = f"{live_server.url}/briefs/{brief.public_id}/revisions/1/"

    # Approver A opens the revision and starts typing a comment into the decision form.
    ava = sign_in(browser, live_server, "ava")
    ava.set_viewport_size(DESKTOP)
    # A script the content-security policy blocked, or a swap htmx could not place, is a console error.
    console_errors: list[str] = []
    ava.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    ava.goto(revision_url)
    expect(ava.locator("#publication")).to_have_attribute("data-state", "none")
    ava.evaluate("window.__marker = 1")  # gone if the page reloads
    ava.get_by_label("Comment").press_sequentially(TYPED[:20])
    ava.get_by_label("Comment").fill(TYPED)

    # Meanwhile approver B approves the same revision, in their own browser.
    abe = sign_in(browser, live_server, "abe")
    abe.goto(revision_url)
    abe.get_by_role("button", name="Approve revision 1").click()
    expect(abe.get_by_text("Approved: revision 1.")).to_be_visible()

    # A's page, without reload: approved and publishing; the form that could only be refused now
    # is replaced by the notice, which holds A's text to copy.
    expect(ava.locator("#publication")).to_have_attribute("data-state", "publishing")
    expect(ava.get_by_text("Approved by abe for exactly this text.")).to_be_visible()
    notice = ava.locator("#decision-closed")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("approved by abe meanwhile")
    expect(ava.locator("#decision-form")).to_have_count(0)
    expect(ava.locator("#kept-comment")).to_have_value(TYPED)
    expect(ava.locator("#kept-comment")).to_have_attribute("readonly", "")
    assert ava.evaluate("window.__marker") == 1

    # The worker publishes it at the reference target and reads it back: A's page shows it.
    drain(worker_id="w-browser-live", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5)
    expect(ava.locator("#publication")).to_have_attribute("data-state", "published")
    permalink = ava.get_by_test_id("permalink")
    expect(permalink).to_have_text(brief.publications.get().permalink)
    expect(ava.locator("#kept-comment")).to_have_value(TYPED)
    assert ava.evaluate("window.__marker") == 1
    screenshot(ava, "live-stale-notice-desktop")
    ava.set_viewport_size(PHONE)
    expect(ava.locator("#kept-comment")).to_be_visible()
    screenshot(ava, "live-stale-notice-phone")

    # The brief's one timeline: newest first, the publication with its permalink on top.
    ava.set_viewport_size(DESKTOP)
    ava.get_by_role("link", name=f"{brief.public_id} Harbour strike").click()
    timeline = ava.get_by_test_id("timeline")
    expect(timeline.locator(".timeline-entry").first).to_have_attribute("data-kind", "publication")
    expect(timeline.get_by_test_id("timeline-permalink")).to_have_text(brief.publications.get().permalink)
    for kind in ("revision", "decision", "operation", "publication"):
        expect(timeline.locator(f".timeline-entry[data-kind={kind}]").first).to_be_visible()
    # An operation's attempts are inside its one entry, folded.
    expect(timeline.locator(".timeline-entry[data-kind=operation] details.timeline-steps").first).to_be_attached()
    # Engineer detail is folded away for an approver.
    expect(timeline.locator("details.engineer-detail[open]")).to_have_count(0)
    expect(ava.locator("#brief-status .status")).to_have_text("Published")
    screenshot(ava, "timeline-desktop")
    ava.set_viewport_size(PHONE)
    expect(timeline).to_be_visible()
    screenshot(ava, "timeline-phone")
    assert console_errors == [], console_errors


def test_browser__a_poll_leaves_a_folded_section_as_the_reader_left_it(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
        check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=eddie
        )
    page = sign_in(browser, live_server, "eddie")
    page.goto(f"{live_server.url}/briefs/{brief.public_id}/")  # in review: the page polls
    folded = page.locator("#brief-live details.engineer-detail").first
    expect(folded).not_to_have_attribute("open", "")
    folded.locator("summary").click()
    expect(folded).to_have_attribute("open", "")

    # Two polls swapped in (each resolves when htmx has settled the region's new content).
    settled = "() => new Promise(resolve => document.body.addEventListener('htmx:afterSettle', resolve, {once: true}))"
    for _poll in range(2):
        page.evaluate(settled)

    expect(page.locator("#brief-live details.engineer-detail").first).to_have_attribute("open", "")


def test_browser__every_region_follows_one_state__revisions_current_mark_publication_and_cancel(
    browser, live_server, make_user, target, settings
):
    """Issue 18's contradictions, each on an open page that never reloads: revision 1 arriving
    (the revision links and the editor's button follow it), a published brief's page still following
    its next revision, the revision page's "(current)" going with the "not current" notice, and the
    badge after an operator cancelled the publish."""
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    ava = make_user("ava", Role.APPROVER, password=PASSWORD)
    otto = make_user("otto", Role.OPERATOR)
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)

    def write(number: int, body: str) -> None:
        with transaction.atomic(durable=True):
            check_create_revision(
                brief.public_id, base_number=number - 1, title="Harbour strike", body=body, acting_user=eddie
            )

    page = sign_in(browser, live_server, "eddie")
    page.set_viewport_size(DESKTOP)
    console_errors: list[str] = []
    page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    page.goto(f"{live_server.url}/briefs/{brief.public_id}/")
    expect(page.locator("nav.revision-links")).to_contain_text("none yet")
    expect(page.get_by_role("link", name="Write the story")).to_be_visible()
    page.evaluate("window.__marker = 1")  # gone if the page reloads

    # Revision 1 arrives: the links, the button and the status follow, together.
    write(1, "Dockers walked out at dawn.")
    expect(page.locator("nav.revision-links").get_by_role("link", name="1", exact=True)).to_be_visible()
    expect(page.locator("nav.revision-links")).not_to_contain_text("none yet")
    expect(page.get_by_role("link", name="Edit draft")).to_be_visible()
    expect(page.get_by_role("link", name="Write the story")).to_have_count(0)
    expect(page.locator("#brief-status .status")).to_have_text("In review")

    # Published, the brief's page and revision 1's page keep following.
    revision_page = page.context.new_page()
    revision_page.goto(f"{live_server.url}/briefs/{brief.public_id}/revisions/1/")
    expect(revision_page.get_by_role("heading", level=1)).to_have_text("Revision 1 (current)")
    approve(brief.revisions.get(number=1), by=ava)
    assert run_worker(worker_id="w-browser-regions") == {"succeeded": 1}
    expect(page.locator("#brief-status .status")).to_have_text("Published")
    expect(revision_page.locator("#publication")).to_have_attribute("data-state", "published")

    # Revision 2: the published brief's page shows it; revision 1's page is no longer "(current)".
    write(2, "Dockers walked out at dawn; the port is closed.")
    expect(page.locator("#brief-status .status")).to_have_text("In review")
    expect(page.locator("nav.revision-links").get_by_role("link", name="2", exact=True)).to_be_visible()
    expect(revision_page.locator("#revision-notice")).to_contain_text("This revision is not current: revision 2 is.")
    expect(revision_page.get_by_role("heading", level=1)).to_have_text("Revision 1")

    # Revision 2's publish is refused, an operator cancels it: the badge no longer says "Approved".
    settings.GALLEY_TARGET_TOKEN = "revoked-token"
    approve(brief.revisions.get(number=2), by=ava)
    assert run_worker(worker_id="w-browser-regions") == {"dead": 1}
    expect(page.locator("#brief-status .status")).to_have_text("Approved, publishing needs an operator")
    with transaction.atomic(durable=True):
        check_cancel_publication(
            Operation.objects.get(key=publish_key(brief.public_id, 2)), reason="wrong desk", acting_user=otto
        )
    expect(page.locator("#brief-status .status")).to_have_text("Approved, not published")
    expect(page.get_by_test_id("badge-note")).to_have_text("Not published: cancelled by an operator: wrong desk")
    assert page.evaluate("window.__marker") == 1
    screenshot(page, "live-regions-cancelled")
    assert console_errors == [], console_errors
