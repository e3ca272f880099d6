"""Fixtures of the schedule tests (test_schedules, test_schedule_clocks)."""

from __future__ import annotations

import pytest

from galley.reference_target import ReferenceTarget
from publishing.actions.briefs import check_create_brief
from publishing.models import Brief

BODY = "Dockers walked out at dawn."


@pytest.fixture
def targets(target, add_channel) -> dict[str, ReferenceTarget]:
    """Two channels, each a reference target of its own: web (the primary) and partner-feed."""
    return {"web": target, "partner-feed": add_channel("partner-feed")}


@pytest.fixture
def story(targets, editor) -> Brief:
    """A brief going to both channels (created after partner-feed, a default channel)."""
    return check_create_brief(title="Harbour strike", source_material=BODY, acting_user=editor)
