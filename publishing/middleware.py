from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from publishing.errors import NotFound, PermissionRefused


class RefusalMiddleware:
    """Turns an action's refusal into a page that says why: 403 for permissions, 404 for absences,
    and 400 for an address carrying a NUL character, which PostgreSQL cannot compare with any
    text (it would fail the lookup with a 500). Form fields are checked by the actions, which
    re-render the form with the text kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path or any(
            "\x00" in name or "\x00" in value for name, values in request.GET.lists() for value in values
        ):
            message = "The address contains a NUL character (%00), which no brief, revision or filter can hold."
            return render(request, "refused.html", {"message": message, "title": "Bad request"}, status=400)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, PermissionRefused):
            return render(request, "refused.html", {"message": exception.message, "title": "Not allowed"}, status=403)
        if isinstance(exception, NotFound):
            return render(request, "refused.html", {"message": exception.message, "title": "Not found"}, status=404)
        return None
