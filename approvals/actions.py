"""Revision-bound decisions: approve or request changes on exactly one revision and hash."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.utils import timezone

from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from approvals.models import Approval, Assignment, Comment
from approvals.notifications import do_notify_assigned, do_notify_commented, do_notify_decided
from approvals.selectors import (
    get_approvers_group,
    get_open_assignment,
    get_thread,
    get_valid_approval,
    list_assignable_approvers,
)
from publishing.actions.publications import do_request_publication
from publishing.actions.revisions import do_change_brief_status
from publishing.actions.webhooks import do_emit_revision_approved
from publishing.errors import InvalidInput, NotFound, PermissionRefused
from publishing.identities import revision_subject_id
from publishing.models import Brief, Revision
from publishing.roles import AnyUser, Role, has_role, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.revisions import get_latest_revision, get_revision
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

    Locks the brief's row first (docs/architecture.md#lock-order), so a decision and a new revision of the
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

    An approval writes the publish operation in the same transaction (docs/invariants.md#i5), its row
    locked after the brief's, never before (docs/architecture.md#lock-order).
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
        do_emit_revision_approved(revision, acting_user=acting_user)
    do_notify_decided(revision, decision=decision, acting_user=acting_user)
    return approval


# --- Review workflow: assignment and comment threads ----------------------------------------------------

REVIEWERS = (Role.EDITOR, Role.APPROVER)
# The assignment form's value naming the Approvers group rather than one approver.
APPROVERS_GROUP = "group"


def require_reviewer(user: AnyUser, *, to: str) -> User:
    """The user if they are an editor or an approver (who take part in a review); else PermissionRefused."""
    if not isinstance(user, User) or not any(has_role(user, role) for role in REVIEWERS):
        raise PermissionRefused(f"Only members of Editors or Approvers can {to}.")
    return user


def _assignment_target(value: Any) -> tuple[User | None, Group | None]:
    if value == APPROVERS_GROUP:
        return None, get_approvers_group()
    try:
        user_id = int(value)
    except (TypeError, ValueError):
        raise InvalidInput("Choose an approver or the Approvers group to assign the brief to.") from None
    approver = list_assignable_approvers().filter(pk=user_id).first()
    if approver is None:
        raise InvalidInput("The person chosen is not an active approver; choose another or the Approvers group.")
    return approver, None


def check_assign_brief(public_id: str, *, assignee: Any, acting_user: AnyUser) -> tuple[Assignment, bool]:
    """Assign the brief's review to one approver, or to the Approvers group (`assignee` "group").

    Locks the brief's row, so two assignments of one brief are serialised. Returns the open
    assignment and whether it changed; assigning to whoever holds it already writes nothing.
    Raises InvalidInput, NotFound, PermissionRefused.
    """
    acting_user = require_reviewer(acting_user, to="assign a brief for review")
    user, group = _assignment_target(assignee)
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    current = get_open_assignment(brief)
    if current is not None and current.assignee_id == (user and user.pk) and current.group_id == (group and group.pk):
        return current, False
    return do_assign_brief(brief, current=current, assignee=user, group=group, acting_user=acting_user), True


@transaction.atomic(savepoint=False)
def do_assign_brief(
    brief: Brief, *, current: Assignment | None, assignee: User | None, group: Group | None, acting_user: User
) -> Assignment:
    """Caller holds the brief's row lock. Ends the open assignment, if any, and opens the new one."""
    if current is not None:
        current.ended_at = timezone.now()
        current.save(update_fields=["ended_at"])
    assignment = Assignment.objects.create(brief=brief, assignee=assignee, group=group, assigned_by=acting_user)
    record_audit_event(
        acting_user=acting_user,
        event_type="brief.assigned",
        subject_type="brief",
        subject_id=brief.public_id,
        old_state={"assignee": current.assignee_name} if current is not None else None,
        new_state={"assignee": assignment.assignee_name},
    )
    do_notify_assigned(assignment, acting_user=acting_user)
    return assignment


def _revision_for(public_id: str, revision_number: Any, *, acting_user: User) -> Revision:
    try:
        number = int(revision_number)
    except (TypeError, ValueError):
        raise InvalidInput("The revision number is missing or not a number; reload the page.") from None
    return get_revision(access_brief(public_id, acting_user=acting_user), number)


def _comment_id(value: Any) -> int:
    try:
        comment_id = int(value)
    except (TypeError, ValueError):
        raise InvalidInput("The comment replied to is missing or not a number; reload the page.") from None
    if not 1 <= comment_id < 2**63:
        raise NotFound("There is no such comment on this revision; reload the page.")
    return comment_id


def check_post_comment(
    public_id: str, *, revision_number: Any, body: Any, reply_to: Any = None, acting_user: AnyUser
) -> Comment:
    """Start a thread on the revision, or reply to one (`reply_to`: any comment of the thread;
    a reply to a reply joins that reply's thread). Raises InvalidInput, NotFound, PermissionRefused."""
    acting_user = require_reviewer(acting_user, to="comment on a revision")
    body = clean_text(body, field="Comment", max_chars=COMMENT_MAX_CHARS, required=True)
    revision = _revision_for(public_id, revision_number, acting_user=acting_user)
    thread = None
    if reply_to not in (None, ""):
        comment_id = _comment_id(reply_to)
        thread = get_thread(revision, comment_id)
        if thread is None:
            raise NotFound(
                f"Your reply was not posted: comment {comment_id} is not on revision {revision.number} (it may "
                "be on another revision, or the link was out of date). Your text is kept below."
            )
    return do_post_comment(revision, body=body, thread=thread, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_post_comment(revision: Revision, *, body: str, thread: Comment | None, acting_user: User) -> Comment:
    comment = Comment.objects.create(revision=revision, parent=thread, author=acting_user, body=body)
    record_audit_event(
        acting_user=acting_user,
        event_type="comment.replied" if thread else "comment.posted",
        subject_type="revision",
        subject_id=revision_subject_id(revision.brief.public_id, revision.number),
        new_state={"comment": comment.pk, "thread": thread.pk if thread else comment.pk},
    )
    do_notify_commented(comment, acting_user=acting_user)
    return comment


def check_resolve_thread(
    public_id: str, *, revision_number: Any, comment_id: Any, resolved: bool, acting_user: AnyUser
) -> tuple[Comment, bool]:
    """Resolve (or reopen) the thread comment `comment_id` belongs to. Locks the thread's row and
    returns early when it is already so. Returns the thread and whether it changed."""
    acting_user = require_reviewer(acting_user, to="resolve or reopen a comment thread")
    revision = _revision_for(public_id, revision_number, acting_user=acting_user)
    thread = get_thread(revision, _comment_id(comment_id), lock=True)
    if thread is None:
        raise NotFound(f"There is no such comment on revision {revision.number}; reload the page.")
    if (thread.resolved_at is not None) == resolved:
        return thread, False
    return do_resolve_thread(thread, resolved=resolved, acting_user=acting_user), True


@transaction.atomic(savepoint=False)
def do_resolve_thread(thread: Comment, *, resolved: bool, acting_user: User) -> Comment:
    """Caller holds the thread's row lock."""
    old = {"resolved": thread.resolved_at is not None}
    thread.resolved_at = timezone.now() if resolved else None
    thread.resolved_by = acting_user if resolved else None
    thread.save(update_fields=["resolved_at", "resolved_by"])
    record_audit_event(
        acting_user=acting_user,
        event_type="comment.resolved" if resolved else "comment.reopened",
        subject_type="revision",
        subject_id=revision_subject_id(thread.revision.brief.public_id, thread.revision.number),
        old_state=old,
        new_state={"resolved": resolved, "thread": thread.pk},
    )
    return thread
