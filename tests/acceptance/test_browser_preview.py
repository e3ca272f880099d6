"""The preview as readers will see it, in a real browser (Debian's Chromium through Playwright) against
a real HTTP server: beside the diffs on a desktop screen, above them on a phone, never wider than
the window."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.roles import Role
from tests.acceptance.test_browser_diffs import DESKTOP, LONG_WORD, PHONE, wider_than_the_page
from tests.browser import PASSWORD, assert_fits_window, sign_in

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

BODY = (
    "Dockers **returned** at noon after talks through the night.\n\n"
    f"Ferries run again; the union's statement is at {LONG_WORD}\n\n"
    "> We got what we came for.\n\n"
    "    crane_schedule = " + "restart-" * 40
)


def boxes(page: Page) -> tuple[dict[str, float], dict[str, float]]:
    preview = page.get_by_test_id("story-preview").bounding_box()
    diffs = page.locator(".review-diffs").bounding_box()
    assert preview is not None and diffs is not None
    return preview, diffs


def test_browser__preview_beside_the_diffs_on_a_desktop_above_them_on_a_phone(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
    with transaction.atomic(durable=True):
        check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=eddie
        )
    with transaction.atomic(durable=True):
        check_create_revision(
            brief.public_id,
            base_number=1,
            title="Harbour strike ends",
            standfirst="Dockers return after talks through the night; ferries run again.",
            body=BODY,
            byline="Ana Lima, harbour reporter",
            section="Business",
            tags="port, unions",
            acting_user=eddie,
        )

    editor = sign_in(browser, live_server, "eddie")
    editor.set_viewport_size(DESKTOP)
    editor.goto(f"{live_server.url}/briefs/{brief.public_id}/revisions/2/")
    preview = editor.get_by_test_id("story-preview")
    expect(preview.get_by_role("heading", name="Preview — as the website will show it")).to_be_visible()
    expect(preview.get_by_role("heading", name="Harbour strike ends")).to_be_visible()
    expect(preview.get_by_test_id("story-standfirst")).to_have_text(
        "Dockers return after talks through the night; ferries run again."
    )
    expect(preview.get_by_test_id("story-byline")).to_have_text("Ana Lima, harbour reporter")
    expect(preview.get_by_test_id("story-section")).to_have_text("Business")
    expect(preview.get_by_test_id("story-tags").get_by_role("listitem")).to_have_text(["port", "unions"])
    expect(preview.locator(".story-body strong")).to_have_text("returned")
    expect(preview.locator(".story-body blockquote")).to_have_text("We got what we came for.")

    # Desktop: two columns, the preview on the left, the diffs on the right, both starting at one height.
    preview_box, diffs_box = boxes(editor)
    assert preview_box["x"] + preview_box["width"] <= diffs_box["x"], (preview_box, diffs_box)
    assert abs(preview_box["y"] - diffs_box["y"]) < 1, (preview_box, diffs_box)
    # A column is too narrow for old and new side by side: its diffs are inline.
    changes = editor.locator("h2#changes-previous + .diff")
    expect(changes.locator("section[data-field=standfirst] .diff-inline ins")).to_have_text(
        "Dockers return after talks through the night; ferries run again."
    )
    expect(changes.locator("section[data-field=tags] .diff-inline ins")).to_have_text("port, unions")
    expect(changes.locator("section[data-field=byline] .diff-sides")).to_be_hidden()
    assert wider_than_the_page(editor) == []
    assert_fits_window(editor, "preview-desktop", viewport=DESKTOP)

    # A phone: the preview, then the diffs under it, long words and code wrapped, nothing sideways.
    editor.set_viewport_size(PHONE)
    editor.reload()
    preview_box, diffs_box = boxes(editor)
    assert preview_box["y"] + preview_box["height"] <= diffs_box["y"], (preview_box, diffs_box)
    assert preview_box["width"] <= PHONE["width"] and diffs_box["width"] <= PHONE["width"]
    expect(changes.locator("section[data-field=body] .diff-inline")).to_be_visible()
    assert wider_than_the_page(editor) == []
    assert_fits_window(editor, "preview-phone", viewport=PHONE)
