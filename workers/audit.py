from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction

from workers.models import AuditEvent


@transaction.atomic(savepoint=False)
def record_audit_event(
    *,
    acting_user: User | AnonymousUser | None,
    event_type: str,
    subject_type: str,
    subject_id: str,
    old_state: dict[str, Any] | None = None,
    new_state: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit record; joins the caller's transaction so it commits with the change.
    `acting_user` None is the system itself (workers, the pipeline); nobody signed in is recorded
    as no actor too."""
    return AuditEvent.objects.create(
        actor=acting_user if isinstance(acting_user, User) else None,
        event_type=event_type,
        subject_type=subject_type,
        subject_id=subject_id,
        old_state=old_state,
        new_state=new_state,
    )
