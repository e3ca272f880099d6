"""Desks: the newsroom's sections and their approval policies (docs/policies.md)."""

from __future__ import annotations

from typing import Any

from publishing.errors import InvalidInput
from publishing.models import Desk
from publishing.selectors.desks import get_default_desk, list_desks

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
