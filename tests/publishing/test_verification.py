"""The page check of docs/invariants.md#i10: the permalink's text must show the approved title, up to the
typography a CMS applies, and nothing else counts."""

from __future__ import annotations

import pytest

from publishing.verification import shows_body, shows_title


@pytest.mark.parametrize(
    ("page_text", "title"),
    [
        ("Harbour strike Dockers walked out at dawn.", "Harbour strike"),
        # WordPress's wptexturize: curly quotes, en and em dashes, ellipsis, no-break spaces.
        ("Don\u2019t \u201cstop\u201d \u2013 the strike\u2026 goes\u00a0on", 'Don\'t "stop" -- the strike... goes on'),
        ("Wages \u2014 and   hours", "Wages --- and hours"),
        ("<script> is shown as text", "<script> is shown as text"),
    ],
)
def test_done_means_observed__page_shows_approved_title__up_to_typography(page_text, title):
    assert shows_title(page_text, title)


@pytest.mark.parametrize(
    ("page_text", "title"),
    [
        ("Ferry timetable Winter schedule.", "Harbour strike"),
        ("Harbour", "Harbour strike"),
        ("Harbour strikes back", "Harbour strike!"),
        ("", "Harbour strike"),
    ],
)
def test_done_means_observed__page_without_approved_title__not_shown(page_text, title):
    assert not shows_title(page_text, title)


# (page text, the body rendered as text, the body as typed)
SHOWN_BODIES = [
    # The body rendered from Markdown: the page's markup splits the text at every element.
    ("Harbour strike Dockers  walked  out. Ships wait", "Dockers walked out.\n\nShips wait", "Dockers *walked* out."),
    ("Fish & chips \u2013 \u201ccheap\u201d", 'Fish & chips -- "cheap"', "Fish & chips -- *cheap*"),
    # A target that shows the body as typed (an older one): the Markdown source is on the page.
    ("Harbour strike Dockers *walked* out.", "Dockers walked out.", "Dockers *walked* out."),
]


@pytest.mark.parametrize(("page_text", "rendered", "source"), SHOWN_BODIES)
def test_done_means_observed__page_shows_the_body__rendered_or_as_typed(page_text, rendered, source):
    assert shows_body(page_text, rendered=rendered, source=source)


def test_done_means_observed__page_without_the_body__not_shown():
    assert not shows_body("Harbour strike Dockers walked", rendered="Dockers walked out.", source="Dockers walked out.")
