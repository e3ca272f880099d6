from __future__ import annotations

import pytest

from publishing.roles import Role
from tests.publishing.api.support import ApiClient, token_for


@pytest.fixture
def as_role(users):
    """as_role("editor") → an ApiClient with that user's token; "anonymous" → one with no token."""

    def make(role: str) -> ApiClient:
        user = users[role]
        return ApiClient(token_for(user) if user is not None else None)

    return make


@pytest.fixture
def editor_api(as_role) -> ApiClient:
    return as_role("editor")


@pytest.fixture
def approver_api(as_role) -> ApiClient:
    return as_role("approver")


@pytest.fixture
def operator_api(as_role) -> ApiClient:
    return as_role("operator")


@pytest.fixture
def editor2(make_user):
    return make_user("edna", Role.EDITOR)
