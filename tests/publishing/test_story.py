"""publishing.story: a story's fields, their checks, the hash of a structured payload, sanitized Markdown."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from typing import Any

import pytest

from publishing.errors import InvalidInput
from publishing.hashing import payload_hash
from publishing.story import (
    body_text,
    clean_story,
    clean_tags,
    html_paragraphs,
    render_markdown,
    render_story,
    story_fields,
)

# Markup an editor might type, in any field; none of it may reach a reader as markup.
HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '<a href="javascript:alert(3)">x</a>',
    "[click](javascript:alert(4))",
    "![x](javascript:alert(5))",
    '<svg onload="alert(6)">',
    "<iframe src=//evil.example></iframe>",
    '"><script>alert(7)</script>',
    "<style>body{display:none}</style>",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCg4KTwvc2NyaXB0Pg==)",
    "<details open ontoggle=alert(9)>",
]
SAFE_TAGS = {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "a", "ul", "ol", "li", "blockquote"}
SAFE_TAGS |= {"code", "pre", "img"}


class Elements(HTMLParser):
    """Every element and attribute of a piece of HTML, as a browser's parser would see them."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def hostile_story(hostile: str) -> dict[str, Any]:
    """A story with `hostile` in every field, as clean_story keeps it."""
    return clean_story(
        {
            "title": f"Headline {hostile}",
            "standfirst": f"Standfirst {hostile}",
            "body": f"Body {hostile}\n\n{hostile}",
            "byline": f"Byline {hostile}",
            "section": f"Section {hostile}",
            "tags": [f"tag {hostile}".replace(",", " ")[:50]],
        }
    )


def assert_harmless(html: str) -> None:
    for tag, attrs in Elements(html).found:
        assert tag in SAFE_TAGS, html
        assert not any(name.startswith("on") or name == "style" for name in attrs), html
        for name in ("href", "src"):
            url = (attrs.get(name) or "").strip().lower()
            assert not url or url.startswith(("http:", "https:", "mailto:")), html


def test_story_payload__title_and_body_only__is_exactly_the_payload_from_before_structured_stories():
    payload = clean_story({"title": "Harbour strike", "body": "Dockers walked out."})

    assert payload == {"title": "Harbour strike", "body": "Dockers walked out."}
    assert payload_hash(payload) == payload_hash({"body": "Dockers walked out.", "title": "Harbour strike"})


def test_story_payload_hash__covers_every_field():
    base = {
        "title": "Harbour strike",
        "standfirst": "Dockers walked out at dawn.",
        "body": "The port is **closed**.",
        "byline": "Ana Nowak",
        "section": "Business",
        "tags": ["port", "labour"],
    }
    digest = payload_hash(clean_story(base))
    for name, other in [
        ("title", "Harbour strike ends"),
        ("standfirst", "Dockers walked out at noon."),
        ("body", "The port is closed."),
        ("byline", "Jan Kowalski"),
        ("section", "Politics"),
        ("tags", ["port"]),
    ]:
        changed = clean_story({**base, name: other})
        assert payload_hash(changed) != digest, name
    assert payload_hash(clean_story(dict(reversed(list(base.items()))))) == digest


def test_story_payload__empty_optional_fields_are_left_out():
    payload = clean_story({"title": "T", "body": "B", "standfirst": "  ", "byline": "", "section": None, "tags": ""})

    assert payload == {"title": "T", "body": "B"}


def test_story_payload__crlf_from_a_browser_textarea_is_stored_as_lf():
    assert clean_story({"title": "T", "body": "One.\r\n\r\nTwo."})["body"] == "One.\n\nTwo."


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"title": "", "body": "B"}, "Headline is required."),
        ({"body": "B"}, "Headline is required."),
        ({"title": "T", "body": " "}, "Body is required."),
        ({"title": "T\nU", "body": "B"}, "Headline must be a single line."),
        ({"title": "T", "body": "B", "byline": "A\nB"}, "Byline must be a single line."),
        ({"title": "T", "body": "B", "standfirst": "S" * 501}, "Standfirst is 501 characters long; the limit is 500."),
        ({"title": "T", "body": "B", "section": 7}, "Section must be text."),
        ({"title": "T", "body": "B", "tags": 7}, "Tags must be a list of words or a comma-separated line."),
        ({"title": "T", "body": "B", "tags": ["a", 1]}, "Each tag must be text."),
        ({"title": "T", "body": "B", "tags": ["a,b"]}, "The tag 'a,b' contains a comma; commas separate tags."),
        ({"title": "T", "body": "B", "tags": [f"t{n}" for n in range(21)]}, "A story has 21 tags; the limit is 20."),
    ],
)
def test_story_payload__bad_field__refused_naming_the_field(values, message):
    with pytest.raises(InvalidInput) as refused:
        clean_story(values)

    assert refused.value.message == message


def test_clean_tags__comma_line_trimmed_and_repeats_once_in_any_case():
    assert clean_tags(" port, Labour ,, labour,PORT ,strike") == ["port", "Labour", "strike"]


def test_story_fields__old_revision_reads_with_empty_new_fields():
    assert story_fields({"title": "T", "body": "B"}) == {
        "title": "T",
        "standfirst": "",
        "body": "B",
        "byline": "",
        "section": "",
        "tags": [],
    }


def test_render_markdown__renders_the_markup_a_newsroom_writes():
    html = render_markdown(
        "## Port\n\nThe port is **closed** and *quiet*.\n\n- one\n- two\n\n[Source](https://example.org/a)"
    )

    assert "<h2>Port</h2>" in html
    assert "<strong>closed</strong>" in html and "<em>quiet</em>" in html
    assert "<li>one</li>" in html
    assert '<a href="https://example.org/a" rel="noopener noreferrer nofollow">Source</a>' in html


@pytest.mark.parametrize("hostile", HOSTILE)
def test_sanitized_markdown__hostile_markup_in_every_field_never_renders_as_markup(hostile):
    payload = hostile_story(hostile)

    rendered = render_story(payload)

    assert_harmless(rendered["content_html"])
    # The other fields are text: they stay as typed, and every template escapes them.
    assert rendered["title"] == f"Headline {hostile}"
    assert hostile in rendered["excerpt"]


def test_excerpt__the_first_paragraph_as_text__references_decoded_not_escaped_twice():
    rendered = render_story({"title": "T", "body": "Fish & chips cost *less* than <b>5</b>.\n\nMore."})

    assert rendered["excerpt"] == "Fish & chips cost less than <b>5</b>."


def test_html_paragraphs__a_sites_html_as_plain_text_paragraphs():
    markup = (
        "<p>Dockers <strong>walked</strong> out &amp; ships wait.</p>\n<p>Talks on<br>Tuesday.</p>"
        "<ul><li>One</li><li>Two</li></ul><script>alert(1)</script>Plain\n\ntext stays."
    )

    assert (
        html_paragraphs(markup)
        == "Dockers walked out & ships wait.\n\nTalks on\n\nTuesday.\n\nOne\n\nTwo\n\nPlain\n\ntext stays."
    )


@pytest.mark.parametrize("hostile", HOSTILE)
def test_body_text__hostile_markup_is_text_a_reader_sees__never_markup(hostile):
    text = body_text({"title": "T", "body": f"Body {hostile}"})

    assert "Body" in text
    assert_harmless(html.escape(text))
