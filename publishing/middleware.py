"""Refusals as pages that say why, and the guard that keeps text PostgreSQL cannot store out of every view.

PostgreSQL refuses a NUL character in any text, and Django would otherwise decode bytes that are
not UTF-8 into U+FFFD ("�") without a word, so a brief would be saved with its characters lost.
The guard checks the raw request before any view reads it:

- the address: a NUL character (path or query) or query bytes that are not UTF-8 are a 400 for every view;
- a form body: bytes that are not text in the request's charset, or a NUL character, are a 400 that
  shows the submitted fields again, so nothing typed is lost. Views marked `checks_own_form_text`
  (Galley's own forms) re-render their form with the message instead, text kept in place;
- the admin's few inputs that Django would turn into a 500 (selected-row ids that are no ids, a
  date-hierarchy year no date can hold) and a username longer than any account's.

A write that waited longer than the lock bound (GALLEY_LOCK_TIMEOUT_SECONDS) for a row another
session holds (a brief being saved or published) was rolled back: it answers 503 with Retry-After,
"this brief is busy, try again", the submitted fields shown back — never a 500, never a request that
waits until the web server's own timeout.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from io import BytesIO
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import (
    BadRequest,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
    ValidationError,
)
from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.shortcuts import render

from publishing.errors import InvalidInput, NotFound, PermissionRefused
from workers.errors import is_lock_timeout

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., HttpResponse])

# Fields never shown back on a refusal page: secrets, and the CSRF token (a new page brings a new one).
_NOT_SHOWN = ("password", "csrfmiddlewaretoken")
# How a NUL shows in text sent back: plain ASCII, which every font has.
_NUL_SHOWN = "[NUL]"
_UNDECODABLE = "_galley_undecodable_fields"
# Where the JSON API is mounted (galley/urls.py): its clients read problem details, not pages.
API_PREFIX = "/api/"


def checks_own_form_text(view: ViewFunc) -> ViewFunc:
    """Mark a view that refuses unstorable form text itself (with `check_form_text` and its actions'
    NUL checks), re-rendering its form with the text kept; the middleware then leaves its body alone."""
    view.galley_checks_form_text = True  # type: ignore[attr-defined]
    return view


def undecodable_fields(request: HttpRequest) -> list[str]:
    """Names of the posted fields whose bytes are not text in the request's charset (UTF-8 unless
    the client names another). Django would decode each with U+FFFD in place of the bad bytes."""
    if not hasattr(request, _UNDECODABLE):
        setattr(request, _UNDECODABLE, _find_undecodable_fields(request))
    return list(getattr(request, _UNDECODABLE))


def check_form_text(request: HttpRequest, form: forms.Form) -> None:
    """Raise InvalidInput naming, by their labels, the posted fields that are not valid text."""
    names = undecodable_fields(request)
    if not names:
        return
    labels = [
        str(form.fields[name].label or name.replace("_", " ").capitalize()) if name in form.fields else name
        for name in names
    ]
    raise InvalidInput(
        f"{', '.join(labels)}: the text sent is not valid UTF-8, and the bytes that are no character "
        "are shown as �. Nothing was saved; correct them and save again."
    )


class RefusalMiddleware:
    """Turns an action's refusal into a page that says why (403 for permissions, 404 for absences),
    and refuses input PostgreSQL cannot store with a 400 that says which and keeps what was typed."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if message := _address_problem(request):
            return _refused(request, message)
        if request.method == "POST" and (message := _body_problem(request)):
            return _refused(request, message)
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        model_admin = getattr(view_func, "model_admin", None)
        if model_admin is not None and (message := _admin_problem(request, model_admin)):
            return _refused(request, message)
        if request.method != "POST":
            return None
        match = request.resolver_match
        if match is not None and match.url_name == "login" and (message := _login_problem(request)):
            return _refused_input(request, message)
        if getattr(view_func, "galley_checks_form_text", False):
            return None
        if names := undecodable_fields(request):
            return _refused_input(
                request,
                f"The form is not valid UTF-8 text (in {', '.join(names)}). Nothing was saved; the text "
                "as received is below, the bytes that are no character shown as �.",
            )
        if names := sorted({name for name, values in request.POST.lists() for v in [name, *values] if "\x00" in v}):
            return _refused_input(
                request,
                f"The form contains a NUL character (in {', '.join(n.replace(chr(0), _NUL_SHOWN) for n in names)}), "
                f"which cannot be stored. Nothing was saved; the text as received is below, each NUL shown as "
                f"{_NUL_SHOWN}.",
            )
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, PermissionRefused):
            return render(request, "refused.html", {"message": exception.message, "title": "Not allowed"}, status=403)
        if isinstance(exception, NotFound):
            return render(request, "refused.html", {"message": exception.message, "title": "Not found"}, status=404)
        if is_lock_timeout(exception):
            return busy_response(request)
        return None


BUSY_MESSAGE = (
    "This brief is busy: another change to it is being saved or published right now. Nothing was saved; "
    "try again in a few seconds."
)
# Seconds a client is asked to wait before it tries a busy write again.
BUSY_RETRY_AFTER_SECONDS = 2


def busy_response(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After for a write that met the lock bound: a page with the submitted fields
    shown back (nothing typed is lost), or problem details on the JSON API."""
    if request.path.startswith(API_PREFIX):
        body = {"type": "urn:galley:problem:busy", "title": "Busy, try again", "status": 503, "detail": BUSY_MESSAGE}
        response = HttpResponse(json.dumps(body), status=503, content_type="application/problem+json")
    else:
        response = _refused_input(
            request, f"{BUSY_MESSAGE} Your text is kept below.", status=503, title="Busy, try again"
        )
    response["Retry-After"] = str(BUSY_RETRY_AFTER_SECONDS)
    return response


def _refused(request: HttpRequest, message: str) -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        # The JSON API answers every refusal as problem details (RFC 9457), as its schema says.
        body = {"type": "urn:galley:problem:invalid-input", "title": "Invalid input", "status": 400, "detail": message}
        return HttpResponse(json.dumps(body), status=400, content_type="application/problem+json")
    return render(request, "refused.html", {"message": message, "title": "Bad request"}, status=400)


def _refused_input(request: HttpRequest, message: str, *, status: int = 400, title: str = "") -> HttpResponse:
    """A 400 (or `status`) that shows the submitted fields back (secrets excepted), so nothing typed is lost."""
    if request.path.startswith(API_PREFIX):
        return _refused(request, message)
    fields = [
        (name.replace("\x00", _NUL_SHOWN), value.replace("\x00", _NUL_SHOWN))
        for name, values in request.POST.lists()
        if not any(secret in name for secret in _NOT_SHOWN)
        for value in values
    ]
    context = {"message": message, "fields": fields, "title": title}
    return render(request, "publishing/refused_input.html", context, status=status)


def _address_problem(request: HttpRequest) -> str:
    if "\x00" in request.path or any(
        "\x00" in name or "\x00" in value for name, values in request.GET.lists() for value in values
    ):
        return "The address contains a NUL character (%00), which no brief, revision or filter can hold."
    # WSGI hands the query over as its bytes (as ISO-8859-1 text); Django would decode bytes that
    # are not UTF-8 into U+FFFD and search or filter by that. (Path bytes that are not UTF-8 Django
    # turns back into %XX, which names no brief or object: those pages answer 404 and say so.)
    if isinstance(request, WSGIRequest):
        raw_query = request.META.get("QUERY_STRING", "").encode("iso-8859-1", "replace")
        if _undecodable_pairs(raw_query, request.encoding or "utf-8"):
            return "The address is not valid UTF-8 text, so it names no brief, revision or filter."
    return ""


def _body_problem(request: HttpRequest) -> str:
    """Read and parse the body now, before any view or middleware does, and say what is wrong with it.

    A multipart body can be read only once, and its raw bytes are what says whether it is valid
    text, so it is held in memory whole (Galley takes no file uploads); Django then parses that copy.
    """
    try:
        request.body  # noqa: B018 - reading it is the point: it is kept for the parses below
        undecodable_fields(request)
        request.POST  # noqa: B018 - Django's own parse, whose refusals are worded below
    except RequestDataTooBig:
        return (
            f"The form is larger than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes this site accepts. "
            "Nothing was saved; shorten the text and send it again."
        )
    except (TooManyFieldsSent, TooManyFilesSent):
        return (
            f"The form has more than the {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS:,} fields this site accepts. "
            "Nothing was saved."
        )
    except MultiPartParserError:
        return "The form's body is not well-formed multipart data. Nothing was saved."
    except BadRequest as exc:
        return f"{exc} Nothing was saved."
    return ""


def _find_undecodable_fields(request: HttpRequest) -> list[str]:
    if request.method != "POST":
        return []
    encoding = request.encoding or settings.DEFAULT_CHARSET
    if request.content_type == "application/x-www-form-urlencoded":
        # Django decodes a urlencoded form as UTF-8 whatever the client says.
        return _undecodable_pairs(request.body, "utf-8")
    if request.content_type == "multipart/form-data":
        # Parsed once more as ISO-8859-1, which maps every byte to one character and back, so each
        # field's bytes can be checked in the charset Django will decode them with.
        parser = MultiPartParser(request.META, BytesIO(request.body), [MemoryFileUploadHandler()], "iso-8859-1")
        fields, _files = parser.parse()
        return sorted(
            {
                name.encode("iso-8859-1").decode(encoding, "replace")
                for name, values in fields.lists()
                for text in [name, *values]
                if not _is_text(text.encode("iso-8859-1"), encoding)
            }
        )
    return []


def _undecodable_pairs(raw: bytes, encoding: str) -> list[str]:
    pairs = parse_qsl(raw.decode("iso-8859-1"), keep_blank_values=True, encoding="iso-8859-1")
    return sorted(
        {
            name.encode("iso-8859-1").decode(encoding, "replace")
            for name, value in pairs
            if not (_is_text(name.encode("iso-8859-1"), encoding) and _is_text(value.encode("iso-8859-1"), encoding))
        }
    )


def _is_text(raw: bytes, encoding: str) -> bool:
    try:
        raw.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return False
    return True


def _admin_problem(request: HttpRequest, model_admin: Any) -> str:
    """Inputs of a model admin's pages that Django itself would answer with a 500."""
    hierarchy = model_admin.date_hierarchy
    if hierarchy and f"{hierarchy}__year" in request.GET:
        parts = [
            request.GET.get(f"{hierarchy}__{part}", default)
            for part, default in (("year", ""), ("month", "1"), ("day", "1"))
        ]
        try:
            datetime.date(*(int(part) for part in parts))
        except (ValueError, OverflowError):
            return f"{'-'.join(parts)} is not a date, so it cannot filter by {hierarchy.replace('_', ' ')}."
    if request.method == "POST" and "_selected_action" in request.POST:
        pk = model_admin.model._meta.pk
        for value in request.POST.getlist("_selected_action"):
            try:
                pk.to_python(value)
            except ValidationError:
                return (
                    f"The selected rows must be {model_admin.model._meta.verbose_name_plural} ids; "
                    f"{value[:40]!r} is not one. Nothing was changed."
                )
    return ""


def _login_problem(request: HttpRequest) -> str:
    """A username no account can have would still be recorded as a failed sign-in: refuse it first."""
    user_model = get_user_model()
    username_field = user_model._meta.get_field(user_model.USERNAME_FIELD)
    limit = getattr(username_field, "max_length", None)
    username = request.POST.get("username", "")
    if limit and len(username) > limit:
        return f"A username is at most {limit} characters; this one has {len(username):,}. Nothing was checked."
    return ""
