from __future__ import annotations

import difflib
from typing import Any

from django.db.models import Max, Q, QuerySet

from publishing.errors import NotFound
from publishing.models import Brief, Revision


def list_briefs(*, query: str = "", status: str = "") -> QuerySet[Brief]:
    # The aggregate drops Meta.ordering, so the order is restated (pagination needs a stable one).
    briefs = (
        Brief.objects.select_related("author")
        .annotate(latest_revision_number=Max("revisions__number"))
        .order_by("-created_at", "-id")
    )
    if query:
        briefs = briefs.filter(Q(title__icontains=query) | Q(public_id__iexact=query.strip()))
    if status:
        briefs = briefs.filter(status=status)
    return briefs


def get_latest_revision(brief: Brief) -> Revision | None:
    return brief.revisions.select_related("author").order_by("-number").first()


def list_revisions(brief: Brief) -> QuerySet[Revision]:
    return brief.revisions.select_related("author").order_by("-number")


def get_revision(brief: Brief, number: int) -> Revision:
    try:
        return brief.revisions.select_related("author", "brief").get(number=number)
    except Revision.DoesNotExist:
        raise NotFound(f"{brief.public_id} has no revision {number}.") from None


def diff_payloads(old: dict[str, Any] | None, new: dict[str, Any], *, old_label: str, new_label: str) -> list[str]:
    """Unified diff of two payloads, field by field, as lines for display (never HTML)."""

    def lines(payload: dict[str, Any] | None) -> list[str]:
        if payload is None:
            return []
        out = [f"# title: {payload.get('title', '')}"]
        out.extend(str(payload.get("body", "")).splitlines())
        for key in sorted(set(payload) - {"title", "body"}):
            out.append(f"# {key}: {payload[key]}")
        return out

    return list(difflib.unified_diff(lines(old), lines(new), fromfile=old_label, tofile=new_label, lineterm=""))
