"""The reference target (docs/target-protocol.md) served from a thread of the test process, with Galley's
settings pointing at it: `start_target(faults)` for a target with faults, `target` for a healthy one.
Fixtures for every app's tests (imported by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from galley.reference_target import Faults, ReferenceTarget

TOKEN = "delivery-test-token"


@pytest.fixture
def start_target(tmp_path: Path, settings) -> Iterator[Callable[..., ReferenceTarget]]:
    """start_target(faults): a reference target served from a thread; Galley's settings point at it."""
    started: list[ReferenceTarget] = []

    def start(faults: Faults | None = None) -> ReferenceTarget:
        db_path = tmp_path / f"target-{len(started)}.sqlite3"
        target = ReferenceTarget(db_path=db_path, token=TOKEN, faults=faults, port=0).start()
        started.append(target)
        settings.GALLEY_TARGET_KIND = "reference"
        settings.GALLEY_TARGET_URL = target.url
        settings.GALLEY_TARGET_TOKEN = TOKEN
        settings.GALLEY_TARGET_TIMEOUT_SECONDS = 5.0
        return target

    yield start
    for target in started:
        target.stop()


@pytest.fixture
def target(start_target) -> ReferenceTarget:
    return start_target()


@pytest.fixture
def add_channel(tmp_path: Path) -> Iterator[Callable[..., ReferenceTarget]]:
    """add_channel(slug, faults=None, **fields): a reference target of its own, served from a thread, and the
    channel `slug` speaking to it (credentials sealed as an operator's would be); returns the target."""
    from publishing.credentials import seal
    from publishing.models import Channel

    started: list[ReferenceTarget] = []

    def add(slug: str, faults: Faults | None = None, **fields: object) -> ReferenceTarget:
        db_path = tmp_path / f"channel-{slug}.sqlite3"
        target = ReferenceTarget(db_path=db_path, token=TOKEN, faults=faults, port=0).start()
        started.append(target)
        Channel.objects.create(
            slug=slug,
            name=slug.replace("-", " ").title(),
            base_url=target.url,
            secret_sealed=seal(TOKEN),
            **({"is_default": True} | fields),
        )
        return target

    yield add
    for target in started:
        target.stop()
