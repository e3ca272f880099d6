"""Revision-bound decisions: approve or request changes on exactly one revision and hash."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from approvals.models import Approval
from approvals.selectors import get_valid_approval
from publishing.actions.publications import do_request_publication
from publishing.actions.revisions import do_change_brief_status
from publishing.errors import InvalidInput
from publishing.identities import revision_subject_id
from publishing.models import Brief, Revision
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors import access_brief, get_latest_revision, get_revision
from publishing.validation import clean_text
from workers.audit import record_audit_event

COMMENT_MAX_CHARS = 10_000

BRIEF_STATUS_AFTER = {
    Approval.Decision.APPROVED: Brief.Status.APPROVED,
    Approval.Decision.CHANGES_REQUESTED: Brief.Status.CHANGES_REQUESTED,
}


def check_decide_revision(
    public_id: str,
    *,
    revision_number: Any,
    payload_hash: Any,
    decision: Any,
    comment: Any = "",
    acting_user: AnyUser,
) -> tuple[Approval, bool]:
    """Record the approver's decision on revision `revision_number` as reviewed with `payload_hash`.

    Locks the brief's row first (README, "Lock order"), so a decision and a new revision of the
    same brief are serialised: a decision can only land on the revision that is current when it
    commits. Returns the approval and whether it was created; the same decision again returns
    the first one.
    Raises StaleApproval, SelfApproval, DecisionAlreadyMade, InvalidInput, PermissionRefused.
    """
    acting_user = require_role(acting_user, Role.APPROVER, to="approve or request changes")
    if decision not in Approval.Decision.values:
        raise InvalidInput(f"Unknown decision {decision!r}; choose approve or request changes.")
    try:
        number = int(revision_number)
    except (TypeError, ValueError):
        raise InvalidInput("The revision number is missing or not a number; reload the page.") from None
    if not isinstance(payload_hash, str) or not payload_hash:
        raise InvalidInput("The payload hash of the revision you reviewed is missing; reload the page.")
    comment = clean_text(comment or "", field="Comment", max_chars=COMMENT_MAX_CHARS, required=False)

    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    revision = get_revision(brief, number)
    # `revision` exists, so the brief has a latest revision: the query cannot be empty.
    latest = get_latest_revision(brief) or revision
    if revision.number != latest.number:
        raise StaleApproval(
            f"Revision {revision.number} is no longer current: revision {latest.number} is. "
            f"Review revision {latest.number} (hash {latest.payload_hash[:12]}…) instead.",
            current_number=latest.number,
            current_hash=latest.payload_hash,
        )
    if payload_hash != revision.payload_hash:
        raise StaleApproval(
            f"The hash you reviewed ({payload_hash[:12]}…) is not revision {revision.number}'s "
            f"({revision.payload_hash[:12]}…). Revision {latest.number} is current; review it again.",
            current_number=latest.number,
            current_hash=latest.payload_hash,
        )
    if decision == Approval.Decision.APPROVED and revision.author_id == acting_user.pk:
        raise SelfApproval(f"You wrote revision {revision.number}, so you cannot approve it; another approver must.")
    existing = Approval.objects.filter(revision=revision, approver_id=acting_user.pk).first()
    if existing is not None:
        if existing.decision == decision:
            return existing, False
        raise DecisionAlreadyMade(
            f"You already decided “{existing.get_decision_display()}” on revision {revision.number}; "
            "decisions are final. Ask the editor for a new revision."
        )
    if brief.published_revision_number == revision.number:
        raise DecisionAlreadyMade(
            f"Revision {revision.number} is already published: there is nothing left to decide on it. "
            "To change the article, ask the editor for a new revision."
        )
    approval = get_valid_approval(revision)
    if decision == Approval.Decision.CHANGES_REQUESTED and approval is not None:
        raise DecisionAlreadyMade(
            f"Revision {revision.number} was approved by {approval.approver} and is being published; "
            "ask the editor for a new revision instead."
        )
    return do_decide_revision(revision, decision=decision, comment=comment, acting_user=acting_user), True


@transaction.atomic(savepoint=False)
def do_decide_revision(revision: Revision, *, decision: str, comment: str, acting_user: User) -> Approval:
    """Caller holds the brief's row lock and has checked that `revision` is the current one.

    An approval writes the publish operation in the same transaction (invariant 5), its row
    locked after the brief's, never before (README, "Lock order").
    """
    approval = Approval.objects.create(
        revision=revision,
        payload_hash=revision.payload_hash,
        decision=decision,
        approver=acting_user,
        comment=comment,
    )
    brief = revision.brief
    old_status = brief.status
    if brief.status != Brief.Status.APPROVED or decision != Approval.Decision.APPROVED:
        do_change_brief_status(brief, BRIEF_STATUS_AFTER[Approval.Decision(decision)])
    record_audit_event(
        acting_user=acting_user,
        event_type=f"revision.{decision}",
        subject_type="revision",
        subject_id=revision_subject_id(brief.public_id, revision.number),
        old_state={"status": old_status},
        new_state={"status": brief.status, "decision": decision, "payload_hash": revision.payload_hash},
    )
    if decision == Approval.Decision.APPROVED:
        do_request_publication(revision)
    return approval
