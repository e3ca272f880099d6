"""Desks: the newsroom's sections and their approval policies (docs/policies.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from publishing.errors import InvalidInput, NotFound
from publishing.models import Desk
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.desks import get_default_desk, list_desks
from workers.audit import record_audit_event

DEFAULT_DESK = "general"


def ensure_default_desk(*, using: str = "default") -> Desk:
    """The default desk, made if there is none (idempotent): one approval, no required group, so a
    newsroom that defines no desk keeps a single approver."""
    desk = Desk.objects.using(using).filter(is_default=True).first()
    if desk is not None:
        return desk
    desk, _created = Desk.objects.using(using).get_or_create(
        slug=DEFAULT_DESK, defaults={"name": "General", "is_default": True, "approvals_required": 1}
    )
    return desk


def clean_desk(slug: Any) -> Desk:
    """The desk named by `slug`, the default desk for None or ""; InvalidInput naming the desks for anything else."""
    if slug is None or slug == "":
        return get_default_desk()
    desks = {desk.slug: desk for desk in list_desks()}
    if not isinstance(slug, str) or slug not in desks:
        raise InvalidInput(f"No desk is called {slug!r}; choose among {', '.join(sorted(desks))}.")
    return desks[slug]


# What a desk's audit records hold: every setting, its required groups by name.
DESK_SETTINGS = ("slug", "name", "approvals_required", "is_default", "required_groups")
DESK_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
SLUG_MAX_CHARS = Desk._meta.get_field("slug").max_length or 50
NAME_MAX_CHARS = Desk._meta.get_field("name").max_length or 100
# The range the check constraint desk_approvals_required_range holds.
MIN_APPROVALS, MAX_APPROVALS = 1, 10


def desk_state(desk: Desk) -> dict[str, Any]:
    """A desk as its audit records show it (one query for a saved desk's groups)."""
    state: dict[str, Any] = {name: getattr(desk, name) for name in DESK_SETTINGS if name != "required_groups"}
    state["required_groups"] = sorted(desk.required_groups.values_list("name", flat=True)) if desk.pk else []
    return state


def check_save_desk(desk_id: int | None, *, values: Mapping[str, Any], acting_user: AnyUser) -> Desk:
    """Create a desk (`desk_id` None) or change one, as an operator; joins the caller's transaction.

    `values` holds the settings to set (DESK_SETTINGS; `required_groups` as group names). Making a
    desk the default takes the flag from the desk that had it, in the same transaction: there is
    always exactly one. Locks the desk and the current default desk (one statement, in id order).
    Refused (InvalidInput, nothing written): a slug that is not one or changes, a name taken or
    empty, approvals outside 1 to 10, a group that does not exist, and unsetting the default desk's
    flag (make another desk the default instead)."""
    acting_user = require_role(acting_user, Role.OPERATOR, to="configure desks")
    unknown = set(values) - set(DESK_SETTINGS)
    if unknown:
        raise InvalidInput(f"A desk has no setting {', '.join(sorted(unknown))}.")
    locked = list(
        Desk.objects.select_for_update(of=("self",)).filter(Q(pk=desk_id) | Q(is_default=True)).order_by("pk")
    )
    desk = next((row for row in locked if row.pk == desk_id), None) if desk_id is not None else None
    if desk_id is not None and desk is None:
        raise NotFound("There is no such desk (it was deleted meanwhile).")
    cleaned = clean_desk_values(desk, values)
    default = next((row for row in locked if row.is_default and row != desk), None)
    becomes_default = cleaned.get("is_default", desk is not None and desk.is_default)
    return do_save_desk(
        desk, values=cleaned, replaced_default=default if becomes_default else None, acting_user=acting_user
    )


def clean_desk_values(desk: Desk | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` for `desk` (None: a new one) checked and in the model's types (required_groups as
    Group rows); InvalidInput naming the first that is wrong. check_save_desk checks them again
    under its locks; the admin's form checks them first, to show the message beside the fields."""
    cleaned: dict[str, Any] = {}
    others = Desk.objects.exclude(pk=desk.pk) if desk is not None else Desk.objects.all()
    slug = values.get("slug", desk.slug if desk is not None else None)
    if desk is not None and slug != desk.slug:
        raise InvalidInput("A desk's slug never changes: API clients and audit records name the desk by it.")
    if desk is None:
        if not isinstance(slug, str) or not DESK_SLUG.fullmatch(slug) or len(slug) > SLUG_MAX_CHARS:
            raise InvalidInput(
                f'A desk\'s slug is lowercase letters and digits, joined by single hyphens (e.g. "politics"), '
                f"at most {SLUG_MAX_CHARS} characters; {slug!r} is not one."
            )
        if others.filter(slug=slug).exists():
            raise InvalidInput(f"There is a desk {slug!r} already; choose another slug.")
        cleaned["slug"] = slug
    if "name" in values or desk is None:
        name = values.get("name")
        if not isinstance(name, str) or not name.strip() or len(name.strip()) > NAME_MAX_CHARS:
            raise InvalidInput(f"A desk needs a name of 1 to {NAME_MAX_CHARS} characters.")
        if others.filter(name=name.strip()).exists():
            raise InvalidInput(f"Another desk is called {name.strip()!r}; choose another name.")
        cleaned["name"] = name.strip()
    if "approvals_required" in values:
        count = values["approvals_required"]
        if not isinstance(count, int) or isinstance(count, bool) or not MIN_APPROVALS <= count <= MAX_APPROVALS:
            raise InvalidInput(
                f"A desk requires {MIN_APPROVALS} to {MAX_APPROVALS} approvals from distinct approvers; "
                f"{count!r} is not that."
            )
        cleaned["approvals_required"] = count
    if "is_default" in values:
        if not isinstance(values["is_default"], bool):
            raise InvalidInput("Whether a desk is the default is true or false.")
        cleaned["is_default"] = values["is_default"]
        if desk is not None and desk.is_default and not values["is_default"]:
            raise InvalidInput(
                f"Desk {desk.slug!r} is the default desk (new briefs go there); make another desk the default instead."
            )
    if "required_groups" in values:
        names = values["required_groups"]
        if not isinstance(names, list | tuple) or not all(isinstance(name, str) for name in names):
            raise InvalidInput('Required groups are a list of group names, e.g. ["Legal"].')
        groups = {group.name: group for group in Group.objects.filter(name__in=names)}
        missing = sorted(set(names) - set(groups))
        if missing:
            raise InvalidInput(
                f"No group is called {', '.join(map(repr, missing))}; an operator creates groups in the admin first."
            )
        cleaned["required_groups"] = sorted(groups.values(), key=lambda group: group.name)
    return cleaned


@transaction.atomic(savepoint=False)
def do_save_desk(
    desk: Desk | None,
    *,
    values: Mapping[str, Any],
    replaced_default: Desk | None = None,
    acting_user: User | None,
) -> Desk:
    """Create (`desk` None) or change the desk, audited as desk.created / desk.changed with old and new
    state (desk_state). `values` as check_save_desk cleaned them. `replaced_default`, the other desk
    that was the default, loses the flag first (desk_one_default allows one), audited as its own
    desk.changed. Caller holds the row locks of both. Saving what is stored writes nothing."""
    old_state = None if desk is None else desk_state(desk)
    if desk is None:
        desk = Desk()
    groups = values.get("required_groups")
    for name, value in values.items():
        if name != "required_groups":
            setattr(desk, name, value)
    new_state = {name: getattr(desk, name) for name in DESK_SETTINGS if name != "required_groups"}
    new_state["required_groups"] = (
        [group.name for group in groups] if groups is not None else (old_state or {}).get("required_groups", [])
    )
    if old_state == new_state:
        return desk
    now = timezone.now()
    if replaced_default is not None and new_state["is_default"]:
        before = desk_state(replaced_default)
        replaced_default.is_default = False
        replaced_default.updated_at = now
        replaced_default.save(update_fields=["is_default", "updated_at"])
        _audit_desk("desk.changed", before, {**before, "is_default": False}, acting_user=acting_user)
    desk.updated_at = now
    if old_state is None:
        desk.created_at = now
        desk.save(force_insert=True)
    else:
        desk.save()
    if groups is not None:
        desk.required_groups.set(groups)
    _audit_desk("desk.created" if old_state is None else "desk.changed", old_state, new_state, acting_user=acting_user)
    return desk


def _audit_desk(
    event_type: str, old_state: dict[str, Any] | None, new_state: dict[str, Any] | None, *, acting_user: User | None
) -> None:
    record_audit_event(
        acting_user=acting_user,
        event_type=event_type,
        subject_type="desk",
        subject_id=(new_state or old_state or {})["slug"],
        old_state=old_state,
        new_state=new_state,
    )


def desk_deletion_refusal(desk: Desk) -> str:
    """Why the desk cannot be deleted, or "" when it can."""
    if desk.is_default:
        return f"Desk {desk.slug!r} is the default desk (new briefs go there); make another desk the default first."
    briefs = desk.briefs.count()
    if briefs:
        return (
            f"Desk {desk.slug!r} has {briefs} brief(s), which keep the desk they were created on (their approvals "
            "were counted against its policy); it cannot be deleted."
        )
    return ""


def check_delete_desk(desk_id: int, *, acting_user: AnyUser) -> None:
    """Delete a desk no brief belongs to, as an operator; joins the caller's transaction. Locks the
    desk's row. Refused (InvalidInput, nothing written) for the default desk and a desk with briefs
    (desk_deletion_refusal; the briefs' foreign key PROTECTs it as well). A desk deleted meanwhile is
    nothing to do."""
    acting_user = require_role(acting_user, Role.OPERATOR, to="delete desks")
    desk = Desk.objects.select_for_update(of=("self",)).filter(pk=desk_id).first()
    if desk is None:
        return
    refusal = desk_deletion_refusal(desk)
    if refusal:
        raise InvalidInput(refusal)
    do_delete_desk(desk, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_delete_desk(desk: Desk, *, acting_user: User | None) -> None:
    """Delete the desk, audited as desk.deleted with its last state. Caller holds its row lock and has
    checked desk_deletion_refusal."""
    old_state = desk_state(desk)
    desk.delete()
    _audit_desk("desk.deleted", old_state, None, acting_user=acting_user)
