"""Galley's URLs plus one view that fails, for the 500 page's tests (tests/galley/test_error_pages.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from galley.urls import urlpatterns as galley_urlpatterns


def fails(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug in a view")


urlpatterns = [path("test-failure/", fails), *galley_urlpatterns]
