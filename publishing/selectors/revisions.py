"""Revisions: the latest, one by number, every number, what one restored, and two side by side."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from publishing.diffs import PayloadDiff, diff_payloads
from publishing.errors import InvalidInput, NotFound
from publishing.identities import revision_subject_id
from publishing.models import Brief, Revision
from workers.models import AuditEvent


def get_latest_revision(brief: Brief) -> Revision | None:
    return brief.revisions.select_related("author").order_by("-number").first()


def list_revisions(brief: Brief) -> QuerySet[Revision]:
    return brief.revisions.select_related("author").order_by("-number")


def get_revision(brief: Brief, number: int) -> Revision:
    try:
        # With the brief's desk: the revision page and the API read its approval policy.
        return brief.revisions.select_related("author", "brief__desk").get(number=number)
    except Revision.DoesNotExist:
        raise NotFound(f"{brief.public_id} has no revision {number}.") from None


def get_revisions_by_number(brief: Brief, numbers: set[int]) -> dict[int, Revision]:
    """Those of `numbers` that are revisions of the brief, by number, in one query."""
    return {
        revision.number: revision for revision in brief.revisions.select_related("author").filter(number__in=numbers)
    }


def list_revision_numbers(brief: Brief) -> list[int]:
    """Every revision number of the brief, newest first. Revisions are numbered 1, 2, 3… with no gap
    and never deleted (constraints and trigger of migration 0002), so the latest number says them all."""
    latest = brief.revisions.order_by("-number").values_list("number", flat=True).first()
    return list(range(latest or 0, 0, -1))


def get_restored_number(revision: Revision) -> int | None:
    """The revision whose content `revision` restored, as its creation's audit record says, if any."""
    state = (
        AuditEvent.objects.filter(
            subject_type="revision",
            subject_id=revision_subject_id(revision.brief.public_id, revision.number),
            event_type="revision.created",
        )
        .values_list("new_state", flat=True)
        .first()
    )
    restores = (state or {}).get("restores_revision")
    return restores if isinstance(restores, int) else None


def diff_revisions(old: Revision | None, new: Revision) -> PayloadDiff:
    return diff_payloads(
        old.payload if old is not None else None,
        new.payload,
        old_label=f"revision {old.number}" if old is not None else "(nothing)",
        new_label=f"revision {new.number}",
    )


@dataclass(frozen=True)
class RevisionComparison:
    """Two revisions of one brief side by side (the compare page); `diff` is None when there is
    nothing to compare yet (fewer than two revisions)."""

    brief: Brief
    old: Revision | None
    new: Revision | None
    diff: PayloadDiff | None
    numbers: list[int]  # every revision number of the brief, newest first, for the compare form


def get_revision_comparison(brief: Brief, *, from_number: int | None, to_number: int | None) -> RevisionComparison:
    """Revision `from_number` against `to_number`: by default the latest against the one before it.

    Raises InvalidInput, saying why, for equal numbers or a number that is no revision of the brief.
    """
    numbers = list_revision_numbers(brief)
    if from_number is None and to_number is None and len(numbers) < 2:
        return RevisionComparison(brief, None, None, None, numbers)
    new_number = to_number if to_number is not None else (numbers[0] if numbers else 0)
    old_number = from_number if from_number is not None else new_number - 1
    if old_number == new_number:
        raise InvalidInput(f"Both sides are revision {new_number}: pick two different revisions to compare.")
    missing = [number for number in (old_number, new_number) if number not in numbers]
    if missing:
        held = f"its revisions are 1 to {numbers[0]}" if numbers else "it has no revision yet"
        raise InvalidInput(f"{brief.public_id} has no revision {missing[0]}: {held}.")
    found = get_revisions_by_number(brief, {old_number, new_number})
    old, new = found[old_number], found[new_number]
    return RevisionComparison(brief, old, new, diff_revisions(old, new), numbers)
