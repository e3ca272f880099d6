"""The ops page's live status region (/ops/live/, galley.ops.views.ops_live), as htmx polls it."""

from __future__ import annotations

import pytest
from pytest_django.asserts import assertContains, assertNotContains

from tests.web import client_for

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_ops_partial__operator__tiles_and_keeps_polling(users):
    client = client_for(users["operator"])

    page = client.get("/ops/")
    assertContains(page, 'hx-get="/ops/live/"')
    response = client.get("/ops/live/", **HTMX)

    assert response.status_code == 200
    assertContains(response, 'class="ops-tiles"')
    assertNotContains(response, "<h1")


@pytest.mark.parametrize("role", ["editor", "approver", "no_group"])
def test_ops_partial__not_an_operator__403(users, role):
    assert client_for(users[role]).get("/ops/live/", **HTMX).status_code == 403
