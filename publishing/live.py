"""Live status regions: the partial views htmx polls (publishing/static/publishing/htmx.min.js).

A page renders complete, then polls one partial URL for its regions while something may still
change; each answer redraws every region that can change from one state (the main one in place, the
others out of band), so no region is ever ahead of another. No form anyone types in is ever inside a
region. A partial answers 200 while there may be more to come and 286 (htmx: swap this, then stop
polling) once nothing can change any more."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django_htmx.http import HTMX_STOP_POLLING, HttpResponseStopPolling, reswap


@dataclass(frozen=True)
class Partial:
    template: str
    context: dict[str, Any]
    live: bool  # something is still in progress: poll again


def live_partial(page: str) -> Callable[[Callable[..., Partial]], Callable[..., HttpResponse]]:
    """Turn a view returning a Partial into the partial's URL. `page` names the full page's URL
    (same arguments): a request that is not htmx's (a person opening the URL) is sent there."""

    def decorate(view: Callable[..., Partial]) -> Callable[..., HttpResponse]:
        @login_not_required
        @never_cache
        @require_GET
        @functools.wraps(view)
        def partial(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                # Signed out meanwhile (another tab, session expiry): stop polling and leave the
                # page as it is, rather than swap the sign-in page into a status region.
                return reswap(HttpResponseStopPolling(), "none")
            if not getattr(request, "htmx", False):
                return redirect(page, *args, **kwargs)
            answer = view(request, *args, **kwargs)
            return render(request, answer.template, answer.context, status=200 if answer.live else HTMX_STOP_POLLING)

        return partial

    return decorate
