"""Briefs: creating one and replacing its source material; each starts a summary run."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from publishing.actions.revisions import TITLE_MAX_CHARS
from publishing.actions.summaries import do_start_summary_run
from publishing.hashing import source_hash
from publishing.identities import brief_public_id
from publishing.models import Brief
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors import access_brief
from publishing.validation import clean_text
from workers.audit import record_audit_event

BRIEF_NUMBER_SEQUENCE = "publishing_brief_number_seq"


def check_create_brief(*, title: Any, source_material: Any, acting_user: AnyUser) -> Brief:
    acting_user = require_role(acting_user, Role.EDITOR, to="create briefs")
    return do_create_brief(
        title=clean_text(title, field="Title", max_chars=TITLE_MAX_CHARS, required=True),
        source_material=clean_text(
            source_material, field="Source material", max_chars=settings.GALLEY_MAX_BODY_CHARS, required=False
        ),
        acting_user=acting_user,
    )


@transaction.atomic(savepoint=False)
def do_create_brief(*, title: str, source_material: str, acting_user: User) -> Brief:
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(%s)", [BRIEF_NUMBER_SEQUENCE])
        (number,) = cursor.fetchone()
    brief = Brief.objects.create(
        public_id=brief_public_id(number),
        title=title,
        source_material=source_material,
        source_hash=source_hash(source_material),
        author=acting_user,
    )
    record_audit_event(
        acting_user=acting_user,
        event_type="brief.created",
        subject_type="brief",
        subject_id=brief.public_id,
        new_state={"title": title, "status": brief.status},
    )
    do_start_summary_run(brief)
    return brief


def check_update_source_material(public_id: str, *, source_material: Any, acting_user: AnyUser) -> Brief:
    """Replace the brief's source material; a new summary run starts, older runs stop at their next step."""
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    text = clean_text(
        source_material, field="Source material", max_chars=settings.GALLEY_MAX_BODY_CHARS, required=False
    )
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    return do_update_source_material(brief, source_material=text, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_update_source_material(brief: Brief, *, source_material: str, acting_user: User) -> Brief:
    """Caller holds the brief's row lock. The same text again writes nothing."""
    digest = source_hash(source_material)
    if digest == brief.source_hash:
        return brief
    old_hash = brief.source_hash
    brief.source_material = source_material
    brief.source_hash = digest
    brief.updated_at = timezone.now()
    brief.save(update_fields=["source_material", "source_hash", "updated_at"])
    record_audit_event(
        acting_user=acting_user,
        event_type="brief.source_changed",
        subject_type="brief",
        subject_id=brief.public_id,
        old_state={"source_hash": old_hash},
        new_state={"source_hash": digest},
    )
    do_start_summary_run(brief)
    return brief
