from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from publishing.roles import Role, user_roles


def roles(request: HttpRequest) -> dict[str, Any]:
    held = user_roles(request.user)
    return {
        "is_editor": Role.EDITOR in held,
        "is_approver": Role.APPROVER in held,
        "is_operator": Role.OPERATOR in held,
    }
