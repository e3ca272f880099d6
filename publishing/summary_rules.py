"""The summary pipeline's rules, with no I/O: the steps and their order, what each AI step is
asked, the quality gate, and how the artifacts become the first revision or a suggestion.

outline → draft → headline → standfirst → quality gate
    → the first revision (the editor's title, the standfirst, the draft as the Markdown body)
      or a suggestion (when an editor wrote a revision first); the headline is always only suggested

A run stored before the standfirst step has no standfirst artifact: its suggestion is the headline
and the draft, as it always was (the quality gate and the payloads treat the standfirst as optional).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import TextChoices


class SummaryStep(TextChoices):
    OUTLINE = "outline", "Outline"
    DRAFT = "draft", "Draft"
    HEADLINE = "headline", "Headline"
    STANDFIRST = "standfirst", "Standfirst"
    QUALITY_GATE = "quality_gate", "Quality gate"


STEPS = [SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE, SummaryStep.STANDFIRST, SummaryStep.QUALITY_GATE]
NEXT_STEP: dict[str, SummaryStep] = dict(itertools.pairwise(STEPS))

# What each AI step is asked, and which earlier artifact (or the source, None) it works from.
INSTRUCTIONS = {
    SummaryStep.OUTLINE: ("You write the outline: the key points of the material, one per line.", None),
    SummaryStep.DRAFT: (
        "You write the draft: a short news summary from the outline, in Markdown, a blank line between paragraphs.",
        SummaryStep.OUTLINE,
    ),
    SummaryStep.HEADLINE: ("You write the headline: one line, no trailing period.", SummaryStep.DRAFT),
    SummaryStep.STANDFIRST: (
        "You write the standfirst: one or two plain sentences under the headline that tell the story.",
        SummaryStep.DRAFT,
    ),
}

DRAFT_MIN_CHARS = 20
DRAFT_MAX_CHARS = 20_000
HEADLINE_MAX_CHARS = 200
# publishing.story's bound for the standfirst, repeated because this module stays pure (no model
# imports); tests/publishing/test_summary_rules.py holds them equal.
STANDFIRST_MAX_CHARS = 500

# Where a provider's own voice can start: the text, a line (after an optional bullet), or a
# sentence. Not inside a quotation: a story that quotes a chatbot quotes it after a quote mark.
_START = r"(?:^|(?<=[.!?])[ \t]+)(?:[-*][ \t]+)?"
_I_CANNOT = (
    r"I(?: can't| can\u2019t| cannot| can not| am unable to|'m unable to|\u2019m unable to| won't be able to| will not)"
)
# What no stored artifact may carry. Each pattern is a construction, never a topic: a story about
# language models, AI, chatbots or prompts is ordinary news and passes.
LEFTOVER_PROMPT = re.compile(
    "|".join(
        [
            # The provider speaking for itself instead of the story, or refusing the task:
            # "As an AI language model, I cannot…", "As an AI, here is the draft…".
            _START
            + r"as an ai(?: language model| model| assistant| chatbot)?[ \t]*,[ \t]*(?:I\b|I'm|I\u2019m|my\b|here\b)",
            # A refusal: "I'm sorry, but I can't help with that.", "I cannot fulfil this request." (not
            # "I cannot help feeling…", which opens an opinion piece).
            _START + r"(?:I'm|I\u2019m|I am) sorry,? (?:but )?" + _I_CANNOT + r"\b",
            _START
            + _I_CANNOT
            + r" (?:help (?:with|you)|assist|comply|fulfil|fulfill|provide|complete|write|summari[sz]e|create"
            + r"|generate|do that)\b",
            # A preamble to whoever asked: "Sure! Here is…", "Here is the draft you asked for",
            # "Here's a short summary:" (a draft opening on one is talking to the reader of the prompt).
            r"^[ \t]*(?:sure|certainly|of course)\b[,.!]?[ \t]*here(?: is|'s|\u2019s)\b",
            r"^[ \t]*here(?: is|'s|\u2019s) (?:a |an |the |your )?(?:[\w-]+ ){0,3}?(?:summary|draft|outline|headline)\b"
            r"[^.\n]{0,60}?(?::|\byou (?:asked for|requested)\b)",
            # The pipeline's own instructions echoed back (INSTRUCTIONS), or a generic prompt's.
            r"you write the (?:outline|draft|headline|standfirst)\b",
            _START + r"summari[sz]e the following\b",
            # Template placeholders and chat-template tokens left unfilled; filler text.
            r"\{\{|\}\}|<\||\[insert\b|lorem ipsum",
        ]
    ),
    re.IGNORECASE | re.MULTILINE,
)

# Words a finished headline never ends on: articles and determiners, prepositions that need their
# object, conjunctions, relative words. A headline ending on one was cut off by a length or token
# limit ("…criticised the lack of a cycling lane along"). Words that also end phrases as particles
# or adverbs ("in", "on", "over", "out", "up", "off", "after", "though", "yet", "who") are left out,
# so "Talks are back on" or "Results are in" pass. By language, for the newsrooms Galley serves.
DANGLING_WORDS = frozenset(
    word
    for words in (
        # English
        "a an the this these those that which whose its their our my your his",
        "of to for from with at into onto upon by as than via per along among amid amidst",
        "between despite during against toward towards across until",
        "and or but nor because although whereas unless whether if such",
        # Polish
        "i oraz a w we z ze na od dla przez pod nad przed bez że ale lub albo czy który która które",
        # Indonesian
        "dan atau tetapi namun yang di ke dari untuk dengan pada oleh bahwa karena akan para",
        # German
        "der das den dem des ein eine einen einem einer und oder aber mit von zu für auf aus bei nach",
        "über dass weil",
        # Spanish, French
        "el la los las un una de del y con por para que sin en",
        "le les du des au aux et ou une à avec pour sur dans",
    )
    for word in words.split()
)
_CUT_OFF_MARKS = (",", ";", ":", "-", "\u2013", "\u2014", "/", "&", "+", "\u2026", "...")
_PAIRS = (("(", ")"), ("[", "]"), ("«", "»"))
_WORD_EDGE = "\"'\u201c\u201d\u201e\u00ab\u00bb\u2018\u2019()[]!?.,;:"


def cut_off_ending(headline: str) -> str | None:
    """Why `headline` looks cut off mid-phrase (its dangling end), or None when it ends cleanly.

    A word in capitals is a name or a label ("Plan A", "backed by UN"), never a dangling word.
    """
    text = headline.strip()
    if not text:
        return None
    if text.endswith(_CUT_OFF_MARKS):
        return next(mark for mark in _CUT_OFF_MARKS if text.endswith(mark))
    for opening, closing in _PAIRS:
        if text.count(opening) > text.count(closing):
            return f"an unclosed {opening}"
    if text.count('"') % 2:
        return 'an unclosed "'
    last = text.split()[-1].strip(_WORD_EDGE)
    if last and not last.isupper() and last.lower() in DANGLING_WORDS:
        return last
    return None


@dataclass(frozen=True)
class Proposal:
    """What one attempt of a step computed; the stored artifact may differ, and then it wins."""

    content: dict[str, Any]
    provider: str
    model: str
    usage: dict[str, int] = field(default_factory=dict)


def quality_problems(inputs: dict[str, dict[str, Any]]) -> list[str]:
    """Deterministic checks on the stored artifacts; any problem is terminal (never retried)."""
    problems = []
    outline = str(inputs.get(SummaryStep.OUTLINE, {}).get("text", "")).strip()
    draft = str(inputs.get(SummaryStep.DRAFT, {}).get("text", "")).strip()
    headline = str(inputs.get(SummaryStep.HEADLINE, {}).get("text", "")).strip()
    standfirst = _standfirst(inputs)
    if not outline:
        problems.append("the outline is empty")
    if not draft:
        problems.append("the draft is empty")
    elif not DRAFT_MIN_CHARS <= len(draft) <= DRAFT_MAX_CHARS:
        problems.append(f"the draft has {len(draft)} characters; allowed {DRAFT_MIN_CHARS} to {DRAFT_MAX_CHARS}")
    if not headline:
        problems.append("the headline is missing")
    elif len(headline) > HEADLINE_MAX_CHARS or "\n" in headline:
        problems.append(f"the headline must be one line of at most {HEADLINE_MAX_CHARS} characters")
    elif dangling := cut_off_ending(headline):
        problems.append(f"the headline looks cut off: it ends with {dangling!r}")
    if len(standfirst) > STANDFIRST_MAX_CHARS:
        problems.append(f"the standfirst has {len(standfirst)} characters; at most {STANDFIRST_MAX_CHARS} are allowed")
    for name, text in (("outline", outline), ("draft", draft), ("headline", headline), ("standfirst", standfirst)):
        if leftover := LEFTOVER_PROMPT.search(text):
            problems.append(f"the {name} contains leftover prompt text ({leftover.group(0).strip()!r})")
        if "\x00" in text:
            problems.append(f"the {name} contains a NUL character")
    return problems


class SuggestionTake(TextChoices):
    """What an editor takes from a completed run: the choice of title is always explicit. The
    standfirst comes only with the whole suggestion: a run that wrote revision 1 put its standfirst
    there already, and taking its headline never replaces a standfirst the editor has since written."""

    HEADLINE = "headline", "Use the headline as the title"
    DRAFT = "draft", "Use the draft, keep the title"
    BOTH = "both", "Use the headline, the standfirst and the draft"


def _standfirst(artifacts: dict[str, dict[str, Any]]) -> str:
    """The run's standfirst; empty for a run stored before the standfirst step (module docstring)."""
    return str(artifacts.get(SummaryStep.STANDFIRST, {}).get("text", "")).strip()


def _draft(artifacts: dict[str, dict[str, Any]]) -> str:
    return str(artifacts[SummaryStep.DRAFT]["text"]).strip()


def first_revision_payload(artifacts: dict[str, dict[str, Any]], *, title: str) -> dict[str, Any]:
    """The revision a run writes when the brief has none: the editor's title, the standfirst (left
    out when the run has none, as publishing.story leaves out every empty field), the draft as the
    Markdown body; the quality gate has held them to the story's bounds. The headline stays a
    suggestion (suggested_headline) until an editor takes it."""
    standfirst = _standfirst(artifacts)
    return {"title": title, **({"standfirst": standfirst} if standfirst else {}), "body": _draft(artifacts)}


def suggested_headline(artifacts: dict[str, dict[str, Any]]) -> str:
    return str(artifacts[SummaryStep.HEADLINE]["text"]).strip()


def suggested_payload(artifacts: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The whole suggestion of a run that found an editor's revision: the headline as title, the
    standfirst (when the run has one) and the draft as body."""
    suggestion = {
        "title": suggested_headline(artifacts),
        "standfirst": _standfirst(artifacts),
        "body": _draft(artifacts),
    }
    return {name: text for name, text in suggestion.items() if text or name != "standfirst"}


def apply_suggestion(current: dict[str, Any], artifacts: dict[str, dict[str, Any]], *, take: str) -> dict[str, Any]:
    """The payload of the revision an editor writes by taking `take` from a run's suggestion on
    top of `current` (the latest revision's payload): what is not taken stays as it is (the caller
    checks the result with publishing.story.clean_story). A run without a standfirst leaves the
    current one in place."""
    suggested = suggested_payload(artifacts)
    payload = dict(current)
    if take in (SuggestionTake.HEADLINE, SuggestionTake.BOTH):
        payload["title"] = suggested["title"]
    if take == SuggestionTake.BOTH and "standfirst" in suggested:
        payload["standfirst"] = suggested["standfirst"]
    if take in (SuggestionTake.DRAFT, SuggestionTake.BOTH):
        payload["body"] = suggested["body"]
    return payload
