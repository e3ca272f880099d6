from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from approvals.selectors import get_nav_counts
from publishing.roles import Role, can_view, has_role


def review_counts(request: HttpRequest) -> dict[str, Any]:
    """The nav's counts (unread notifications; the inbox, for approvers): one query, made only
    when a page shows them."""
    user = getattr(request, "user", None)  # none before the authentication middleware (the 400 page)
    if not isinstance(user, User) or not can_view(user):
        return {}
    return {"review_counts": SimpleLazyObject(lambda: get_nav_counts(user, with_inbox=has_role(user, Role.APPROVER)))}
