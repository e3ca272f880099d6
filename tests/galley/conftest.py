"""Fixtures for the ops page and metrics tests: the reference target in a thread, and publishing
through it end to end (approval → publish → verify), as tests/publishing/handlers do."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from publishing.models import Brief, Revision
from tests.publishing.handlers.test_publications import approve, run_worker
from tests.reference_target import TOKEN


@pytest.fixture
def publish(target, revise, approver, settings) -> Callable[..., dict[str, int]]:
    """publish(brief, body, token=None): a new revision of `brief`, approved, then one worker drain of
    the publish (verified in its attempt) and any verify operation; with another `token` the target refuses
    (a dead letter)."""

    settings.GALLEY_BACKOFF_BASE_SECONDS = 0.01  # retries happen at once
    settings.GALLEY_BACKOFF_MAX_SECONDS = 0.05

    def run(brief: Brief, body: str, *, token: str | None = None) -> dict[str, int]:
        revision: Revision = revise(brief, body)
        settings.GALLEY_TARGET_TOKEN = token or TOKEN
        try:
            approve(revision, by=approver)
            return run_worker()
        finally:
            settings.GALLEY_TARGET_TOKEN = TOKEN

    return run
