from __future__ import annotations

from django.db.models import QuerySet

from approvals.models import Approval
from publishing.models import Revision


def list_decisions(revision: Revision) -> QuerySet[Approval]:
    return revision.approvals.select_related("approver").order_by("created_at", "id")


def get_valid_approval(revision: Revision) -> Approval | None:
    """An approval of exactly this revision and its payload hash, or None.

    An approval of another revision never counts, however similar its payload.
    """
    return (
        Approval.objects.filter(
            revision=revision, payload_hash=revision.payload_hash, decision=Approval.Decision.APPROVED
        )
        .order_by("created_at", "id")
        .first()
    )
