"""Word-level differences between two revision payloads, for people to read. Pure: no I/O.

Text is compared in two passes: lines first (so an unchanged paragraph costs one comparison),
then, inside each run of changed lines, tokens: a word, a run of whitespace, or any other single
character (punctuation, a symbol, one CJK character, since those scripts put no space between
words), each with the combining marks and emoji joiners that belong to it. difflib's automatic
junk heuristic is off: it treats tokens in more than 1% of a long text (spaces, "the") as never
matching, which shows every space as changed.

The segments of a field always add up to the two texts: equal and deleted segments give the old
text, equal and inserted ones the new text.
"""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.utils.safestring import SafeString, mark_safe

from publishing.story import STORY_KEYS, TAGS_LABEL, TEXT_FIELDS, story_fields

# Han, kana and the CJK symbols and punctuation around them: each character is a token.
_CJK = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
# Combining marks, variation selectors and skin tones stay with the character before them (inside
# a word too); a zero-width joiner takes the next character along (emoji sequences).
_MARKS = "(?:[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe00-\ufe0f\U0001f3fb-\U0001f3ff]|\u200d.)"
_WORD = rf"[^\W{_CJK}](?:[^\W{_CJK}]|{_MARKS})*"
TOKEN = re.compile(rf"(?:[{_CJK}]|{_WORD}|\s+|.){_MARKS}*", re.DOTALL)

# Past this many token pairs between the first and the last changed token of a run of changed
# lines, difflib's cost (quadratic at worst) would hold a page for a second or more: that stretch
# is shown as deleted and inserted whole.
MAX_TOKEN_PAIRS = 1_000_000
# An unchanged stretch this short between two changes, and only whitespace or punctuation, is
# folded into the change: "<del>walked out</del><ins>returned at noon</ins>", not a word salad.
_GLUE = re.compile(r"\W{1,3}")

Kind = Literal["equal", "delete", "insert"]
_LABELS = {field.name: field.label for field in TEXT_FIELDS} | {"tags": TAGS_LABEL}


@dataclass(frozen=True)
class Segment:
    kind: Kind
    text: str


@dataclass(frozen=True)
class FieldDiff:
    """One payload field, old against new."""

    name: str
    label: str
    segments: tuple[Segment, ...]

    @property
    def changed(self) -> bool:
        return any(segment.kind != "equal" for segment in self.segments)

    def inline_html(self) -> SafeString:
        """Both texts in one: deletions in <del>, insertions in <ins>, every character escaped."""
        return _html(self.segments, ("equal", "delete", "insert"))

    def old_html(self) -> SafeString:
        return _html(self.segments, ("equal", "delete"))

    def new_html(self) -> SafeString:
        return _html(self.segments, ("equal", "insert"))


@dataclass(frozen=True)
class PayloadDiff:
    old_label: str
    new_label: str
    fields: tuple[FieldDiff, ...]

    @property
    def changed(self) -> bool:
        return any(field.changed for field in self.fields)


def diff_payloads(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], *, old_label: str, new_label: str
) -> PayloadDiff:
    """Every story field in story order (publishing.story.STORY_KEYS), tags as one comma line; a field
    empty on both sides is left out. `old` None is "nothing before". Keys that are no story field are
    not compared: a payload holds only story fields (publishing.story.clean_story)."""
    before, after = story_fields(old or {}), story_fields(new)
    texts = [(name, _text(before[name]), _text(after[name])) for name in STORY_KEYS]
    return PayloadDiff(
        old_label=old_label,
        new_label=new_label,
        fields=tuple(
            FieldDiff(name, _LABELS[name], diff_text(old_text, new_text))
            for name, old_text, new_text in texts
            if old_text or new_text
        ),
    )


def diff_text(old: str, new: str) -> tuple[Segment, ...]:
    """The word-level segments that turn `old` into `new`, adjacent ones of one kind merged."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    pieces: list[Segment] = []
    lines = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in lines.get_opcodes():
        before, after = "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])
        if tag == "equal":
            pieces.append(Segment("equal", before))
        else:
            pieces.extend(_diff_words(before, after))
    return tuple(_merged(pieces))


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text)


def _diff_words(old: str, new: str) -> Iterator[Segment]:
    a, b = tokenize(old), tokenize(new)
    # A common start and end cost nothing to find and often leave only a few words to compare.
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    yield Segment("equal", "".join(a[:start]))
    a_middle, b_middle = a[start : len(a) - end], b[start : len(b) - end]
    if len(a_middle) * len(b_middle) > MAX_TOKEN_PAIRS:
        yield Segment("delete", "".join(a_middle))
        yield Segment("insert", "".join(b_middle))
    else:
        matcher = difflib.SequenceMatcher(None, a_middle, b_middle, autojunk=False)
        for tag, i1, i2, j1, j2 in _glued(matcher.get_opcodes(), a_middle):
            if tag == "equal":
                yield Segment("equal", "".join(a_middle[i1:i2]))
            else:
                yield Segment("delete", "".join(a_middle[i1:i2]))
                yield Segment("insert", "".join(b_middle[j1:j2]))
    yield Segment("equal", "".join(a[len(a) - end :]))


def _glued(opcodes: Sequence[tuple[str, int, int, int, int]], a: list[str]) -> list[tuple[str, int, int, int, int]]:
    """Fold short whitespace or punctuation between two changes into one change."""
    out: list[tuple[str, int, int, int, int]] = []
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        between_changes = 0 < index < len(opcodes) - 1 and out and out[-1][0] != "equal"
        if tag == "equal" and between_changes and _GLUE.fullmatch("".join(a[i1:i2])):
            tag = "replace"
        if tag != "equal" and out and out[-1][0] != "equal":
            _last, i0, _i, j0, _j = out.pop()
            i1, j1 = i0, j0
            tag = "replace"
        out.append((tag, i1, i2, j1, j2))
    return out


def _merged(pieces: list[Segment]) -> list[Segment]:
    """Drop empty segments and join neighbours of one kind; a deletion always comes before its insertion."""
    out: list[Segment] = []
    pending: dict[Kind, list[str]] = {"delete": [], "insert": []}

    def add(kind: Kind, text: str) -> None:
        if out and out[-1].kind == kind:
            out[-1] = Segment(kind, out[-1].text + text)
        else:
            out.append(Segment(kind, text))

    def flush() -> None:
        for kind in ("delete", "insert"):
            if pending[kind]:
                add(kind, "".join(pending[kind]))
                pending[kind] = []

    for piece in pieces:
        if not piece.text:
            continue
        if piece.kind == "equal":
            flush()
            add("equal", piece.text)
        else:
            pending[piece.kind].append(piece.text)
    flush()
    return out


_TAGS = {"delete": "del", "insert": "ins"}


def _html(segments: tuple[Segment, ...], kinds: tuple[Kind, ...]) -> SafeString:
    parts = []
    for segment in segments:
        if segment.kind not in kinds:
            continue
        text = html.escape(segment.text)
        parts.append(text if segment.kind == "equal" else f"<{_TAGS[segment.kind]}>{text}</{_TAGS[segment.kind]}>")
    return mark_safe("".join(parts))  # noqa: S308 - every piece of text above is escaped


def _text(value: str | list[str]) -> str:
    return ", ".join(value) if isinstance(value, list) else value
