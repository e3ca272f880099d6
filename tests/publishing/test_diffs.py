"""publishing.diffs: word-level differences, as pure functions (no database)."""

from __future__ import annotations

import time
from html import escape

import pytest

from publishing.diffs import MAX_TOKEN_PAIRS, FieldDiff, Segment, diff_payloads, diff_text, tokenize
from publishing.story import STORY_KEYS
from tests.publishing.test_story import HOSTILE, Elements


def _sides(segments: tuple[Segment, ...]) -> tuple[str, str]:
    old = "".join(segment.text for segment in segments if segment.kind != "insert")
    new = "".join(segment.text for segment in segments if segment.kind != "delete")
    return old, new


def _changes(segments: tuple[Segment, ...]) -> list[tuple[str, str]]:
    return [(segment.kind, segment.text) for segment in segments if segment.kind != "equal"]


def test_diff_text__changed_words__marked_as_whole_words_with_the_rest_equal():
    segments = diff_text("Dockers walked out at dawn.", "Dockers returned at noon.")

    assert _changes(segments) == [
        ("delete", "walked out"),
        ("insert", "returned"),
        ("delete", "dawn"),
        ("insert", "noon"),
    ]
    assert segments[0] == Segment("equal", "Dockers ")
    assert segments[-1] == Segment("equal", ".")


def test_diff_text__one_word_in_a_later_line__earlier_lines_equal():
    old = "Dockers walked out at dawn.\nThe port is closed."
    new = "Dockers walked out at dawn.\nThe port is open again."

    segments = diff_text(old, new)

    assert segments[0] == Segment("equal", "Dockers walked out at dawn.\nThe port is ")
    assert _changes(segments) == [("delete", "closed"), ("insert", "open again")]


def test_diff_text__punctuation__a_token_of_its_own():
    segments = diff_text("Hello, world!", "Hello; world?")

    assert _changes(segments) == [("delete", ","), ("insert", ";"), ("delete", "!"), ("insert", "?")]


def test_tokenize__words_whitespace_punctuation_cjk_and_emoji_sequences():
    assert tokenize("Port closed,  again!") == ["Port", " ", "closed", ",", "  ", "again", "!"]
    assert tokenize("東京は晴れ") == ["東", "京", "は", "晴", "れ"]
    # A combining accent and a zero-width-joined emoji family stay with their character.
    assert tokenize("nai\u0308ve 👨\u200d👩\u200d👧 👍🏽") == ["nai\u0308ve", " ", "👨\u200d👩\u200d👧", " ", "👍🏽"]


@pytest.mark.parametrize(
    ("old", "new", "changes"),
    [
        ("café au lait", "cafe au lait", [("delete", "café"), ("insert", "cafe")]),
        ("東京は晴れ", "東京は雨", [("delete", "晴れ"), ("insert", "雨")]),
        ("Thumbs 👍🏽 up", "Thumbs 👍🏿 up", [("delete", "👍🏽"), ("insert", "👍🏿")]),
        ("Straße gesperrt", "Straße offen", [("delete", "gesperrt"), ("insert", "offen")]),
    ],
)
def test_diff_text__unicode__changes_at_character_and_word_boundaries(old, new, changes):
    segments = diff_text(old, new)

    assert _changes(segments) == changes
    assert _sides(segments) == (old, new)


def test_diff_text__very_long_unbroken_word__one_token_changed_whole_and_fast():
    old, new = "x" * 50_000, "x" * 49_999 + "y"
    started = time.monotonic()

    segments = diff_text(f"Before {old} after", f"Before {new} after")

    assert time.monotonic() - started < 1
    assert _changes(segments) == [("delete", old), ("insert", new)]


def test_diff_text__long_paragraph_changed_everywhere__shown_replaced_whole_not_computed_for_seconds():
    words = [f"word{index % 97}" for index in range(3_000)]
    old = " ".join(words)
    new = " ".join(word if index % 7 else "CHANGED" for index, word in enumerate(words))
    assert len(tokenize(old)) ** 2 > MAX_TOKEN_PAIRS
    started = time.monotonic()

    segments = diff_text(old, new)

    assert time.monotonic() - started < 2
    assert _sides(segments) == (old, new)


@pytest.mark.parametrize(("old", "new"), [("", ""), ("", "New body."), ("Old body.", "")])
def test_diff_text__empty_sides(old, new):
    segments = diff_text(old, new)

    assert _sides(segments) == (old, new)
    assert _changes(segments) == [(kind, text) for kind, text in (("delete", old), ("insert", new)) if text]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("a b c d e f", "a c b d f e"),
        ("Line one.\nLine two.\n\nLine three.", "Line one!\n\nLine 2.\nLine three."),
        ("  leading and trailing  ", "leading and trailing"),
        ("\r\nWindows\r\nlines\r\n", "\nWindows\nlines"),
    ],
)
def test_diff_text__segments_always_add_up_to_both_texts(old, new):
    assert _sides(diff_text(old, new)) == (old, new)


def test_html__script_in_text__escaped_in_every_view():
    field = FieldDiff("body", "Body", diff_text("<script>alert(1)</script> & more", "<script>alert(2)</script> & more"))

    for html in (field.inline_html(), field.old_html(), field.new_html()):
        assert "<script>" not in html
        assert "&lt;script&gt;alert(" in html
        assert "&amp; more" in html
    assert field.inline_html() == "&lt;script&gt;alert(<del>1</del><ins>2</ins>)&lt;/script&gt; &amp; more"
    assert field.old_html() == "&lt;script&gt;alert(<del>1</del>)&lt;/script&gt; &amp; more"
    assert field.new_html() == "&lt;script&gt;alert(<ins>2</ins>)&lt;/script&gt; &amp; more"


def test_html__markup_inside_a_change__escaped_inside_the_mark():
    field = FieldDiff("title", "Headline", diff_text("Plain", '<img src=x onerror="x()">'))

    assert field.inline_html() == "<del>Plain</del><ins>&lt;img src=x onerror=&quot;x()&quot;&gt;</ins>"


def test_diff_payloads__every_story_field_in_story_order_empty_on_both_sides_left_out():
    diff = diff_payloads(
        {"title": "Harbour strike", "body": "Dockers walked out.", "tags": ["port"]},
        {
            "title": "Harbour strike ends",
            "standfirst": "Talks",
            "body": "Dockers walked out.",
            "byline": "Ana Lima",
            "tags": ["port", "unions"],
        },
        old_label="revision 1",
        new_label="revision 2",
    )

    assert [(field.name, field.label, field.changed) for field in diff.fields] == [
        ("title", "Headline", True),
        ("standfirst", "Standfirst", True),
        ("body", "Body", False),
        ("byline", "Byline", True),
        ("tags", "Tags", True),
    ]
    assert _changes(diff.fields[0].segments) == [("insert", " ends")]
    assert (diff.old_label, diff.new_label, diff.changed) == ("revision 1", "revision 2", True)


def test_diff_payloads__tags__one_comma_line_with_the_added_tag_inserted():
    diff = diff_payloads(
        {"title": "T", "body": "B", "tags": ["port", "strike"]},
        {"title": "T", "body": "B", "tags": ["port", "unions", "strike"]},
        old_label="a",
        new_label="b",
    )

    tags = next(field for field in diff.fields if field.name == "tags")
    assert _sides(tags.segments) == ("port, strike", "port, unions, strike")
    assert tags.inline_html() == "port, <ins>unions, </ins>strike"


def test_diff_payloads__optional_field_removed__all_of_it_deleted():
    diff = diff_payloads(
        {"title": "T", "body": "B", "standfirst": "Talks broke down.", "section": "Business"},
        {"title": "T", "body": "B"},
        old_label="a",
        new_label="b",
    )

    assert [(field.name, _changes(field.segments)) for field in diff.fields if field.changed] == [
        ("standfirst", [("delete", "Talks broke down.")]),
        ("section", [("delete", "Business")]),
    ]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_diff_payloads__hostile_markup_in_every_field__escaped_in_every_view(hostile):
    def story(version: str) -> dict[str, object]:
        return {
            "title": f"Headline {version} {hostile}",
            "standfirst": f"Standfirst {version} {hostile}",
            "body": f"Body {version} {hostile}\n\n{hostile}",
            "byline": f"Byline {version} {hostile}",
            "section": f"Section {version} {hostile}",
            "tags": [f"tag {version} {hostile}".replace(",", " ")],
        }

    diff = diff_payloads(story("one"), story("two"), old_label="a", new_label="b")

    assert [field.name for field in diff.fields if field.changed] == list(STORY_KEYS)
    for field in diff.fields:
        typed = hostile.replace(",", " ") if field.name == "tags" else hostile
        for shown in (field.inline_html(), field.old_html(), field.new_html()):
            assert {tag for tag, _attrs in Elements(shown).found} <= {"del", "ins"}, shown
            assert escape(typed) in shown


def test_diff_payloads__nothing_before__all_inserted():
    diff = diff_payloads(None, {"title": "T", "body": "B"}, old_label="(nothing)", new_label="revision 1")

    assert [_changes(field.segments) for field in diff.fields] == [[("insert", "T")], [("insert", "B")]]


def test_diff_payloads__same_payload__no_change():
    payload = {"title": "T", "body": "B"}

    assert not diff_payloads(payload, dict(payload), old_label="a", new_label="b").changed
