"""The summary pipeline's rules, with no I/O: the steps and their order, what each AI step is
asked, the quality gate, and how the artifacts become a suggested revision.

outline → draft → headline → quality gate → the first revision (or a suggestion)
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
    QUALITY_GATE = "quality_gate", "Quality gate"


STEPS = [SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE, SummaryStep.QUALITY_GATE]
NEXT_STEP: dict[str, SummaryStep] = dict(itertools.pairwise(STEPS))

# What each AI step is asked, and which earlier artifact (or the source, None) it works from.
INSTRUCTIONS = {
    SummaryStep.OUTLINE: ("You write the outline: the key points of the material, one per line.", None),
    SummaryStep.DRAFT: ("You write the draft: a short news summary from the outline.", SummaryStep.OUTLINE),
    SummaryStep.HEADLINE: ("You write the headline: one line, no trailing period.", SummaryStep.DRAFT),
}

DRAFT_MIN_CHARS = 20
DRAFT_MAX_CHARS = 20_000
HEADLINE_MAX_CHARS = 200
LEFTOVER_PROMPT = re.compile(
    r"as an ai|language model|you write the|summari[sz]e the|here is (a|the) |\{\{|\}\}|<\|"
    r"|\[insert|lorem ipsum",
    re.IGNORECASE,
)


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
    for name, text in (("outline", outline), ("draft", draft), ("headline", headline)):
        if leftover := LEFTOVER_PROMPT.search(text):
            problems.append(f"the {name} contains leftover prompt text ({leftover.group(0)!r})")
        if "\x00" in text:
            problems.append(f"the {name} contains a NUL character")
    return problems


def suggested_payload(artifacts: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The revision payload the run suggests: the headline as title, the draft as body."""
    return {
        "title": str(artifacts[SummaryStep.HEADLINE]["text"]).strip(),
        "body": str(artifacts[SummaryStep.DRAFT]["text"]).strip(),
    }
