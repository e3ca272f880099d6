"""Fixtures for publishing's tests: a real WordPress with Galley's plugin, started once per session when a test asks;
the admin signed in as a staff operator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from tests.wordpress import WordPress, running_wordpress


@pytest.fixture(scope="session")
def wordpress() -> Iterator[WordPress]:
    """Debian's WordPress on PHP's built-in server and a private MariaDB (tests/wordpress.py), stopped at exit."""
    with running_wordpress(test_faults=True) as wp:
        yield wp


@pytest.fixture
def operator_client(operator) -> Client:
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(operator)
    return client
