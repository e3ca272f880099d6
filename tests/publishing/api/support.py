"""Calling the JSON API as a user with a token, through the test client."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import transaction
from django.http import HttpResponse
from django.test import Client

from publishing.actions.api_tokens import do_create_api_token

API = "/api/v1"
# Words of the web UI's pages, which an API client has no use for: a problem detail never says them.
WEB_PAGE_WORDS = ("kept below", "reload the page", "the page", "click", "button", "the form")


def token_for(user: Any) -> str:
    with transaction.atomic(durable=True):
        _token, secret = do_create_api_token(user, name="tests", acting_user=None)
    return secret


class ApiClient:
    """One user's API calls: every POST carries an Idempotency-Key (a fresh one unless given)."""

    def __init__(self, secret: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {secret}"} if secret else {}

    def get(self, path: str, **params: Any) -> HttpResponse:
        return self.client.get(API + path, params, headers=self.headers)

    def post(self, path: str, body: Any = None, *, key: str | None = "", raw: bytes | None = None) -> HttpResponse:
        headers = dict(self.headers)
        if key is not None:
            headers["Idempotency-Key"] = key or str(uuid.uuid4())
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(API + path, data, content_type="application/json", headers=headers)


def problem(response: HttpResponse) -> dict[str, Any]:
    """The problem details of a refusal (RFC 9457), checked for its form."""
    assert response["Content-Type"] == "application/problem+json", response.content
    body = json.loads(response.content)
    assert body["status"] == response.status_code
    assert body["type"].startswith("urn:galley:problem:")
    assert body["title"] and body["detail"]
    return body
