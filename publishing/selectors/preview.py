"""A story's preview as readers will see it: the context of templates/publishing/_story_preview.html,
for any payload — a revision's, or a working draft's before it is submitted. Pure: reads nothing
from the database."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from publishing.story import correction_note, render_story, story_fields


def get_story_preview(payload: Mapping[str, Any]) -> dict[str, Any]:
    """`story`: the payload as the default channel renders it (publishing.story.render_story), with a
    correction's public note (`correction_note`, "" for any other story: the reference target shows it
    under the headline); `standfirst_from_body`: the story has no standfirst, so the excerpt under the
    headline is the body's first paragraph — the preview says so, or the editor would take it for a
    standfirst."""
    story = {**render_story(payload), "correction_note": correction_note(payload)}
    return {"story": story, "standfirst_from_body": bool(story["excerpt"]) and not story_fields(payload)["standfirst"]}
