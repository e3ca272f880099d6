"""Sign-in throttling with two limits (django-axes; GALLEY_LOGIN_*, docs/configuration.md#sign-in-throttling).

- Per account and address: `GALLEY_LOGIN_FAILURE_LIMIT` failures for one account from one address
  lock that account from that address. Everyone else behind the same proxy or NAT signs in as usual.
- Per address: `GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT`, much higher, failures from one address, for any
  accounts, lock every account from that address (one client guessing many accounts).

Axes counts its AccessAttempt rows by the lockout parameters (here the pair) against one limit; the
handler adds the address's own count and limit. A success resets the pair's rows only, so one person
signing in does not wipe the count of someone guessing other accounts from the same address.

The address is the connection's, or behind a trusted proxy the one its header names
(`GALLEY_CLIENT_IP_HEADER`, off by default: a client could otherwise claim any address).
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class LockScope(StrEnum):
    ACCOUNT = "account"  # this account from this address
    ADDRESS = "address"  # every account from this address


class LoginThrottle(AxesDatabaseHandler):
    """Axes' database handler, with the per-address limit beside the per-(account, address) one."""

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        """The count axes compares with its limit (the pair's): the pair's own count, or at least
        that limit once the address as a whole reached its own."""
        failures = super().get_failures(request, credentials)
        if self.lock_scope(request) is LockScope.ADDRESS:
            return max(failures, get_failure_limit(request, credentials))
        return failures

    def lock_scope(self, request: HttpRequest) -> LockScope:
        """ADDRESS when the failures from the request's address within the cool-off, for any account,
        reached the address's limit; else ACCOUNT (whether the pair is locked is axes' count)."""
        recent = AccessAttempt.objects.filter(
            ip_address=request.axes_ip_address,  # type: ignore[attr-defined]
            attempt_time__gte=get_cool_off_threshold(request),
        )
        failures = recent.aggregate(total=Sum("failures_since_start"))["total"] or 0
        return LockScope.ADDRESS if failures >= settings.GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT else LockScope.ACCOUNT


def client_ip_address(request: HttpRequest) -> str | None:
    """The client's address (settings.AXES_CLIENT_IP_CALLABLE): the connection's, or behind a trusted
    proxy the right-most address of its header, the one that proxy added itself (addresses to its left
    are whatever the client sent). A request without a valid one there came past the proxy: its
    connection's address is the truth."""
    header = settings.GALLEY_CLIENT_IP_META_KEY
    if header:
        forwarded = [part.strip() for part in request.META.get(header, "").split(",") if part.strip()]
        if forwarded:
            try:
                return str(ipaddress.ip_address(forwarded[-1]))
            except ValueError:
                pass
    return request.META.get("REMOTE_ADDR")


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """The lockout page (settings.AXES_LOCKOUT_CALLABLE), saying which lock holds and for how long."""
    scope = LoginThrottle().lock_scope(request)
    limit = settings.GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT if scope is LockScope.ADDRESS else settings.AXES_FAILURE_LIMIT
    context = {
        "scope": scope.value,
        "failure_limit": limit,
        "minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
    }
    return render(request, "registration/locked_out.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)
