"""An editor's day (issue 20), in Chromium at 1280 px and again at 390 px, against the whole stack as
`make run` starts it (tests/acceptance/conftest.py's newsroom): write the story in the draft, see it
autosaved and previewed, submit it; an approver finds it in their inbox, reviews it beside its
preview and approves it; a worker publishes it to the reference target, whose page shows it. Then
trouble: the website stops answering while a second revision goes out, and the brief page says so
in plain words — until the website is back and Galley's retry publishes it.

Every step is a screenshot (docs/testing.md#editor-day); every wait is for what the page shows.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import httpx
import psutil
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.acceptance.conftest import DESKTOP, PHONE, Newsroom, create_brief, sign_in, wait_until_published
from tests.acceptance.test_make_run import PUBLISHED_DEADLINE_SECONDS
from tests.browser import assert_fits_window

pytestmark = [pytest.mark.acceptance]

SOURCE = "Dockers at the port walked out on Monday over pay. Ships are waiting outside the port."
STORY = {
    "Headline": "Harbour strike ends after two days",
    "Standfirst": "Dockers return on Wednesday; ships still wait offshore.",
    "Body": "Dockers return to work **on Wednesday morning**.\n\nThe union called the deal *a start*.",
    "Byline": "Ana Costa",
    "Section": "City",
    "Tags": "strike, port",
}
SECOND_BODY = "Dockers returned to work **on Wednesday morning**.\n\nThe first ship docked at noon."
# What the brief page says while the website does not answer and a publish waits to be retried: a
# stable part (it names the website and the retry), and the exact sentence, in one place.
TROUBLE_NAMES_WEBSITE_AND_RETRY = re.compile(r"website.*retr", re.IGNORECASE)
TROUBLE_SENTENCE = re.compile(r"The website is not answering; Galley retries until \d\d:\d\d — nothing to do")
# A try at an unanswering website ends at its timeout (GALLEY_TARGET_TIMEOUT_SECONDS), and the brief
# page's poll shows it; the bound only guards against hanging.
TROUBLE_SHOWN_MS = PUBLISHED_DEADLINE_SECONDS * 1000


@contextlib.contextmanager
def website_paused(newsroom: Newsroom) -> Iterator[None]:
    """Every reference target make run started (the website's and the partner feed's: the newsroom's
    hosting) SIGSTOPped: their sockets still take connections, nothing answers them (sites that hang,
    not ones that are gone); resumed on the way out, whatever happened. With one channel up the brief
    would be published there, and its receipts say which channel waits (test_browser_channels)."""
    targets = [child for child in newsroom.galley.children if "galley.reference_target" in child.cmdline()]
    for target in targets:
        target.suspend()
    try:
        yield
    finally:
        for target in targets:
            with contextlib.suppress(psutil.NoSuchProcess):
                target.resume()


def left_of(first: Locator, second: Locator) -> bool:
    a, b = first.bounding_box(), second.bounding_box()
    assert a is not None and b is not None
    return a["x"] + a["width"] <= b["x"] and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def above(first: Locator, second: Locator) -> bool:
    a, b = first.bounding_box(), second.bounding_box()
    assert a is not None and b is not None
    return a["y"] + a["height"] <= b["y"]


def write_in_the_draft(editor: Page, story: dict[str, str]) -> None:
    """Type the story into the edit page's fields, then wait until the autosave has the last of it."""
    for label, text in story.items():
        editor.get_by_label(label, exact=True).fill(text)
    expect(editor.locator("#draft-status")).to_have_attribute("data-state", "saved")
    expect(editor.locator("#draft-status")).to_contain_text("Draft saved")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_editor_day__write_autosave_preview_submit_approve_publish__then_the_website_stops_answering(
    browser, newsroom, viewport
):
    width = "desktop" if viewport == DESKTOP else "phone"
    step = iter(range(1, 100))

    def shot(page: Page, name: str) -> None:
        page.wait_for_load_state("load")
        assert_fits_window(page, f"editor-day-{width}-{next(step):02d}-{name}", viewport=viewport)

    # The editor opens a brief; the AI's summary steps write revision 1 from its source material.
    editor = sign_in(browser, newsroom, "editor", viewport=viewport)
    create_brief(editor, newsroom, title="Harbour strike", source=SOURCE, shot=lambda page: shot(page, "new-brief"))
    editor.get_by_label("Assign to").select_option(label="approver")
    editor.get_by_role("button", name="Assign").click()
    expect(editor.get_by_test_id("assignment")).to_contain_text("Assigned to approver")
    shot(editor, "brief-with-the-ai-draft")

    # The story, written in the draft: autosaved, and previewed as the website will show it.
    editor.get_by_role("link", name="Edit draft").click()
    expect(editor).to_have_url(f"{newsroom.brief_url}edit/")
    write_in_the_draft(editor, STORY)
    preview = editor.locator("#draft-preview").get_by_test_id("story-preview")
    expect(preview.locator(".story-headline")).to_have_text(STORY["Headline"])
    expect(preview.get_by_test_id("story-standfirst")).to_have_text(STORY["Standfirst"])
    expect(preview.get_by_test_id("story-byline")).to_have_text(STORY["Byline"])
    expect(preview.get_by_test_id("story-body").locator("strong")).to_have_text("on Wednesday morning")
    expect(preview.get_by_test_id("story-body").locator("em")).to_have_text("a start")
    expect(preview.get_by_test_id("story-tags").locator("li")).to_have_text(["strike", "port"])
    form = editor.locator("#draft-form")
    assert left_of(form, preview) if viewport == DESKTOP else above(form, preview), "the preview's place"
    shot(editor, "draft-autosaved-with-preview")
    editor.get_by_role("button", name="Submit for review").click()
    expect(editor.get_by_text("Revision 2 submitted for review.")).to_be_visible()
    expect(editor).to_have_url(newsroom.revision_url(2))
    shot(editor, "submitted")

    # The approver, in a browser context of their own: the inbox, the preview beside the diffs, approval.
    approver = sign_in(browser, newsroom, "approver", viewport=viewport)
    approver.get_by_test_id("nav-inbox").click()
    row = approver.get_by_test_id("inbox-row").filter(has_text=newsroom.public_id)
    expect(row).to_have_count(1)
    shot(approver, "inbox")
    row.get_by_role("link", name="Revision 2").click()
    expect(approver).to_have_url(newsroom.revision_url(2))
    review_preview = approver.get_by_test_id("story-preview")
    expect(review_preview.get_by_test_id("story-body").locator("strong")).to_have_text("on Wednesday morning")
    diffs = approver.locator(".review-diffs")
    expect(diffs).to_be_visible()
    assert left_of(review_preview, diffs) if viewport == DESKTOP else above(review_preview, diffs), "beside the diffs"
    shot(approver, "revision-2-review")
    approver.get_by_role("button", name="Approve revision 2").click()
    expect(approver.get_by_text("Approved: revision 2.")).to_be_visible()
    permalink = wait_until_published(approver, newsroom.revision_url(2))
    shot(approver, "revision-2-published")

    # The brief page tells the editor it is published and checked; the website shows the story.
    editor.goto(newsroom.brief_url)
    expect(editor.locator("#brief-status")).to_contain_text("published revision 2")
    shot(editor, "brief-published")
    article = httpx.get(permalink, timeout=10)
    assert article.status_code == 200
    assert STORY["Headline"] in article.text
    assert STORY["Standfirst"] in article.text
    assert "<strong>on Wednesday morning</strong>" in article.text, article.text
    assert "<em>a start</em>" in article.text, article.text

    # Trouble: the website stops answering while revision 3 goes out.
    with website_paused(newsroom):
        editor.get_by_role("link", name="Edit draft").click()
        write_in_the_draft(editor, {"Body": SECOND_BODY})
        expect(preview.get_by_test_id("story-body")).to_contain_text("The first ship docked at noon.")
        editor.get_by_role("button", name="Submit for review").click()
        expect(editor.get_by_text("Revision 3 submitted for review.")).to_be_visible()
        approver.goto(newsroom.revision_url(3))
        approver.get_by_role("button", name="Approve revision 3").click()
        expect(approver.get_by_text("Approved: revision 3.")).to_be_visible()
        editor.goto(newsroom.brief_url)
        status = editor.locator("#brief-status")
        expect(status).to_contain_text(TROUBLE_NAMES_WEBSITE_AND_RETRY, timeout=TROUBLE_SHOWN_MS)
        expect(status).to_contain_text(TROUBLE_SENTENCE)
        shot(editor, "brief-website-not-answering")

    # The website is back: Galley's retry publishes revision 3, with nothing for the editor to do.
    permalink = wait_until_published(approver, newsroom.revision_url(3))
    expect(editor.locator("#brief-status")).to_contain_text("published revision 3")
    shot(editor, "brief-published-after-the-retry")
    assert "The first ship docked at noon." in httpx.get(permalink, timeout=10).text
