"""Editorial writes: briefs and immutable revisions.

check_* validates input and authorises the acting user, then calls do_*; do_* assumes valid
input, writes, and records the audit event in the same transaction. Every action joins the
caller's transaction (entry points open `atomic(durable=True)`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, Permission
from django.db import connection, transaction
from django.utils import timezone

from publishing.delivery import PUBLISH, publish_key
from publishing.errors import InvalidInput, NotFound, PermissionRefused, RevisionConflict
from publishing.hashing import PayloadError, payload_hash, source_hash
from publishing.models import Brief, Revision, SummaryRun
from publishing.pipeline import canonical_artifacts, do_start_summary_run, suggested_payload
from publishing.roles import Role, can_view, has_role
from publishing.selectors import get_latest_revision
from workers.actions import Enqueued, add_dependency, enqueue_operation, supersede_waiting_operation
from workers.audit import record_audit_event
from workers.models import Dependency, Operation

User = AbstractBaseUser | AnonymousUser

BRIEF_NUMBER_SEQUENCE = "publishing_brief_number_seq"
TITLE_MAX_CHARS = 200

_S = Brief.Status
# The brief's allowed status moves, in one place. Another approver's later decision on the
# same revision may follow a request for changes; publishing follows an approval.
BRIEF_TRANSITIONS: dict[str, set[str]] = {
    _S.DRAFTING: {_S.IN_REVIEW},
    _S.IN_REVIEW: {_S.IN_REVIEW, _S.APPROVED, _S.CHANGES_REQUESTED},
    _S.CHANGES_REQUESTED: {_S.IN_REVIEW, _S.APPROVED, _S.CHANGES_REQUESTED},
    _S.APPROVED: {_S.IN_REVIEW, _S.APPROVED, _S.PUBLISHED},
    _S.PUBLISHED: {_S.IN_REVIEW},
}

# Operators read everything in the admin; every change goes through an audited action.
OPERATOR_APPS = ("publishing", "approvals", "workers")


def require_role(user: User, role: Role, *, to: str) -> None:
    if not has_role(user, role):
        raise PermissionRefused(f"Only members of {role.value} can {to}.")


def access_brief(public_id: str, *, acting_user: User, lock: bool = False) -> Brief:
    """The brief, if the user may see it; with `lock`, its row is locked until the transaction ends."""
    if not can_view(acting_user):
        raise PermissionRefused("You need the Editors, Approvers or Operators role to see briefs.")
    briefs = Brief.objects.select_related("author")
    if lock:
        briefs = briefs.select_for_update(of=("self",))
    try:
        return briefs.get(public_id=public_id)
    except Brief.DoesNotExist:
        raise NotFound(f"There is no brief {public_id}.") from None


def clean_text(value: Any, *, field: str, max_chars: int, required: bool) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text.")
    if "\x00" in value:
        raise InvalidInput(f"{field} contains a NUL character, which cannot be stored.")
    value = value.strip()
    if required and not value:
        raise InvalidInput(f"{field} is required.")
    if len(value) > max_chars:
        raise InvalidInput(f"{field} is {len(value):,} characters long; the limit is {max_chars:,}.")
    return value


def set_brief_status(brief: Brief, status: str) -> str:
    """Move the brief (whose row the caller has locked) to `status`; returns the old status."""
    old = brief.status
    if status not in BRIEF_TRANSITIONS[old]:
        raise InvalidInput(f"{brief.public_id} cannot go from {old} to {status}.")
    brief.status = status
    brief.updated_at = timezone.now()
    brief.save(update_fields=["status", "updated_at"])
    return old


def check_create_brief(*, title: Any, source_material: Any, acting_user: User) -> Brief:
    require_role(acting_user, Role.EDITOR, to="create briefs")
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
        public_id=f"brief-{number:03d}",
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


def check_create_revision(
    public_id: str, *, base_number: Any, title: Any, body: Any, acting_user: User
) -> tuple[Revision, bool]:
    """Write the editor's text as the next revision of the brief, if nobody wrote one meanwhile.

    `base_number` is the revision the editor started from (0 for the first). Returns the
    revision and whether it was created. Raises RevisionConflict (nothing written) when a
    newer revision exists.
    """
    require_role(acting_user, Role.EDITOR, to="edit briefs")
    try:
        base = int(base_number)
    except (TypeError, ValueError):
        base = -1
    if base < 0:
        raise InvalidInput("The revision you edited is missing or not a valid number; reload the page.")
    payload = {
        "title": clean_text(title, field="Title", max_chars=TITLE_MAX_CHARS, required=True),
        "body": clean_text(body, field="Body", max_chars=settings.GALLEY_MAX_BODY_CHARS, required=True),
    }
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    return do_create_revision(brief, base_number=base, payload=payload, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_create_revision(
    brief: Brief, *, base_number: int, payload: dict[str, Any], acting_user: User
) -> tuple[Revision, bool]:
    """Caller holds the brief's row lock, which serialises revision numbering per brief.

    Idempotent for a repeated submission: the same text on the same base returns the revision
    it already created, and text equal to the latest revision writes nothing.
    """
    try:
        digest = payload_hash(payload)
    except PayloadError as exc:
        raise InvalidInput(str(exc)) from None
    latest = get_latest_revision(brief)
    latest_number = latest.number if latest is not None else 0
    if latest is not None and latest.payload_hash == digest and base_number in (latest_number, latest_number - 1):
        return latest, False
    if base_number != latest_number:
        raise RevisionConflict(newer=latest, base_number=base_number)

    revision = Revision.objects.create(
        brief=brief, number=latest_number + 1, payload=payload, payload_hash=digest, author=acting_user
    )
    old_status = set_brief_status(brief, Brief.Status.IN_REVIEW)
    record_audit_event(
        acting_user=acting_user,
        event_type="revision.created",
        subject_type="revision",
        subject_id=f"{brief.public_id}/revision-{revision.number}",
        old_state={"status": old_status, "latest_revision": latest_number},
        new_state={"status": brief.status, "latest_revision": revision.number, "payload_hash": digest},
    )
    return revision, True


def check_update_source_material(public_id: str, *, source_material: Any, acting_user: User) -> Brief:
    """Replace the brief's source material; a new summary run starts, older runs stop at their next step."""
    require_role(acting_user, Role.EDITOR, to="edit briefs")
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


def check_use_suggestion(public_id: str, *, run_number: Any, acting_user: User) -> tuple[Revision, bool]:
    """Turn a completed run's suggested draft into the brief's next revision, as the editor's own."""
    require_role(acting_user, Role.EDITOR, to="edit briefs")
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    run = brief.summary_runs.filter(number=run_number, status=SummaryRun.Status.COMPLETED, suggestion=True).first()
    if run is None:
        raise NotFound(f"{public_id} has no completed suggestion from summary run {run_number}.")
    latest = get_latest_revision(brief)
    payload = suggested_payload(canonical_artifacts(run))
    return do_create_revision(
        brief, base_number=latest.number if latest else 0, payload=payload, acting_user=acting_user
    )


@transaction.atomic(savepoint=False)
def do_request_publication(revision: Revision) -> Enqueued:
    """Record the intent to publish `revision`, in the approval's transaction (invariant 5).

    Idempotent: a second approval of the same revision returns the same operation. Per brief,
    publishes never regress (invariant 4): an older publish that has not been claimed yet is
    superseded; one that may already be in flight becomes a prerequisite (completion edge),
    so this one is claimed only after it finished either way.
    """
    public_id = revision.brief.public_id
    enqueued = enqueue_operation(
        key=publish_key(public_id, revision.number),
        kind=PUBLISH,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        arguments={"revision": revision.number},
    )
    if not enqueued.created:
        return enqueued
    older = (
        Operation.objects.unfinished()
        .for_subject("brief", public_id)
        .filter(kind=PUBLISH)
        .exclude(id=enqueued.operation.id)
        .order_by("id")
    )
    for operation in older:
        if int(operation.arguments["revision"]) >= revision.number:
            continue
        reason = f"revision {revision.number} was approved before revision {operation.arguments['revision']} was sent"
        if not supersede_waiting_operation(operation, reason=reason):
            add_dependency(enqueued.operation, prerequisite=operation, requires=Dependency.Requires.COMPLETION)
    return enqueued


def ensure_role_groups(*, using: str = "default") -> None:
    """Create the role groups and give Operators read access to every Galley model. Idempotent."""
    for role in Role:
        Group.objects.using(using).get_or_create(name=role.value)
    operators = Group.objects.using(using).get(name=Role.OPERATOR.value)
    view_permissions = Permission.objects.using(using).filter(
        content_type__app_label__in=OPERATOR_APPS, codename__startswith="view_"
    )
    operators.permissions.add(*view_permissions)
    operators.permissions.add(
        *Permission.objects.using(using).filter(content_type__app_label="workers", codename="operate_operation")
    )
