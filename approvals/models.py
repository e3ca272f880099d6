from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from publishing.models import Revision


class Decision(models.TextChoices):
    APPROVED = "approved", "Approved"
    CHANGES_REQUESTED = "changes_requested", "Changes requested"


class Approval(models.Model):
    """A decision on exactly one revision, bound to the payload hash the approver reviewed.

    Enforced by the database (migration 0002): (revision_id, payload_hash) is a foreign key to
    the revision's (id, payload_hash), so an approval of another hash cannot exist; rows are
    append-only; an approver cannot approve a revision they authored.
    """

    Decision = Decision

    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="approvals")
    payload_hash = models.CharField(max_length=64)
    decision = models.CharField(max_length=32, choices=Decision.choices)
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals")
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["revision", "approver"], name="approval_one_decision_per_approver"),
            models.CheckConstraint(condition=models.Q(decision__in=Decision.values), name="approval_decision_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.get_decision_display()} {self.revision} by {self.approver}"
