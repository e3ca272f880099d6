"""The JSON API under /api/v1/ (docs/api.md): publishing's and approvals' routers, token
authentication, and every refusal as problem details (RFC 9457).

Its OpenAPI schema is at /api/v1/openapi.json (docs at /api/v1/docs); error answers are declared
there as `application/problem+json`, as they are sent.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from approvals.api import router as decisions_router
from publishing.api.briefs import router as briefs_router
from publishing.api.channels import router as channels_router
from publishing.api.common import PROBLEM_CONTENT_TYPE, TokenAuth, problem_response, refusal_response
from publishing.api.operations import router as operations_router
from publishing.errors import GalleyError
from publishing.middleware import busy_response
from workers.errors import is_lock_timeout


class GalleyAPI(NinjaAPI):
    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        """Error answers are problem details: declare them with the media type they are sent with."""
        schema = super().get_openapi_schema(*args, **kwargs)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for status, response in operation.get("responses", {}).items():
                    content = response.get("content", {})
                    if int(status) >= 400 and "application/json" in content:
                        content[PROBLEM_CONTENT_TYPE] = content.pop("application/json")
        return schema


api = GalleyAPI(
    title="Galley API",
    version="1",
    description=(
        "Briefs, revisions, revision-bound decisions, publication state and operator actions. "
        "Authenticate with `Authorization: Bearer <token>` (`manage.py create_api_token`). Every POST "
        "needs an `Idempotency-Key`: the same key and body replays the stored response, the same key with "
        "another body is 422, a request still in flight with that key is 409."
    ),
    auth=TokenAuth(),
    urls_namespace="api-v1",
)
api.add_router("", briefs_router)
api.add_router("", decisions_router)
api.add_router("", operations_router)
api.add_router("", channels_router)


def api_urls() -> tuple[list[Any], str, str]:
    """The API's URL patterns, exempt from LoginRequiredMiddleware: a token, not a session, signs
    a request in, and a missing one is a 401 problem, never a redirect to the login page."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if pattern.callback is not None:
            login_not_required(pattern.callback)
    return patterns, app_name, namespace


@api.exception_handler(GalleyError)
def galley_refusal(request: HttpRequest, exc: GalleyError) -> HttpResponse:
    return refusal_response(exc)


@api.exception_handler(ValidationError)
def invalid_request(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors: list[dict[str, Any]] = []
    for error in exc.errors:
        loc = [str(part) for part in error.get("loc", ())]
        errors.append({"loc": loc, "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))})
    detail = "; ".join(f"{_field(error['loc'])}: {error['msg']}" for error in errors) or "The request is not valid."
    return problem_response(400, slug="invalid-request", title="Invalid request", detail=detail, errors=errors)


def _field(loc: list[str]) -> str:
    """`title` for ninja's ["body", "data", "title"], `status` for ["query", "status"]."""
    parts = loc[2:] if loc[:2] == ["body", "data"] else loc[1:] if len(loc) > 1 else loc
    return ".".join(parts) or "body"


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = problem_response(
        401,
        slug="unauthenticated",
        title="Authentication required",
        detail="Send `Authorization: Bearer <token>` with a live API token.",
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


# SQLSTATEs of a database that is not there: a connection exception (class 08), a server shutting
# down (57P01, 57P02) or not yet accepting connections (57P03). A connection that could not be made
# at all carries none.
_OUTAGE_SQLSTATES = ("08", "57P01", "57P02", "57P03")


@api.exception_handler(DatabaseError)
def database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    """One handler for every database error (django-ninja picks one handler by class and chains
    none): a write that met the lock bound is a 503 "busy, try again" with Retry-After (nothing was
    written); a database that cannot be reached is a 503 problem, which a client retries; any other
    database error is no outage and stays a server error."""
    if is_lock_timeout(exc):
        return busy_response(request)
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    unreachable = isinstance(exc, OperationalError) and (sqlstate is None or sqlstate.startswith(_OUTAGE_SQLSTATES))
    if not (unreachable or isinstance(exc, InterfaceError)):
        raise exc
    response = problem_response(
        503,
        slug="database-unavailable",
        title="Database unavailable",
        detail=(
            "Galley cannot reach its database. Retry later with the same Idempotency-Key: if the write "
            "committed before the database went away, the retry answers as it did; if not, the retry does it."
        ),
    )
    response["Retry-After"] = "5"
    return response


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    """Ninja's own refusals, e.g. a body that is not JSON (400)."""
    slug, title = ("invalid-request", "Invalid request") if exc.status_code == 400 else ("refused", "Refused")
    return problem_response(exc.status_code, slug=slug, title=title, detail=str(exc))
