from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest

from publishing.roles import Role, in_legal, user_roles


def roles(request: HttpRequest) -> dict[str, Any]:
    # A request refused before the authentication middleware ran (a disallowed Host: the 400 page)
    # has no user; it has no role either, rather than a second error in the error page.
    user = getattr(request, "user", AnonymousUser())
    held = user_roles(user)
    return {
        "is_editor": Role.EDITOR in held,
        "is_approver": Role.APPROVER in held,
        "is_operator": Role.OPERATOR in held,
        # Legal lifts a brief's legal-review flag (publishing.actions.legal).
        "is_legal": in_legal(user),
    }
