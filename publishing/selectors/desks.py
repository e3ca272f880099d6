"""Desks as the forms, the API and the approval policy read them."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db.models import Prefetch, QuerySet

from publishing.models import Desk


def list_desks() -> QuerySet[Desk]:
    """Every desk with its required groups (two queries), by name."""
    return Desk.objects.prefetch_related(Prefetch("required_groups", queryset=Group.objects.order_by("name")))


def get_default_desk() -> Desk:
    """The default desk (migration 0016 makes it; publishing.actions.desks.ensure_default_desk after a flush)."""
    return Desk.objects.get(is_default=True)
