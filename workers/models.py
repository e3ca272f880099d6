"""The durable machinery's records.

The audit log lives here, at the bottom of the dependency graph, because every app writes to
it (editorial actions, approvals, and the operator actions on operations) and `workers` must
import no domain app.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    """Append-only: the database refuses UPDATE and DELETE (trigger in migration 0001)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="audit_events",
        help_text="Who did it; empty for the system itself (workers, pipeline).",
    )
    event_type = models.CharField(max_length=64)
    subject_type = models.CharField(max_length=64)
    subject_id = models.CharField(max_length=200)
    old_state = models.JSONField(null=True, blank=True)
    new_state = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["subject_type", "subject_id"], name="audit_subject_idx")]

    def __str__(self) -> str:
        return f"{self.event_type} {self.subject_type}:{self.subject_id}"
