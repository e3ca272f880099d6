"""Diffs and revert in a real browser (Debian's Chromium through Playwright) against a real HTTP
server, with revision 1 published for real: approved, sent to the reference target by a worker and
read back."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.identities import PUBLISH, VERIFY
from publishing.models import Brief
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in
from workers.drain import drain

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# An unbroken run of characters longer than a phone is wide: it must wrap, never scroll sideways.
LONG_WORD = "https://harbour.example/reports/" + "strike" * 30
BODIES = [
    "Dockers walked out at dawn. The port is closed.",
    "Dockers walked out at dawn. The port is closed until Friday.",
    f"Dockers returned at noon. The port is closed until Friday. Source: {LONG_WORD}",
]


def write(brief: Brief, body: str, *, base: int, by) -> None:
    with transaction.atomic(durable=True):  # as the edit view does: the action locks the brief's row
        check_create_revision(brief.public_id, base_number=base, title="Harbour strike", body=body, acting_user=by)


def wider_than_the_page(page: Page) -> list[str]:
    """The elements that reach past the page's right edge (tag and class): none, or the page scrolls sideways."""
    page.wait_for_load_state("load")  # the stylesheet applied: layout before it is no answer
    return page.evaluate(
        """() => {
            const width = document.documentElement.clientWidth;
            if (document.documentElement.scrollWidth <= width) return [];
            // Text that does not wrap spills out of its box: the box's scroll width says how far.
            return [...document.querySelectorAll("body *")]
                .filter((element) => element.getBoundingClientRect().left + element.scrollWidth > width + 1)
                .map((element) => `${element.tagName.toLowerCase()}.${element.className}`);
        }"""
    )


def test_browser__word_changes_against_the_published_revision_then_restore(browser, live_server, make_user, target):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    ava = make_user("ava", Role.APPROVER, password=PASSWORD)
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
    write(brief, BODIES[0], base=0, by=eddie)
    first = brief.revisions.get(number=1)
    with transaction.atomic(durable=True):
        check_decide_revision(
            brief.public_id,
            revision_number=1,
            payload_hash=first.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=ava,
        )
    drain(worker_id="w-browser", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5)
    brief.refresh_from_db()
    assert brief.published_revision_number == 1
    write(brief, BODIES[1], base=1, by=eddie)
    write(brief, BODIES[2], base=2, by=eddie)

    editor = sign_in(browser, live_server, "eddie")
    editor.set_viewport_size(DESKTOP)
    editor.get_by_role("link", name=brief.public_id).click()
    editor.get_by_role("link", name="3", exact=True).click()
    expect(editor.get_by_role("heading", name="Changes against the published revision 1")).to_be_visible()
    published = editor.locator("h2#changes-published + .diff section[data-field=body]")
    # Wide screen: the diffs are a column beside the preview, too narrow for old and new side by
    # side, so each change is inline there: old words struck out, new ones after them.
    expect(published.locator(".diff-inline del")).to_have_text(["walked out", "dawn", "."])
    expect(published.locator(".diff-inline ins")).to_have_text(
        ["returned", "noon", f" until Friday. Source: {LONG_WORD}"]
    )
    expect(published.locator(".diff-sides")).to_be_hidden()
    previous = editor.locator("h2#changes-previous + .diff section[data-field=body]")
    expect(previous.locator(".diff-inline ins")).to_have_text(["returned", "noon", f" Source: {LONG_WORD}"])
    assert wider_than_the_page(editor) == []
    screenshot(editor, "diff-desktop")

    # Any two revisions, picked with the compare form.
    editor.get_by_label("From revision").select_option("1")
    editor.get_by_label("To revision").select_option("2")
    editor.get_by_role("button", name="Compare").click()
    expect(editor.get_by_role("heading", name="Revision 1 → revision 2")).to_be_visible()
    # The compare page has the whole width: side by side, old words on the left, new ones on the right.
    expect(editor.locator("section[data-field=body] .diff-new ins")).to_have_text([" until Friday"])
    expect(editor.locator("section[data-field=body] .diff-new")).to_be_visible()
    expect(editor.locator("section[data-field=body] .diff-inline")).to_be_hidden()

    # A phone: the inline view, wrapped, nothing scrolls sideways.
    editor.set_viewport_size(PHONE)
    editor.goto(f"{live_server.url}/briefs/{brief.public_id}/revisions/3/")
    phone_diff = editor.locator("h2#changes-published + .diff section[data-field=body] .diff-inline")
    expect(phone_diff).to_be_visible()
    expect(phone_diff.locator("del")).to_have_text(["walked out", "dawn", "."])
    expect(phone_diff.locator("ins").first).to_have_text("returned")
    assert wider_than_the_page(editor) == []
    screenshot(editor, "diff-phone")

    # Revert: revision 1 becomes revision 4, which needs approval like any other.
    editor.set_viewport_size(DESKTOP)
    editor.goto(f"{live_server.url}/briefs/{brief.public_id}/revisions/1/")
    editor.get_by_role("button", name="Restore this revision").click()
    expect(editor.get_by_text("Revision 1 restored as revision 4; it needs approval like any other.")).to_be_visible()
    expect(editor).to_have_url(f"{live_server.url}/briefs/{brief.public_id}/revisions/4/")
    expect(editor.get_by_test_id("restores")).to_have_text("Restores revision 1.")
    expect(editor.locator("h2#changes-previous + .diff section[data-field=body] .diff-inline ins")).to_have_text(
        ["walked out", "dawn", "."]
    )
    screenshot(editor, "diff-restored")
    restored = brief.revisions.get(number=4)
    assert (restored.payload, restored.payload_hash) == (first.payload, first.payload_hash)
    brief.refresh_from_db()
    assert (brief.status, brief.published_revision_number) == (Brief.Status.IN_REVIEW, 1)
