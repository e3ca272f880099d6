from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from publishing.errors import NotFound, PermissionRefused


class RefusalMiddleware:
    """Turns an action's refusal into a page that says why: 403 for permissions, 404 for absences."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, PermissionRefused):
            return render(request, "refused.html", {"message": exception.message, "title": "Not allowed"}, status=403)
        if isinstance(exception, NotFound):
            return render(request, "refused.html", {"message": exception.message, "title": "Not found"}, status=404)
        return None
