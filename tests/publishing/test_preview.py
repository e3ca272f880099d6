"""The preview as readers will see it (templates/publishing/_story_preview.html): on the revision page
beside the diffs, and as a partial any page can render for a working draft; what an editor types
never reaches it as markup of their own."""

from __future__ import annotations

import html
import re

import pytest
from django.db import transaction
from django.template.loader import render_to_string

from publishing.actions.revisions import check_create_revision
from publishing.models import Brief, Revision
from publishing.selectors.preview import get_story_preview
from tests.publishing.test_story import HOSTILE, Elements, assert_harmless

STORY = {
    "title": "Harbour strike ends",
    "standfirst": "Dockers return after talks through the night.",
    "body": "Dockers **returned** at noon.\n\n- Ferries run\n- Cranes restart",
    "byline": "Ana Lima, harbour reporter",
    "section": "Business",
    "tags": ["port", "unions"],
}


def write(brief: Brief, *, by, **story) -> Revision:
    latest = brief.revisions.order_by("-number").first()
    with transaction.atomic():
        revision, _created = check_create_revision(
            brief.public_id, base_number=latest.number if latest else 0, acting_user=by, **story
        )
    return revision


def between(text: str, start: str, end: str) -> str:
    """The text from `start` (included) to the next `end` after it (excluded)."""
    begin = text.index(start)
    return text[begin : text.index(end, begin)]


def preview_of(page: str) -> str:
    return between(page, 'data-testid="story-preview"', "</section>")


def story_body_of(preview: str) -> str:
    return between(preview, 'data-testid="story-body">', "</div>").removeprefix('data-testid="story-body">')


def assert_page_harmless(page: str) -> None:
    """No element of the page runs or loads anything an editor typed: the page's own scripts are
    files (the content-security policy allows no inline script), no handler attribute anywhere, no
    script URL, none of the elements that carry active content."""
    for tag, attrs in Elements(page).found:
        assert tag not in {"iframe", "svg", "style", "object", "embed"}, tag
        # The page's own folds (Engineer detail, a run's steps) are details elements with a class.
        if tag == "details":
            assert attrs.get("class"), attrs
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag == "script":
            assert (attrs.get("src") or "").startswith("/static/"), attrs
        for name in ("href", "src", "action"):
            url = (attrs.get(name) or "").strip().lower()
            assert not url.startswith(("javascript:", "data:")), (tag, attrs)


pytestmark = pytest.mark.django_db


def test_revision_page__preview__headline_standfirst_byline_section_tags_and_rendered_body(client, editor, brief):
    write(brief, by=editor, **STORY)
    client.force_login(editor)

    page = client.get(f"/briefs/{brief.public_id}/revisions/1/").content.decode()

    preview = preview_of(page)
    assert "Preview — as the website will show it" in preview
    assert '<h3 class="story-headline">Harbour strike ends</h3>' in preview
    standfirst = between(preview, "story-standfirst", "</p>")
    assert '"story-standfirst">Dockers return after talks through the night.' in standfirst
    assert "Ana Lima, harbour reporter" in between(preview, "story-byline", "</p>")
    assert "Business" in between(preview, "story-section", "</p>")
    assert "<li>port</li><li>unions</li>" in between(preview, "story-tags", "</ul>")
    assert story_body_of(preview) == (
        "<p>Dockers <strong>returned</strong> at noon.</p>\n<ul>\n<li>Ferries run</li>\n<li>Cranes restart</li>\n</ul>"
    )
    assert "No standfirst" not in preview


def test_revision_page__preview_beside_the_diffs__in_one_two_column_block(client, editor, brief):
    write(brief, by=editor, title="Harbour strike", body="Dockers walked out.")
    write(brief, by=editor, **STORY)
    client.force_login(editor)

    page = client.get(f"/briefs/{brief.public_id}/revisions/2/").content.decode()

    review = page[page.index('<div class="review">') :]
    # The preview first, then the diffs' column, which keeps each heading right before its diff.
    assert review.index('data-testid="story-preview"') < review.index('<div class="review-diffs">')
    heading = r'<h2 id="changes-previous">Changes against revision 1</h2>'
    assert re.search(rf'<div class="review-diffs">\s*{heading}\s*<div class="diff"', review)


def test_revision_page__no_standfirst__first_paragraph_under_the_headline_as_text_with_a_note(client, editor, brief):
    write(brief, by=editor, title="Harbour strike", body="Ships & tugs <wait> offshore.\n\nThe port is closed.")
    client.force_login(editor)

    preview = preview_of(client.get(f"/briefs/{brief.public_id}/revisions/1/").content.decode())

    # Escaped once: a reader sees "Ships & tugs <wait>", never "&amp;" or "&lt;".
    assert '"story-standfirst">Ships &amp; tugs &lt;wait&gt; offshore.' in between(preview, "story-standfirst", "</p>")
    note = between(preview, "story-preview-note", "</p>")
    assert "No standfirst: the website shows the body" in note and "first paragraph under the headline." in note
    assert 'data-testid="story-byline"' not in preview
    assert 'data-testid="story-tags"' not in preview


@pytest.mark.parametrize("hostile", HOSTILE)
def test_revision_page__hostile_markup_in_every_field__escaped_in_the_preview_and_the_diffs(
    client, editor, brief, hostile
):
    write(brief, by=editor, title="Harbour strike", body="Dockers walked out.")
    write(
        brief,
        by=editor,
        title=f"Headline {hostile}",
        standfirst=f"Standfirst {hostile}",
        body=f"Body {hostile}\n\n{hostile}",
        byline=f"Byline {hostile}",
        section=f"Section {hostile}",
        tags=[f"tag {hostile}".replace(",", " ")[:50]],
    )
    client.force_login(editor)

    page = client.get(f"/briefs/{brief.public_id}/revisions/2/").content.decode()

    assert_page_harmless(page)
    preview = preview_of(page)
    assert_harmless(story_body_of(preview))
    # The plain-text fields show what was typed, escaped once (Django's escaping is html.escape's).
    for testid, end in (
        ("story-headline", "</h3>"),
        ("story-standfirst", "</p>"),
        ("story-byline", "</p>"),
        ("story-section", "</p>"),
    ):
        assert html.escape(hostile) in between(preview, testid, end)
    assert html.escape(f"tag {hostile}".replace(",", " ")[:50]) in between(preview, "story-tags", "</ul>")
    changes = page[page.index('id="changes-previous"') :]
    for field in ("title", "standfirst", "body", "byline", "section", "tags"):
        assert f'data-field="{field}"' in changes


def test_revision_page__diffs_of_standfirst_byline_and_tags__each_a_field_of_its_own(client, editor, brief):
    write(brief, by=editor, **STORY)
    write(
        brief,
        by=editor,
        **STORY | {"standfirst": "Dockers return after talks.", "byline": "Ana Lima", "tags": ["port", "strike"]},
    )
    client.force_login(editor)

    page = client.get(f"/briefs/{brief.public_id}/revisions/2/").content.decode()

    changes = between(page, 'id="changes-previous"', 'class="card row compare-form"')
    standfirst = between(changes, 'data-field="standfirst"', "</section>")
    byline = between(changes, 'data-field="byline"', "</section>")
    tags = between(changes, 'data-field="tags"', "</section>")
    assert "<h3>Standfirst</h3>" in standfirst
    assert "Dockers return after talks<del> through the night</del>." in standfirst
    assert "Ana Lima<del>, harbour reporter</del>" in byline
    assert "port, <del>unions</del><ins>strike</ins>" in tags
    # Order as editors see the fields; the unchanged ones are named.
    assert [changes.index(f'data-field="{name}"') for name in ("standfirst", "byline", "tags")] == sorted(
        changes.index(f'data-field="{name}"') for name in ("standfirst", "byline", "tags")
    )
    assert "Headline unchanged. Body unchanged. Section unchanged." in changes


def test_revision_page__old_title_and_body_revision__still_renders_and_diffs_against_a_structured_one(
    client, editor, brief
):
    old = write(brief, by=editor, title="Harbour strike", body="Dockers walked out.")
    assert old.payload == {"title": "Harbour strike", "body": "Dockers walked out."}
    write(brief, by=editor, **STORY)
    client.force_login(editor)

    first = client.get(f"/briefs/{brief.public_id}/revisions/1/").content.decode()
    second = client.get(f"/briefs/{brief.public_id}/revisions/2/").content.decode()

    preview = preview_of(first)
    assert '<h3 class="story-headline">Harbour strike</h3>' in preview
    assert story_body_of(preview) == "<p>Dockers walked out.</p>"
    assert 'data-testid="story-byline"' not in preview and 'data-testid="story-section"' not in preview
    first_changes = between(first, 'id="changes-previous"', "diff-unchanged")
    fields = ("title", "standfirst", "body", "byline", "section", "tags")
    assert [name for name in fields if f'data-field="{name}"' in first_changes] == ["title", "body"]
    changes = between(second, 'id="changes-previous"', "diff-unchanged")
    assert "<ins>Dockers return after talks through the night.</ins>" in between(
        changes, 'data-field="standfirst"', "</section>"
    )
    assert "<ins>port, unions</ins>" in between(changes, 'data-field="tags"', "</section>")


def test_story_preview_partial__renders_alone_for_a_draft_payload_no_database():
    draft = {"title": "Harbour strike", "body": "Dockers walked out.\n\nTalks resume.", "byline": "Ana Lima"}

    context = get_story_preview(draft)
    rendered = render_to_string("publishing/_story_preview.html", context)

    assert context["standfirst_from_body"] is True
    assert context["story"]["excerpt"] == "Dockers walked out."
    assert '<h3 class="story-headline">Harbour strike</h3>' in rendered
    assert "<p>Dockers walked out.</p>\n<p>Talks resume.</p>" in rendered
    assert "Ana Lima" in rendered


def test_story_preview_partial__a_correction__shows_its_note_escaped__a_marked_draft_too():
    """docs/editorial.md#corrections: readers see the note under the headline; the preview shows it there."""
    payload = {"title": "T", "body": "x", "correction": True, "correction_note": "Said <b>Monday</b>."}
    draft = {"title": "T", "body": "x", "correction": False, "correction_note": "Not yet marked."}

    rendered = render_to_string("publishing/_story_preview.html", get_story_preview(payload))

    shown = '<p class="story-correction" data-testid="story-correction">Correction: Said &lt;b&gt;Monday&lt;/b&gt;.</p>'
    assert shown in rendered
    assert "story-correction" not in render_to_string("publishing/_story_preview.html", get_story_preview(draft))
