from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone

from workers.models import AuditEvent
from workers.prepared import execute_prepared

# Every state change writes one of these, workers' finalizes included: a prepared statement.
RECORD_SQL = f"""
INSERT INTO {AuditEvent._meta.db_table}
    (actor_id, event_type, subject_type, subject_id, old_state, new_state, created_at)
VALUES (%(actor_id)s, %(event_type)s, %(subject_type)s, %(subject_id)s, %(old_state)s::jsonb, %(new_state)s::jsonb,
        %(created_at)s)
RETURNING id
"""  # noqa: S608 -- the table name from the model; every value is a parameter


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
    with execute_prepared(RECORD_SQL, params) as cursor:
        (event_id,) = cursor.fetchone()  # type: ignore[misc]
    return AuditEvent.from_db(
        None,
        ["id", "actor_id", "event_type", "subject_type", "subject_id", "old_state", "new_state", "created_at"],
        [event_id, actor_id, event_type, subject_type, subject_id, old_state, new_state, created_at],
    )
