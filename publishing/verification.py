"""What counts as a published page showing the article (docs/invariants.md#i10), with no I/O.

The target protocol defines no markup on the permalink page (docs/target-protocol.md#permalink),
only that it shows the article's title and body; so the page is read as text, and the approved title
and the body's text must stand in it.
"""

from __future__ import annotations

import re
import unicodedata

# What a CMS does to a title on its way to the page (WordPress's wptexturize, for one): typographic
# quotes, dashes and ellipses, and runs of white space. The comparison undoes exactly these.
_TYPOGRAPHY = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u2032", "'"),  # single quotes, prime
        **dict.fromkeys("\u201c\u201d\u201e\u2033", '"'),  # double quotes, double prime
        **dict.fromkeys("\u2010\u2011\u2013\u2014", "-"),  # hyphen, non-breaking hyphen, en and em dash
        "\u00a0": " ",  # no-break space
        "\u2026": "...",  # ellipsis
    }
)
_SPACE = re.compile(r"\s+")
_DASHES = re.compile(r"-+")


def _normalized(text: str) -> str:
    text = unicodedata.normalize("NFC", text).translate(_TYPOGRAPHY)
    return _SPACE.sub(" ", _DASHES.sub("-", text)).strip()


def shows_title(page_text: str, title: str) -> bool:
    """Whether the page's text shows `title`, up to the typography a CMS applies (docs/invariants.md#i10)."""
    return _normalized(title) in _normalized(page_text)


def _unspaced(text: str) -> str:
    return _SPACE.sub("", _normalized(text))


def shows_body(page_text: str, *, rendered: str, source: str) -> bool:
    """Whether the page's text shows the body: as rendered from Markdown (`rendered`, its text), or as
    its source (a target that shows the body as typed, as older ones do). White space is ignored
    altogether, since a page's markup splits and joins text at every element boundary, and the
    typography a CMS applies is undone as for the title."""
    page = _unspaced(page_text)
    return _unspaced(rendered) in page or _unspaced(source) in page
