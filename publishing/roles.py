"""Who may do what: one group per role (docs/editorial.md#web-ui).

Editors create and edit briefs, Approvers approve, Operators see everything (and work the
admin). A signed-in user in none of these groups is refused everywhere.
"""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, Permission, User
from django.db.models import Q

from publishing.errors import PermissionRefused

# Operators read everything in the admin; every change goes through an audited action.
OPERATOR_APPS = ("publishing", "approvals", "workers", "axes")


class Role(StrEnum):
    EDITOR = "Editors"
    APPROVER = "Approvers"
    OPERATOR = "Operators"


# The group whose approval a brief flagged as needing legal review requires (docs/policies.md#legal);
# its members approve as approvers (they are in Approvers too) and only they lift the flag.
LEGAL_GROUP = "Legal"


# Whoever a request or a caller names: signed in or not.
AnyUser = AbstractBaseUser | AnonymousUser


def user_group_names(user: AnyUser) -> frozenset[str]:
    """The names of the user's groups (roles, and groups such as Legal that an approval policy may
    require; none for an inactive or anonymous user), cached on the user object for the rest of the
    request: one query."""
    if not isinstance(user, User) or not user.is_active:
        return frozenset()
    cached = user.__dict__.get("_galley_groups")
    if cached is None:
        cached = user.__dict__["_galley_groups"] = frozenset(user.groups.values_list("name", flat=True))
    return cached


def user_roles(user: AnyUser) -> frozenset[Role]:
    """The user's roles, from their groups (cached for the rest of the request)."""
    names = user_group_names(user)
    return frozenset(role for role in Role if role.value in names)


def in_legal(user: AnyUser) -> bool:
    """Whether the user is an active member of Legal (LEGAL_GROUP)."""
    return LEGAL_GROUP in user_group_names(user)


def has_role(user: AnyUser, role: Role) -> bool:
    return role in user_roles(user)


def can_view(user: AnyUser) -> bool:
    return bool(user_roles(user))


def require_role(user: AnyUser, role: Role, *, to: str) -> User:
    """The user, as the account that acts, if they hold `role`; otherwise PermissionRefused naming
    what they tried. Only a signed-in, active account holds a role."""
    if not isinstance(user, User) or not has_role(user, role):
        raise PermissionRefused(f"Only members of {role.value} can {to}.")
    return user


# Who take part in a review: assignment, comment threads, and the legal-review flag.
REVIEWERS = (Role.EDITOR, Role.APPROVER)


def require_reviewer(user: AnyUser, *, to: str) -> User:
    """The user if they are an editor or an approver (who take part in a review); else PermissionRefused."""
    if not isinstance(user, User) or not any(has_role(user, role) for role in REVIEWERS):
        raise PermissionRefused(f"Only members of Editors or Approvers can {to}.")
    return user


# How many of the accounts that can grant roles a page names.
GRANTERS_SHOWN = 5


def list_role_granters() -> list[str]:
    """Usernames of the active accounts that can grant a role (staff who may change users in the
    admin, which is where group membership is set), at most GRANTERS_SHOWN, by name."""
    may_change_users = (
        Q(is_superuser=True)
        | Q(user_permissions__content_type__app_label="auth", user_permissions__codename="change_user")
        | Q(groups__permissions__content_type__app_label="auth", groups__permissions__codename="change_user")
    )
    accounts = User.objects.filter(may_change_users, is_active=True, is_staff=True).order_by("username")
    return list(accounts.values_list("username", flat=True).distinct()[:GRANTERS_SHOWN])


def ensure_role_groups(*, using: str = "default") -> None:
    """Create the role groups and give Operators read access to every Galley model. Idempotent."""
    for name in (*(role.value for role in Role), LEGAL_GROUP):
        Group.objects.using(using).get_or_create(name=name)
    operators = Group.objects.using(using).get(name=Role.OPERATOR.value)
    view_permissions = Permission.objects.using(using).filter(
        content_type__app_label__in=OPERATOR_APPS, codename__startswith="view_"
    )
    operators.permissions.add(*view_permissions)
    operators.permissions.add(
        *Permission.objects.using(using).filter(content_type__app_label="workers", codename="operate_operation")
    )
