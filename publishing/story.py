"""A story's fields: what a revision's payload holds, how each is checked, and how it reads rendered.

A payload is the canonical JSON of docs/architecture.md#payload-hash. `title` (the headline) and
`body` (Markdown) are always there; the optional fields (standfirst, byline, section, tags) are
left out when empty, so a story that has only a headline and a body — every revision written
before structured stories — keeps exactly its payload and its hash. docs/editorial.md#story
describes the fields for editors.

The body is Markdown rendered by markdown-it-py with raw HTML switched off, then cleaned by nh3:
nothing an editor types reaches a reader as markup of their own making.

A revision of a published brief may be a **correction** (docs/editorial.md#corrections): the payload then
also holds `"correction": true` and the public `correction_note`, both hashed; a revision that is no
correction has neither key, so its payload and hash are what they always were.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import nh3
from django.conf import settings
from markdown_it import MarkdownIt

from publishing.errors import InvalidInput
from publishing.validation import clean_text

TITLE_MAX_CHARS = 200
STANDFIRST_MAX_CHARS = 500
BYLINE_MAX_CHARS = 200
SECTION_MAX_CHARS = 80
TAG_MAX_CHARS = 50
TAGS_MAX = 20
CORRECTION_NOTE_MAX_CHARS = 1000
CORRECTION_LABEL = "This is a correction"
CORRECTION_NOTE_LABEL = "Correction note"
CORRECTION_KEYS = ("correction", "correction_note")


@dataclass(frozen=True)
class StoryField:
    """One field of a story, in the order editors see them."""

    name: str
    label: str
    max_chars: int
    required: bool
    multiline: bool = False
    help: str = ""


def _body_max_chars() -> int:
    return int(settings.GALLEY_MAX_BODY_CHARS)


TEXT_FIELDS: tuple[StoryField, ...] = (
    StoryField("title", "Headline", TITLE_MAX_CHARS, required=True),
    StoryField(
        "standfirst",
        "Standfirst",
        STANDFIRST_MAX_CHARS,
        required=False,
        multiline=True,
        help="One or two sentences under the headline; the website shows it as the excerpt.",
    ),
    StoryField("body", "Body", 0, required=True, multiline=True, help="Markdown: blank line between paragraphs."),
    StoryField("byline", "Byline", BYLINE_MAX_CHARS, required=False, help="Who wrote it, as readers see it."),
    StoryField("section", "Section", SECTION_MAX_CHARS, required=False),
)
TAGS_LABEL = "Tags"
OPTIONAL_FIELDS = ("standfirst", "byline", "section", "tags")
STORY_KEYS = ("title", "standfirst", "body", "byline", "section", "tags")


def max_chars(field: StoryField) -> int:
    """The most characters `field` may hold (the body's limit is a setting)."""
    return _body_max_chars() if field.name == "body" else field.max_chars


def clean_tags(value: Any) -> list[str]:
    """Tags from a list or a comma-separated line: trimmed, blank ones dropped, repeats (any case) once."""
    if value is None:
        return []
    if isinstance(value, str):
        items: Iterable[Any] = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise InvalidInput("Tags must be a list of words or a comma-separated line.")
    tags: list[str] = []
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            raise InvalidInput("Each tag must be text.")
        tag = clean_text(item, field="A tag", max_chars=TAG_MAX_CHARS, required=False)
        if "," in tag:
            raise InvalidInput(f"The tag {tag!r} contains a comma; commas separate tags.")
        if tag and tag.casefold() not in seen:
            seen.add(tag.casefold())
            tags.append(tag)
    if len(tags) > TAGS_MAX:
        raise InvalidInput(f"A story has {len(tags)} tags; the limit is {TAGS_MAX}.")
    return tags


def clean_story(values: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of a story from an editor's (or the API's) values; InvalidInput names the field to fix.

    Missing optional fields are empty; empty ones are left out of the payload (module docstring).
    """
    payload: dict[str, Any] = {}
    for field in TEXT_FIELDS:
        value = values.get(field.name, "")
        if value is None and not field.required:
            value = ""
        text = clean_text(value, field=field.label, max_chars=max_chars(field), required=field.required)
        if not field.multiline and "\n" in text:
            raise InvalidInput(f"{field.label} must be a single line.")
        if text:
            payload[field.name] = text
    tags = clean_tags(values.get("tags"))
    if tags:
        payload["tags"] = tags
    return payload


def correction_mark(value: Any) -> bool:
    """Whether `value` marks a correction: True or the form's "1"; False, None or "" do not. Anything
    else is a damaged or forged form (InvalidInput)."""
    if value is True or value == "1":
        return True
    if value in (False, None, ""):
        return False
    raise InvalidInput("The correction mark sent is not one this form makes; nothing was saved. Reload the page.")


def clean_correction_note(value: Any, *, required: bool) -> str:
    """The public correction note as typed (line ends as LF), within CORRECTION_NOTE_MAX_CHARS."""
    note = clean_text(
        "" if value is None else value,
        field=CORRECTION_NOTE_LABEL,
        max_chars=CORRECTION_NOTE_MAX_CHARS,
        required=False,
    )
    if required and not note:
        raise InvalidInput("A correction needs its public correction note: say what was wrong and what is right now.")
    return note


def clean_correction(mark: Any, note: Any) -> dict[str, Any]:
    """The payload's correction part: {} for a revision that is no correction (its payload as ever),
    else {"correction": True, "correction_note": note}. Refused (InvalidInput): a mark without a note, an
    oversized note, and a note without the mark (a public text nobody would see as a correction)."""
    marked = correction_mark(mark)
    text = clean_correction_note(note, required=marked)
    if not marked:
        if text:
            raise InvalidInput(
                f"A correction note was given, but the revision is not marked as a correction (“{CORRECTION_LABEL}”): "
                "mark it as one, or leave the note out."
            )
        return {}
    return {"correction": True, "correction_note": text}


def correction_note(payload: Mapping[str, Any]) -> str:
    """The public note of a correction's payload; "" for a revision that is no correction."""
    if payload.get("correction") is not True:
        return ""
    return str(payload.get("correction_note", ""))


def story_fields(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of a stored payload, empty where it is absent (revisions from before structured stories)."""
    fields: dict[str, Any] = {name: str(payload.get(name, "") or "") for name in STORY_KEYS if name != "tags"}
    tags = payload.get("tags")
    fields["tags"] = [str(tag) for tag in tags] if isinstance(tags, list) else []
    return fields


def draft_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """What a working draft holds (story_fields, and the correction mark and note as typed), from a
    draft's story or a revision's payload: a draft started from a correction is still marked one."""
    return {
        **story_fields(values),
        "correction": values.get("correction") is True,
        "correction_note": str(values.get("correction_note", "") or ""),
    }


_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "a", "ul", "ol", "li",
    "blockquote", "code", "pre", "img",
}  # fmt: skip
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "ol": {"start"}}
_URL_SCHEMES = {"http", "https", "mailto"}


def render_markdown(text: str) -> str:
    """A body's Markdown as sanitized HTML: raw HTML is shown as text, links keep only safe schemes."""
    unsafe = _MARKDOWN.render(text)
    return nh3.clean(
        unsafe,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes=_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    ).strip()


def html_text(markup: str) -> str:
    """The text a reader sees in `markup`: every tag dropped (scripts and styles with their content),
    character references decoded. Plain text, never to be put into HTML unescaped."""
    return html.unescape(nh3.clean(markup, tags=set())).strip()


# Where a block of HTML ends: a paragraph break in the text (html_paragraphs).
_BLOCK_END = re.compile(r"</(?:p|div|li|h[1-6]|blockquote|pre|tr|figure)\s*>|<br\s*/?>|<hr\s*/?>", re.IGNORECASE)
_BLANK_LINES = re.compile(r"\n\s*\n+")


def html_paragraphs(markup: str) -> str:
    """A site's HTML (or the plain text a CMS stores with blank lines) as plain-text paragraphs, one
    blank line between them: what a body taken from a website may hold, never its markup."""
    text = html_text(_BLOCK_END.sub("\n\n", markup))
    paragraphs = (" ".join(part.split()) for part in _BLANK_LINES.split(text))
    return "\n\n".join(part for part in paragraphs if part)


def body_text(payload: Mapping[str, Any]) -> str:
    """The body as a reader sees its text once rendered (what a published page must show)."""
    return html_text(render_markdown(str(story_fields(payload)["body"])))


def excerpt(payload: Mapping[str, Any]) -> str:
    """What a channel shows under the headline: the standfirst, else the body's first paragraph as text."""
    fields = story_fields(payload)
    if fields["standfirst"]:
        return str(fields["standfirst"])
    first = next((part.strip() for part in str(fields["body"]).split("\n\n") if part.strip()), "")
    return html_text(render_markdown(first))


def render_story(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The story as the default channel renders it: what the preview shows and what a target receives.

    `content_html` is the body only; the headline, standfirst and byline are fields of their own
    so a channel places them in its own markup.
    """
    fields = story_fields(payload)
    return {
        "title": fields["title"],
        "excerpt": excerpt(payload),
        "content_html": render_markdown(str(fields["body"])),
        "byline": fields["byline"],
        "section": fields["section"],
        "tags": fields["tags"],
    }
