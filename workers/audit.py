from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from workers.models import AuditEvent


@transaction.atomic(savepoint=False)
def record_audit_event(
    *,
    acting_user: AbstractBaseUser | AnonymousUser | None,
    event_type: str,
    subject_type: str,
    subject_id: str,
    old_state: dict[str, Any] | None = None,
    new_state: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit record; joins the caller's transaction so it commits with the change."""
    actor = acting_user if acting_user is not None and acting_user.is_authenticated else None
    return AuditEvent.objects.create(
        actor=actor,
        event_type=event_type,
        subject_type=subject_type,
        subject_id=subject_id,
        old_state=old_state,
        new_state=new_state,
    )
