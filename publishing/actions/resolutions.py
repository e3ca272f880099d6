"""Settling a publication problem (docs/operations.md#settling-problems): an operator adopts what the target holds,
looks the key up again, retries after a fix or cancels with a reason; a drift (the site shows other
content than the approved revision) is ended by adopting what the site shows as a new revision,
republishing the approved revision over it, or accepting it. Galley itself closes the problems a
newer published revision replaced.

No action calls the target: adopting makes the revision's publish look its key up at the target
and adopt what is there (the worker's reconcile path), and its verification then observes it, so
nothing unapproved or older than what is published can come of it (docs/invariants.md#i3, #i4, #i10). Each
action locks the operation's row, re-checks, audits, and writes nothing when there is nothing
to do (then its message says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from publishing.actions.revisions import do_create_revision
from publishing.actions.webhooks import do_emit_publication_resolved
from publishing.errors import InvalidInput
from publishing.hashing import PayloadError, payload_hash
from publishing.identities import (
    DRIFT_CHECK,
    REPUBLISH,
    publish_key,
    republish_key,
    revision_number,
)
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.problems import PROBLEM_KINDS, PROBLEM_OPEN, DriftShown, get_publication_problem
from publishing.selectors.publications import get_published_number
from publishing.selectors.revisions import get_latest_revision, get_revision
from publishing.story import clean_story, html_paragraphs, render_story, story_fields
from publishing.validation import clean_text
from workers.actions.enqueue import enqueue_operation
from workers.actions.operator import do_cancel_operation, do_retry_operation_now
from workers.audit import record_audit_event
from workers.models import Conflict, Operation, OperationStatus

OPEN = PROBLEM_OPEN

# The longest reason or resolution an operator may give (a cancellation, a conflict settled).
NOTE_MAX_CHARS = 1000


@dataclass(frozen=True)
class Outcome:
    changed: bool
    message: str


def _lock(operation: Operation) -> Operation:
    locked = Operation.objects.select_for_update(of=("self",)).get(id=operation.id)
    if locked.kind not in PROBLEM_KINDS:
        raise ValueError(f"{locked.key} is not a publication's or a retraction's operation")
    return locked


def _resolved(locked: Operation, resolution: str, message: str) -> Outcome:
    """An operator settled the problem: subscribers hear it (publication.resolved) with the outcome."""
    do_emit_publication_resolved(locked, resolution=resolution, message=message)
    return Outcome(True, message)


def _not_open(locked: Operation) -> Outcome:
    return Outcome(False, f"Nothing to do: {locked.key} is {locked.get_status_display().lower()} now.")


@transaction.atomic(savepoint=False)
def check_adopt_target_revision(operation: Operation, *, acting_user: AnyUser) -> Outcome:
    """Adopt the approved revision the target holds: its publish looks its key up and adopts it
    (then it is verified); this operation, if it is another revision's, is cancelled for it."""
    user = require_role(acting_user, Role.OPERATOR, to="settle publication problems")
    adoptable = get_publication_problem(operation).adoptable
    if adoptable is not None:
        # Both operation rows, in id order (docs/architecture.md#lock-order), before the re-check under lock.
        publish_id = Operation.objects.values_list("id", flat=True).get(
            key=publish_key(operation.subject_id, adoptable.number, operation.channel)
        )
        for operation_id in sorted({operation.id, publish_id}):
            Operation.objects.select_for_update(of=("self",)).get(id=operation_id)
    locked = _lock(operation)
    if locked.status not in OPEN:
        return _not_open(locked)
    problem = get_publication_problem(locked)
    if problem.adoptable is None:
        return Outcome(False, problem.adopt_refusal)
    number = problem.adoptable.number
    publish = Operation.objects.get(key=publish_key(locked.subject_id, number, locked.channel))
    if publish.id == locked.id:
        do_retry_operation_now(locked, acting_user=user, reconcile=True)
    else:
        if publish.status != OperationStatus.SUCCEEDED:
            do_retry_operation_now(publish, acting_user=user, reconcile=True)
        do_cancel_operation(
            locked, reason=f"the target holds approved revision {number}; an operator adopted it", acting_user=user
        )
    record_audit_event(
        acting_user=user,
        event_type="publication.adopted",
        subject_type="brief",
        subject_id=locked.subject_id,
        old_state={"operation": locked.key, "problem": problem.problem},
        new_state={"adopted_revision": number, "target_state": problem.held.state if problem.held else None},
    )
    return _resolved(
        locked, "adopt", f"Adopting revision {number}: its publish adopts what the target holds, then it is verified."
    )


@transaction.atomic(savepoint=False)
def check_retry_publication(operation: Operation, *, acting_user: AnyUser, look_up: bool = False) -> Outcome:
    """Run the operation again now, after a fix at the target (or, with `look_up`, look the key
    up and adopt what exists first). The handler re-checks the approval and that nothing newer
    is published before it sends anything."""
    user = require_role(acting_user, Role.OPERATOR, to="settle publication problems")
    locked = _lock(operation)
    if locked.status not in OPEN:
        return _not_open(locked)
    do_retry_operation_now(locked, acting_user=user, reconcile=look_up)
    if look_up:
        return _resolved(
            locked, "look_up", f"Looking {locked.key} up at the target now; what it holds there is adopted."
        )
    return _resolved(locked, "retry", f"Running {locked.key} again now.")


@transaction.atomic(savepoint=False)
def check_publish_as_next_revision(operation: Operation, *, acting_user: AnyUser) -> Outcome:
    """A stale revision: the target's fence refused revision N because it holds revision M ≥ N that
    Galley cannot account for. Write N's approved content again as the brief's next revision (above
    M), and cancel N's publish for it. The new revision is an ordinary one: it needs its own approval
    (docs/invariants.md#i3) and is published through the fence like any other (docs/invariants.md#i4); nothing is sent
    now. Locks the brief's row, then the operation's (docs/architecture.md#lock-order); a repeat finds the
    operation cancelled and writes nothing."""
    user = require_role(acting_user, Role.OPERATOR, to="settle publication problems")
    brief = access_brief(operation.subject_id, acting_user=user, lock=True)
    locked = _lock(operation)
    if locked.status not in OPEN:
        return _not_open(locked)
    problem = get_publication_problem(locked)
    if problem.next_revision_number is None or problem.held is None:
        return Outcome(
            False, problem.next_revision_refusal or "Only a stale revision's publish can be published again."
        )
    approved, held = problem.revision, problem.held.state["revision"]
    revision, _created = do_create_revision(
        brief,
        base_number=approved.number,
        payload=dict(approved.payload),
        acting_user=user,
        restores=approved.number,
        same_content=True,
    )
    reason = (
        f"the target holds revision {held}; an operator wrote revision {approved.number}'s approved content "
        f"as revision {revision.number}, published once it is approved"
    )
    do_cancel_operation(locked, reason=reason, acting_user=user)
    record_audit_event(
        acting_user=user,
        event_type="publication.republished_as_next_revision",
        subject_type="brief",
        subject_id=locked.subject_id,
        old_state={"operation": locked.key, "revision": approved.number, "target_revision": held},
        new_state={"revision": revision.number, "payload_hash": revision.payload_hash},
    )
    return _resolved(
        locked,
        "publish_as_next_revision",
        f"Wrote revision {revision.number} with revision {approved.number}'s approved content; "
        "it is published once an approver approves it.",
    )


@transaction.atomic(savepoint=False)
def check_cancel_publication(operation: Operation, *, reason: str, acting_user: AnyUser) -> Outcome:
    user = require_role(acting_user, Role.OPERATOR, to="settle publication problems")
    reason = clean_text(
        reason, field="The reason (the editors see it on the brief)", max_chars=NOTE_MAX_CHARS, required=True
    )
    locked = _lock(operation)
    if locked.status not in OPEN:
        return _not_open(locked)
    do_cancel_operation(locked, reason=f"cancelled by an operator: {reason}", acting_user=user)
    return _resolved(locked, "cancel", f"Cancelled {locked.key}; the brief shows why.")


@transaction.atomic(savepoint=False)
def do_close_replaced_problems(operation_ids: list[int], *, published_number: int) -> None:
    """Revision `published_number` is published: the stuck publications of older revisions are
    over (a newer revision was published instead), each cancelled with that reason and audited.
    The verification's finalize finds them (publications.RECORD_VERIFICATION_SQL): the brief's
    publish and verify operations in OPEN, of revisions older than `published_number`."""
    if not operation_ids:  # the usual case, on every verification: not even a query to compile
        return
    for operation in Operation.objects.filter(id__in=operation_ids).order_by("id"):
        do_cancel_operation(operation, reason=f"revision {published_number} was published instead", acting_user=None)


def _open_drift(locked: Operation) -> Conflict | None:
    """The operation's unresolved drift conflict, locked, if it has one."""
    return (
        locked.conflicts.select_for_update(of=("self",))
        .filter(kind=Conflict.Kind.DRIFT, resolved_at__isnull=True)
        .order_by("-id")
        .first()
    )


def _lock_drift(operation: Operation) -> tuple[Operation, Conflict] | Outcome:
    """The operation and its unresolved drift conflict, both locked; or, when it has none open, why
    there is nothing to do."""
    locked = _lock(operation)
    if locked.status not in OPEN:
        return _not_open(locked)
    conflict = _open_drift(locked)
    if conflict is None:
        return Outcome(False, f"Nothing to do: {locked.key} is not a drift at the target.")
    return locked, conflict


def _accept(conflict: Conflict, digest: str) -> None:
    """Later checks of this revision take `digest` as what its target may show."""
    conflict.accepted_payload_hash = digest
    conflict.save(update_fields=["accepted_payload_hash"])


@transaction.atomic(savepoint=False)
def check_accept_drift(operation: Operation, *, reason: str, acting_user: AnyUser) -> Outcome:
    """Leave what the site shows as it is: the drift is recorded as accepted (later checks of the
    revision take it as expected), the operation cancelled with the reason, audited. Only for a drift
    the periodic check found of a published revision."""
    user = require_role(acting_user, Role.OPERATOR, to="settle publication problems")
    reason = clean_text(reason, field="The reason (kept in the audit trail)", max_chars=1000, required=True)
    found = _lock_drift(operation)
    if isinstance(found, Outcome):
        return found
    locked, conflict = found
    if locked.kind != DRIFT_CHECK:
        # Found by the revision's own verification: it was never observed as approved, and accepting
        # would not make it so (docs/invariants.md#i10).
        return Outcome(
            False,
            "This revision was never verified: the site changed before its read-back. Republish it, "
            "or adopt what the site shows as a new revision.",
        )
    _accept(conflict, conflict.conflicting_payload_hash)
    do_cancel_operation(locked, reason=f"an operator accepted what the site shows: {reason}", acting_user=user)
    record_audit_event(
        acting_user=user,
        event_type="publication.drift_accepted",
        subject_type="brief",
        subject_id=locked.subject_id,
        old_state={"operation": locked.key, "approved_hash": locked.payload_hash},
        new_state={"accepted_hash": conflict.conflicting_payload_hash, "reason": reason},
    )
    return _resolved(locked, "accept_drift", "Accepted: the site keeps what it shows; later checks compare with it.")


@transaction.atomic(savepoint=False)
def check_republish_approved(operation: Operation, *, acting_user: AnyUser) -> Outcome:
    """Write the approved revision over the drift again: a republish operation through the outbox,
    under its own key (identities.republish_key), which the target accepts for its current revision
    with that revision's hash; then its verification observes it. The drift's operation is cancelled
    for it. Idempotent: the republish is keyed by the drift's conflict, and a repeat finds it ended."""
    user = require_role(acting_user, Role.OPERATOR, to="settle publication problems")
    found = _lock_drift(operation)
    if isinstance(found, Outcome):
        return found
    locked, conflict = found
    problem = get_publication_problem(locked)
    number = problem.revision.number
    published = get_published_number(problem.brief, channel=locked.channel)
    if published is not None and published > number:
        return Outcome(False, f"Revision {published} is published since: revision {number} cannot come back.")
    if problem.approval is None:
        return Outcome(False, f"Revision {number} has no valid approval: it cannot be published again.")
    enqueued = enqueue_operation(
        key=republish_key(locked.subject_id, number, conflict.id, locked.channel),
        kind=REPUBLISH,
        channel=locked.channel,
        payload_hash=problem.revision.payload_hash,
        subject_type="brief",
        subject_id=locked.subject_id,
        subject_version=number,
        arguments={"revision": number, "conflict": conflict.id},
    )
    do_cancel_operation(locked, reason=f"an operator republished revision {number} over the drift", acting_user=user)
    record_audit_event(
        acting_user=user,
        event_type="publication.republish_requested",
        subject_type="brief",
        subject_id=locked.subject_id,
        old_state={"operation": locked.key, "live_hash": conflict.conflicting_payload_hash},
        new_state={"republish": enqueued.operation.key, "revision": number, "payload_hash": locked.payload_hash},
    )
    return _resolved(
        locked,
        "republish",
        f"Republishing revision {number} over the drift ({enqueued.operation.key}); then it is verified.",
    )


@transaction.atomic(savepoint=False)
def check_adopt_drift(operation: Operation, *, acting_user: AnyUser) -> Outcome:
    """Take what the site shows as the brief's next revision, written by the operator: an immutable
    revision that goes through approval like any other (the brief goes back to review). Until it is
    published, what the site shows is accepted for the published revision. Locks the brief's row
    first, then the operation's (docs/architecture.md#lock-order)."""
    user = require_role(acting_user, Role.OPERATOR, to="settle publication problems")
    brief = access_brief(operation.subject_id, acting_user=user, lock=True)
    found = _lock_drift(operation)
    if isinstance(found, Outcome):
        return found
    locked, conflict = found
    drift = get_publication_problem(locked).drift
    if drift is None:
        return Outcome(False, "Galley has no record of what the site shows: retry the check, or accept.")
    number = revision_number(locked)
    published = get_revision(brief, number).payload
    if _shows_revision(drift, published):
        return Outcome(
            False,
            f"The site's title, text and excerpt are revision {number}'s own; only its status differs, which no "
            f"revision holds. Republish revision {number} (it restores it), or accept what the site shows.",
        )
    # The site's content is HTML (or text typed in wp-admin): its text becomes the Markdown body as plain
    # paragraphs, never its markup; its excerpt is the standfirst. What the site does not report (byline,
    # section, tags) stays as published.
    try:
        payload = clean_story(
            {
                **story_fields(published),
                "title": drift.title,
                "standfirst": drift.excerpt,
                "body": html_paragraphs(drift.body),
            }
        )
        payload_hash(payload)
    except (InvalidInput, PayloadError) as exc:
        raise InvalidInput(f"What the site shows cannot be a revision: {exc}") from None
    latest = get_latest_revision(brief)
    revision, _created = do_create_revision(
        brief, base_number=latest.number if latest is not None else 0, payload=payload, acting_user=user
    )
    _accept(conflict, conflict.conflicting_payload_hash)
    do_cancel_operation(
        locked,
        reason=f"an operator adopted what the site shows as revision {revision.number}, which waits for approval",
        acting_user=user,
    )
    record_audit_event(
        acting_user=user,
        event_type="publication.drift_adopted",
        subject_type="brief",
        subject_id=locked.subject_id,
        old_state={"operation": locked.key, "approved_hash": locked.payload_hash},
        new_state={"revision": revision.number, "payload_hash": revision.payload_hash, "live_hash": drift.hash},
    )
    return _resolved(
        locked,
        "adopt_drift",
        f"Adopted what the site shows as revision {revision.number}, its text as plain paragraphs (the site's "
        "formatting is not kept: edit the revision to restore it); it waits for approval.",
    )


def _shows_revision(drift: DriftShown, payload: dict[str, Any]) -> bool:
    """Whether the site's title, content and excerpt are exactly what publishing `payload` wrote (the
    plugin before structured stories wrote the body itself as the content)."""
    rendered = render_story(payload)
    return (
        drift.title == rendered["title"]
        and drift.body in (rendered["content_html"], story_fields(payload)["body"])
        and drift.excerpt == story_fields(payload)["standfirst"]
    )
