"""The summary pipeline's pure rules (publishing/summary_rules.py): the quality gate passes ordinary
news, whatever its topic, and refuses what it exists for (a provider's refusal or note to the reader,
echoed instructions, placeholders, a headline cut off mid-phrase); taking a suggestion changes only
what the editor took."""

from __future__ import annotations

import pytest

from publishing import story
from publishing.summary_rules import (
    HEADLINE_MAX_CHARS,
    STANDFIRST_MAX_CHARS,
    SuggestionTake,
    apply_suggestion,
    cut_off_ending,
    first_revision_payload,
    quality_problems,
    suggested_payload,
)

OUTLINE = "- Dockers walked out at dawn.\n- Ships are waiting offshore."
DRAFT = "Dockers walked out at dawn on Monday and ships are waiting offshore."
HEADLINE = "Dockers walk out over pay"


def artifacts(*, outline: str = OUTLINE, draft: str = DRAFT, headline: str = HEADLINE) -> dict[str, dict[str, str]]:
    return {"outline": {"text": outline}, "draft": {"text": draft}, "headline": {"text": headline}}


# --- ordinary news passes, whatever it is about ----------------------------------------------------

ORDINARY_NEWS = [
    # About language models, AI and prompts: the old gate refused any of these by keyword.
    "A consortium of universities released a large language model trained only on public-domain books. "
    "The researchers said the language model answers history questions as well as commercial chatbots.",
    "As an AI researcher, Dr. Amina Diallo has studied how prompts steer chatbots for a decade. "
    "She said the new rules would force companies to publish how their models are tested.",
    'The chatbot answered: "As an AI language model, I cannot vote." Critics said the reply was scripted.',
    "\"I'm sorry, but I can't help with that,\" the assistant told reporters who asked about the election.",
    "Teachers fear students will ask an AI to summarise the reading list instead of reading it. "
    "Here is the full statement the ministry published on Monday.",
    "The charity served as an aid to refugees for twenty years. Its founder said funding had run out.",
    "The minister was asked to summarise the findings; she declined and said the report would follow.",
    "I cannot help feeling that the harbour deserved better. The new bridge was opened without a single speech.",
    # Not English.
    "Mieszkańcy Gdańska protestowali w sobotę przeciwko budowie spalarni. "
    "Według organizatorów przyszło trzy tysiące osób.",
    "Ribuan nelayan berunjuk rasa di depan kantor gubernur pada hari Senin "
    "untuk menuntut harga solar yang lebih murah.",
    "Nach dem Hochwasser hat die Stadt Dresden die Sperrung der Altstadt aufgehoben.",
]


@pytest.mark.parametrize("draft", ORDINARY_NEWS)
def test_quality_gate__ordinary_news__passes_whatever_its_topic(draft):
    outline = "\n".join(f"- {line}" for line in draft.split(". "))
    assert quality_problems(artifacts(outline=outline, draft=draft)) == []


@pytest.mark.parametrize(
    "headline",
    [
        "Universities release a language model trained on public-domain books",
        "As an AI researcher, Diallo warns about untested chatbots",
        "Talks are back on",
        "Results are in",
        "Harbour strike is over",
        "Council picks Plan A",
        "Ceasefire backed by UN",
        "Is the harbour bridge safe?",
        "Who pays for the new bridge?",
        "Dockers walk out, ships wait",
        "Mieszkańcy Gdańska protestują przeciwko spalarni",
        "Nelayan menuntut harga solar yang lebih murah",
        "Die Altstadt ist wieder offen",
        "Sperrung aufgehoben (vorerst)",
        "x" * HEADLINE_MAX_CHARS,
    ],
)
def test_quality_gate__complete_headline__passes(headline):
    assert cut_off_ending(headline) is None
    assert quality_problems(artifacts(headline=headline)) == []


# --- what the gate exists for ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "text", "found"),
    [
        # A provider refusing, or speaking for itself instead of the story.
        ("draft", "As an AI language model, I cannot write about an ongoing strike.", "As an AI language model, I"),
        ("draft", "As an AI, I can't verify these claims.", "As an AI, I"),
        ("draft", "As an AI language model, here is the draft you asked for.", "As an AI language model, here"),
        ("draft", "Dockers walked out. As an AI assistant, my knowledge ends in 2023.", "As an AI assistant, my"),
        ("draft", "I'm sorry, but I can't help with that request.", "I'm sorry, but I can't"),
        ("draft", "I\u2019m sorry, but I cannot summarise this material.", "I\u2019m sorry, but I cannot"),
        ("draft", "I cannot fulfil this request because it concerns a real person.", "I cannot fulfil"),
        (
            "outline",
            "- As an AI language model, I do not have opinions.\n- Ships wait.",
            "- As an AI language model, I",
        ),
        ("headline", "I am unable to write a headline", "I am unable to write"),
        # A preamble addressed to whoever wrote the prompt.
        ("draft", "Sure! Here is a summary of the news story: dockers walked out.", "Sure! Here is"),
        (
            "draft",
            "Here is a short summary of the article: dockers walked out at dawn.",
            "Here is a short summary of the article:",
        ),
        ("draft", "Here's the draft you asked for. Dockers walked out at dawn.", "Here's the draft you asked for"),
        # The instructions echoed, placeholders, filler.
        ("draft", "You write the draft: a short news summary. Dockers walked out.", "You write the draft"),
        ("outline", "Summarize the following:\n- Dockers walked out.", "Summarize the following"),
        ("draft", "{{company}} confirmed that dockers walked out at dawn.", "{{"),
        ("draft", "[Insert quote from the union] Dockers walked out at dawn.", "[Insert"),
        ("draft", "Dockers walked out at dawn.<|im_end|>", "<|"),
        ("draft", "Lorem ipsum dolor sit amet, consectetur adipiscing.", "Lorem ipsum"),
    ],
)
def test_quality_gate__provider_refusal_or_leftover_prompt__refused_precisely(field, text, found):
    problems = quality_problems({**artifacts(), field: {"text": text}})
    assert problems == [f"the {field} contains leftover prompt text ({found!r})"]


@pytest.mark.parametrize(
    ("headline", "ending"),
    [
        ("Residents criticised the lack of a cycling lane along", "along"),
        ("Council approves budget that raises taxes for the", "the"),
        ("Dockers walk out and", "and"),
        ("Union leaders demand a pay rise of", "of"),
        ("Dockers Walk Out Over Pay At The", "The"),
        ("Update 3: Dockers walked out at", "at"),
        ("Port reopens after strike,", ","),
        ("Talks resume on Monday:", ":"),
        ("Talks resume on Monday -", "-"),
        ("Talks resume on Monday\u2026", "\u2026"),
        ("Talks resume on Monday...", "..."),
        ("Minister says deal is (almost", "an unclosed ("),
        ('Union says "we will not', 'an unclosed "'),
        ("Mieszkańcy protestują w", "w"),
        ("Nelayan berunjuk rasa di", "di"),
        ("Die Stadt hebt die Sperrung der", "der"),
    ],
)
def test_quality_gate__headline_cut_off_mid_phrase__refused_with_its_ending(headline, ending):
    assert cut_off_ending(headline) == ending
    assert quality_problems(artifacts(headline=headline)) == [f"the headline looks cut off: it ends with {ending!r}"]


def test_quality_gate__headline_too_long_or_two_lines__one_problem_each():
    assert quality_problems(artifacts(headline="x" * (HEADLINE_MAX_CHARS + 1))) == [
        f"the headline must be one line of at most {HEADLINE_MAX_CHARS} characters"
    ]
    assert quality_problems(artifacts(headline="Dockers walk out\nShips wait")) == [
        f"the headline must be one line of at most {HEADLINE_MAX_CHARS} characters"
    ]


# --- the brief's title, and what an editor takes ---------------------------------------------------


def test_first_revision_payload__a_run_from_before_the_standfirst_step__the_editors_title_and_the_draft():
    payload = first_revision_payload(artifacts(), title="Harbour strike")
    assert payload == story.clean_story(payload) == {"title": "Harbour strike", "body": DRAFT}


def test_suggested_payload__a_run_from_before_the_standfirst_step__the_headline_and_the_draft():
    assert suggested_payload(artifacts(headline=f"  {HEADLINE} ")) == {"title": HEADLINE, "body": DRAFT}


@pytest.mark.parametrize(
    ("take", "expected"),
    [
        (SuggestionTake.HEADLINE, {"title": HEADLINE, "body": "Edited by hand."}),
        (SuggestionTake.DRAFT, {"title": "Harbour strike", "body": DRAFT}),
        (SuggestionTake.BOTH, {"title": HEADLINE, "body": DRAFT}),
    ],
)
def test_apply_suggestion__changes_only_what_was_taken(take, expected):
    current = {"title": "Harbour strike", "body": "Edited by hand."}
    assert apply_suggestion(current, artifacts(), take=take) == expected
    assert current == {"title": "Harbour strike", "body": "Edited by hand."}


STANDFIRST = "Ships wait offshore as the union and the port authority prepare for talks."


def with_standfirst(standfirst: str = STANDFIRST) -> dict[str, dict[str, str]]:
    return {**artifacts(), "standfirst": {"text": standfirst}}


def test_quality_gate__bounds_are_the_storys():
    assert (HEADLINE_MAX_CHARS, STANDFIRST_MAX_CHARS) == (story.TITLE_MAX_CHARS, story.STANDFIRST_MAX_CHARS)


def test_first_revision_payload__fills_the_standfirst_and_the_markdown_body():
    payload = first_revision_payload(with_standfirst(f" {STANDFIRST}\n"), title="Harbour strike")
    assert (
        payload
        == story.clean_story(payload)
        == {
            "title": "Harbour strike",
            "standfirst": STANDFIRST,
            "body": DRAFT,
        }
    )


def test_suggested_payload__the_headline_the_standfirst_and_the_draft():
    assert suggested_payload(with_standfirst()) == {"title": HEADLINE, "standfirst": STANDFIRST, "body": DRAFT}


@pytest.mark.parametrize(
    ("take", "expected"),
    [
        (SuggestionTake.HEADLINE, {"title": HEADLINE, "standfirst": "The editor's dek.", "body": "Edited by hand."}),
        (SuggestionTake.DRAFT, {"title": "Harbour strike", "standfirst": "The editor's dek.", "body": DRAFT}),
        (SuggestionTake.BOTH, {"title": HEADLINE, "standfirst": STANDFIRST, "body": DRAFT}),
    ],
)
def test_apply_suggestion__the_standfirst_only_with_the_whole_suggestion__byline_and_tags_stay(take, expected):
    current = {
        "title": "Harbour strike",
        "standfirst": "The editor's dek.",
        "body": "Edited by hand.",
        "byline": "Ana Lopes",
        "tags": ["port"],
    }
    assert apply_suggestion(current, with_standfirst(), take=take) == {
        **expected,
        "byline": "Ana Lopes",
        "tags": ["port"],
    }


def test_apply_suggestion__a_run_without_a_standfirst_keeps_the_editors():
    current = {"title": "Harbour strike", "standfirst": "The editor's dek.", "body": "Edited by hand."}
    assert apply_suggestion(current, artifacts(), take=SuggestionTake.BOTH) == {
        "title": HEADLINE,
        "standfirst": "The editor's dek.",
        "body": DRAFT,
    }


def test_quality_gate__standfirst_too_long_or_leftover_prompt__refused():
    assert quality_problems(with_standfirst("x" * (STANDFIRST_MAX_CHARS + 1))) == [
        f"the standfirst has {STANDFIRST_MAX_CHARS + 1} characters; at most {STANDFIRST_MAX_CHARS} are allowed"
    ]
    assert quality_problems(with_standfirst("You write the standfirst: ships wait.")) == [
        "the standfirst contains leftover prompt text ('You write the standfirst')"
    ]
    assert quality_problems(artifacts()) == []
