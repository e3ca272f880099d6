from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone
from psycopg.rows import dict_row

from workers.models import AuditEvent
from workers.prepared import execute_prepared, inserted
from workers.sql import RECORD_AUDIT_EVENT_SQL


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
    actor_id = acting_user.pk if isinstance(acting_user, User) else None
    created_at = timezone.now()
    params = {
        "actor_id": actor_id,
        "event_type": event_type,
        "subject_type": subject_type,
        "subject_id": subject_id,
        # As the JSONField stores them: None is SQL NULL (the fields are nullable), the rest JSON.
        "old_state": None if old_state is None else json.dumps(old_state),
        "new_state": None if new_state is None else json.dumps(new_state),
        "created_at": created_at,
    }
    with execute_prepared(RECORD_AUDIT_EVENT_SQL, params, row_factory=dict_row) as cursor:
        (row,) = cursor.fetchall()
    return inserted(
        AuditEvent(
            id=row["id"],
            actor_id=actor_id,
            event_type=event_type,
            subject_type=subject_type,
            subject_id=subject_id,
            old_state=old_state,
            new_state=new_state,
            created_at=created_at,
        )
    )
