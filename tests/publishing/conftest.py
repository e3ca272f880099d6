"""Fixtures for publishing's tests: a real WordPress with Galley's plugin, started once per session when a test asks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.wordpress import WordPress, running_wordpress


@pytest.fixture(scope="session")
def wordpress() -> Iterator[WordPress]:
    """Debian's WordPress on PHP's built-in server and a private MariaDB (tests/wordpress.py), stopped at exit."""
    with running_wordpress(test_faults=True) as wp:
        yield wp
