"""Every page fits a phone (issue 11, item 8). As an editor, an approver, an operator, an account
with no role and a visitor who is not signed in, each page at 1280 px and at 390 px is no wider than
the window; a 200-character title (the longest allowed) with no space in it wraps inside the window
wherever it is shown; the menu keeps each count badge beside its link. Each page is saved as
<role>-<page>-desktop/-phone (tests/browser.py: `make test` keeps them in var/test-artifacts/screenshots)."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from approvals.actions import check_assign_brief, check_decide_revision, check_post_comment
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.models import Brief
from publishing.roles import Role
from tests.browser import PASSWORD, TIMEOUT_MS, screenshot, sign_in

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# Titles are at most 200 characters (publishing.actions.revisions.TITLE_MAX_CHARS): the longest
# allowed, with no space to break at; the body and the comments hold a 300-character word.
LONG_TITLE = "Harbourstrike" + "x" * 177 + "closesport"
LONG_WORD = "Dockers" + "y" * 284 + "walkedout"

# Where the long title is shown on each page a role may open (for the others: a refusal page).
PAGES = {
    "dashboard": "/",
    "brief-list-filtered": "/?q=harbourstrike&status=in_review",
    "brief": "{brief}",
    "revision": "{brief}revisions/2/",
    "revision-old": "{brief}revisions/1/",
    "compare": "{brief}compare/?from=1&to=2",
    "new-brief": "/briefs/new/",
    "edit": "{brief}edit/",
    "inbox": "/inbox/",
    "notifications": "/notifications/",
    "ops": "/ops/",
    "not-found": "/no/such/page/",
}
SHOWS_TITLE = {"dashboard", "brief-list-filtered", "brief", "revision", "revision-old", "compare", "edit", "inbox"}

# Text nodes containing `marker`: how many lines each takes and how far right it reaches (nodes
# not rendered, e.g. the side-by-side diff on a phone, have no box and are left out).
TEXT_LINES = """marker => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const found = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.data.includes(marker)) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
    if (!rects.length) continue;
    found.push({
      tag: node.parentElement.tagName,
      lines: new Set(rects.map(r => Math.round(r.top))).size,
      right: Math.max(...rects.map(r => r.right)),
    });
  }
  return found;
}"""


@pytest.fixture
def newsroom(make_user) -> Brief:
    """A brief with a long unbroken title and source, two revisions, a decision, a comment thread
    and an assignment, so every page has the long words to lay out and the menu has counts."""
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    ava = make_user("ava", Role.APPROVER, password=PASSWORD)
    make_user("otto", Role.OPERATOR, password=PASSWORD)
    make_user("nora", password=PASSWORD)
    # No source material: no summary run is in progress, so no page reloads itself under the test.
    brief = check_create_brief(title=LONG_TITLE, source_material="", acting_user=eddie)
    for base, body in enumerate([f"{LONG_WORD} at dawn.", f"{LONG_WORD} at dawn.\nThe port is closed."]):
        with transaction.atomic():
            revision, _created = check_create_revision(
                brief.public_id, base_number=base, title=LONG_TITLE, body=body, acting_user=eddie
            )
        if base == 0:
            with transaction.atomic():
                check_decide_revision(
                    brief.public_id,
                    revision_number=1,
                    payload_hash=revision.payload_hash,
                    decision="changes_requested",
                    comment=f"Which {LONG_WORD}?",
                    acting_user=ava,
                )
    with transaction.atomic():
        check_post_comment(brief.public_id, revision_number=2, body=f"And {LONG_WORD}?", acting_user=ava)
    with transaction.atomic():
        check_assign_brief(brief.public_id, assignee=str(ava.pk), acting_user=eddie)
    return brief


def assert_fits(page: Page, name: str, *, shows_title: bool) -> None:
    width = page.evaluate("window.innerWidth")
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"{name}: the page is {scroll_width} px wide in a {width} px window"
    if shows_title:
        shown = page.evaluate(TEXT_LINES, LONG_TITLE)
        assert shown, f"{name}: the long title is not on the page"
        for text in shown:
            assert text["lines"] > 1 and text["right"] <= width, f"{name}: the title does not wrap: {text}"
    for link in page.locator("header nav a").all():
        lines = link.evaluate("a => new Set(Array.from(a.getClientRects()).map(r => Math.round(r.top))).size")
        assert lines == 1, f"{name}: the menu link {link.inner_text()!r} wraps"


def visit_every_page(page: Page, live_server, role: str, brief: Brief) -> None:
    for name, path in PAGES.items():
        page.set_viewport_size(DESKTOP)
        page.goto(f"{live_server.url}{path.format(brief=brief.get_absolute_url())}")
        expect(page.locator("main h1").first).to_be_visible()
        refused = page.locator("main h1").first.inner_text() in {"Not allowed", "You have no role in Galley yet"}
        for size, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            page.set_viewport_size(viewport)
            assert_fits(page, f"{role} {name} {size}", shows_title=name in SHOWS_TITLE and not refused)
            screenshot(page, f"{role}-{name}-{size}")


@pytest.mark.parametrize("username, role", [("eddie", "editor"), ("ava", "approver"), ("otto", "operator")])
def test_layout__every_page_fits_a_phone_and_wraps_a_long_title(browser, live_server, newsroom, username, role):
    page = sign_in(browser, live_server, username)

    visit_every_page(page, live_server, role, newsroom)

    if role == "approver":  # both counts in the menu, each beside its link on a phone
        expect(page.get_by_test_id("nav-inbox")).to_have_text("Inbox 1")
        expect(page.get_by_test_id("nav-notifications")).to_contain_text("Notifications")


def test_layout__no_role_and_signed_out_pages_fit_a_phone(browser, live_server, newsroom):
    visitor = browser.new_context().new_page()
    visitor.set_default_timeout(TIMEOUT_MS)
    visitor.goto(f"{live_server.url}/login/")
    for size, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        visitor.set_viewport_size(viewport)
        assert_fits(visitor, f"login {size}", shows_title=False)
        screenshot(visitor, f"anonymous-login-{size}")

    visitor.get_by_label("Username").fill("nora")
    visitor.get_by_label("Password").fill(PASSWORD)
    visitor.get_by_role("button", name="Sign in").click()
    expect(visitor.get_by_role("heading", name="You have no role in Galley yet")).to_be_visible()
    expect(visitor.get_by_text("You are signed in as nora")).to_be_visible()
    expect(visitor.get_by_role("link", name="Briefs")).to_have_count(0)
    visit_every_page(visitor, live_server, "no-role", newsroom)

    visitor.get_by_role("button", name="Sign out").click()
    expect(visitor.get_by_role("heading", name="Sign in to Galley")).to_be_visible()


def test_layout__keyboard__skip_link_first_then_a_visible_focus_ring(browser, live_server, newsroom):
    page = sign_in(browser, live_server, "eddie")
    page.goto(f"{live_server.url}{newsroom.get_absolute_url()}")

    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to main content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    page.keyboard.press("Tab")
    focused_outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert focused_outline == "solid"
    screenshot(page, "keyboard-focus-desktop")
