"""What every API view shares: token authentication, problem details (RFC 9457), and the
idempotent POST (publishing.actions.idempotency)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_variables
from ninja import Header, Schema
from ninja.schema import DjangoGetter
from ninja.security.base import AuthBase
from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from publishing.actions.api_tokens import get_token_user
from publishing.actions.idempotency import (
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    StoredResponse,
    check_idempotency_key,
    claim_idempotency_key,
    do_record_idempotent_response,
    request_fingerprint,
)
from publishing.errors import GalleyError, InvalidInput, NotFound, PermissionRefused, RevisionConflict

PROBLEM_CONTENT_TYPE = "application/problem+json"
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
NO_NUL = r"^[^\x00]*$"
# Text the actions accept: no NUL (PostgreSQL cannot store it), and not only whitespace.
TEXT = r"^[^\x00]*[^\x00\s][^\x00]*$"
PAYLOAD_HASH = r"^[0-9a-f]{64}$"  # sha256 hex, as every revision's payload_hash
CURSOR = r"^[A-Za-z0-9_-]{1,200}$"  # what encode_cursor gives out: unpadded URL-safe base64


class TokenAuth(AuthBase):
    """`Authorization: Bearer <secret>`: the token's user, who acts with their roles.

    It reads the header itself: ninja's HttpBearer logs any other scheme's header whole under
    DEBUG ("Unexpected auth - 'Basic galley_…'"), and a client that sent its token as `Basic`,
    `Token` or bare would have it written to the log. Any other form is simply not a token (401).
    """

    openapi_type = "http"
    openapi_scheme = "bearer"

    # Error pages and reports list each frame's variables: never the token (galley.exception_reporter).
    @method_decorator(sensitive_variables("secret"))
    def __call__(self, request: HttpRequest) -> User | None:
        scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != self.openapi_scheme or not secret:
            return None
        return get_token_user(secret)


class BodyIn(Schema):
    """A request body: a JSON object with the documented fields and no others (the schema says
    `additionalProperties: false`), else a 400 naming what is wrong; nothing is written.

    Without this check ninja read a body that is no object through the schema's attributes: the
    JSON string "hello world source?" made a brief titled "Hello World Source?" (`str.title`)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, value: Any) -> Any:
        # With extra="forbid" ninja validates the raw body first, then again wrapped in its DjangoGetter:
        # the raw one is checked here, the wrapped one has passed.
        if not isinstance(value, dict | DjangoGetter):
            kind = {str: "a string", list: "an array", bool: "a boolean", type(None): "null"}.get(
                type(value), "a number"
            )
            raise PydanticCustomError(
                "object_expected",
                "The body must be a JSON object with the documented fields, not {kind}.",
                {"kind": kind},
            )
        return value


class Problem(Schema):
    """A problem details object (RFC 9457); extension members name what the client needs next."""

    type: str
    title: str
    status: int
    detail: str
    current_revision: int | None = None
    current_payload_hash: str | None = None
    errors: list[dict[str, Any]] | None = None


# Every refusal an endpoint may answer, for its OpenAPI responses (503: the database is unreachable).
PROBLEMS: dict[int, Any] = {400: Problem, 401: Problem, 403: Problem, 404: Problem, 503: Problem}
WRITE_PROBLEMS: dict[int, Any] = {**PROBLEMS, 409: Problem, 422: Problem}

# (error class, status, type slug, title); the first that matches wins, so subclasses come first.
_REFUSALS: list[tuple[type[GalleyError], int, str, str]] = [
    (IdempotencyKeyReused, 422, "idempotency-key-reused", "Idempotency-Key used for another request"),
    (IdempotencyKeyInFlight, 409, "idempotency-key-in-flight", "A request with this Idempotency-Key is in flight"),
    (RevisionConflict, 409, "revision-conflict", "A newer revision exists"),
    (StaleApproval, 409, "stale-approval", "Not the current revision or hash"),
    (DecisionAlreadyMade, 409, "decision-already-made", "Decision already made"),
    (SelfApproval, 403, "self-approval", "You cannot approve your own revision"),
    (PermissionRefused, 403, "permission-refused", "Permission refused"),
    (NotFound, 404, "not-found", "Not found"),
    (InvalidInput, 400, "invalid-input", "Invalid input"),
]


def problem_response(status: int, *, slug: str, title: str, detail: str, **extensions: Any) -> HttpResponse:
    body = {"type": f"urn:galley:problem:{slug}", "title": title, "status": status, "detail": detail}
    body.update({name: value for name, value in extensions.items() if value is not None})
    return HttpResponse(json.dumps(body), status=status, content_type=PROBLEM_CONTENT_TYPE)


def refusal_response(exc: GalleyError) -> HttpResponse:
    """The problem details for an action's refusal; nothing was written."""
    status, slug, title = 400, "refused", "Refused"
    for cls, cls_status, cls_slug, cls_title in _REFUSALS:
        if isinstance(exc, cls):
            status, slug, title = cls_status, cls_slug, cls_title
            break
    extensions: dict[str, Any] = {}
    if isinstance(exc, RevisionConflict):
        extensions["current_revision"] = exc.newer.number if exc.newer is not None else 0
        extensions["current_payload_hash"] = exc.newer.payload_hash if exc.newer is not None else None
    elif isinstance(exc, StaleApproval):
        extensions["current_revision"] = exc.current_number
        extensions["current_payload_hash"] = exc.current_hash
    response = problem_response(status, slug=slug, title=title, detail=_api_detail(exc), **extensions)
    if isinstance(exc, IdempotencyKeyInFlight):
        response["Retry-After"] = "1"
    return response


def _api_detail(exc: GalleyError) -> str:
    """The refusal in the API's words, where the action's message speaks of the web UI's page (a
    conflicting edit's text "kept below")."""
    if isinstance(exc, RevisionConflict) and exc.newer is not None and exc.base_number <= exc.newer.number:
        current = exc.newer.number
        return (
            f"Revision {current} has been written since revision {exc.base_number}, your base_revision. Nothing "
            f"was written: read revision {current} (current_revision, current_payload_hash), then send your text "
            f"again with base_revision {current}."
        )
    return exc.message


def idempotency_key_header() -> Any:
    return Header(
        alias="Idempotency-Key",
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="Your key for this request (e.g. a UUID): the same key and body replays the stored response.",
    )


def idempotent_post(request: HttpRequest, key: str, write: Callable[[User], tuple[int, BaseModel]]) -> HttpResponse:
    """Run `write` once per (user, Idempotency-Key) and answer its response, or replay the stored one.

    One durable transaction holds the key (409 if another request holds it), the write and the
    stored response, so they commit together; a refusal raised by `write` rolls all of it back.
    """
    user = request.auth  # type: ignore[attr-defined]
    key = check_idempotency_key(key)
    fingerprint = request_fingerprint(request.method or "POST", request.path, request.body)
    with transaction.atomic(durable=True):
        stored = claim_idempotency_key(user=user, key=key, fingerprint=fingerprint)
        replayed = stored is not None
        if stored is None:
            status, schema = write(user)
            stored = StoredResponse(status, schema.model_dump_json())
            do_record_idempotent_response(
                user=user, key=key, fingerprint=fingerprint, status=stored.status, body=stored.body
            )
    response = HttpResponse(stored.body, status=stored.status, content_type="application/json")
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def encode_cursor(created_at: datetime, row_id: int) -> str:
    raw = json.dumps([created_at.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The (created_at, id) a cursor names; InvalidInput for anything that is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, row_id = json.loads(raw)
        when = datetime.fromisoformat(created_at)
        if when.tzinfo is None or not isinstance(row_id, int) or isinstance(row_id, bool):
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput("The cursor is not one this API gave out; start again without it.") from None
    return when, row_id
