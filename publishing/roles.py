"""Who may do what: one group per role (PRODUCT.md §1).

Editors create and edit briefs, Approvers approve, Operators see everything (and work the
admin). A signed-in user in none of these groups is refused everywhere.
"""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


class Role(StrEnum):
    EDITOR = "Editors"
    APPROVER = "Approvers"
    OPERATOR = "Operators"


def user_roles(user: AbstractBaseUser | AnonymousUser) -> frozenset[Role]:
    """The user's roles, cached on the user object for the rest of the request."""
    if not user.is_authenticated or not user.is_active:
        return frozenset()
    cached = getattr(user, "_galley_roles", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]
        cached = frozenset(role for role in Role if role.value in names)
        user._galley_roles = cached  # type: ignore[union-attr]
    return cached


def has_role(user: AbstractBaseUser | AnonymousUser, role: Role) -> bool:
    return role in user_roles(user)


def can_view(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user_roles(user))
