"""{% no_role_help %}: what a signed-in account with no role sees instead of a refusal that
links back to a page it is refused again (templates/refused.html)."""

from __future__ import annotations

from typing import Any

from django import template

from publishing.roles import list_role_granters

register = template.Library()


@register.inclusion_tag("_no_role.html", takes_context=True)
def no_role_help(context: template.Context, message: object = "") -> dict[str, Any]:
    """`message` is the refusal's own reason (what the account tried), shown above the help."""
    return {
        "user": context["user"],
        "message": message,
        "granters": list_role_granters(),
        "csrf_token": context.get("csrf_token"),
    }
