"""publishing.diffs: word-level differences, as pure functions (no database)."""

from __future__ import annotations

import time

import pytest

from publishing.diffs import MAX_TOKEN_PAIRS, FieldDiff, Segment, diff_payloads, diff_text, tokenize


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
    field = FieldDiff("title", "Title", diff_text("Plain", '<img src=x onerror="x()">'))

    assert field.inline_html() == "<del>Plain</del><ins>&lt;img src=x onerror=&quot;x()&quot;&gt;</ins>"


def test_diff_payloads__title_and_body_separately_then_other_fields_by_name():
    diff = diff_payloads(
        {"title": "Harbour strike", "body": "Dockers walked out."},
        {"title": "Harbour strike ends", "body": "Dockers walked out.", "standfirst": "Talks"},
        old_label="revision 1",
        new_label="revision 2",
    )

    assert [(field.name, field.label, field.changed) for field in diff.fields] == [
        ("title", "Title", True),
        ("body", "Body", False),
        ("standfirst", "Standfirst", True),
    ]
    assert _changes(diff.fields[0].segments) == [("insert", " ends")]
    assert (diff.old_label, diff.new_label, diff.changed) == ("revision 1", "revision 2", True)


def test_diff_payloads__nothing_before__all_inserted():
    diff = diff_payloads(None, {"title": "T", "body": "B"}, old_label="(nothing)", new_label="revision 1")

    assert [_changes(field.segments) for field in diff.fields] == [[("insert", "T")], [("insert", "B")]]


def test_diff_payloads__same_payload__no_change():
    payload = {"title": "T", "body": "B"}

    assert not diff_payloads(payload, dict(payload), old_label="a", new_label="b").changed
