"""Notifications: written in the transaction of the event they tell, each with the intent to email it.

Notifications coalesce per brief: while a recipient's notification of an event on a brief is unread,
the next such event updates it (approvals.models.Notification), so one submission is one notification
and a superseded revision is never told beside its successor.

The email itself is a network call, so it never happens here: each notification's operation
`email:notification-<id>` commits with it (docs/invariants.md#i5) and a worker sends it
(approvals.handlers). Publishing's events (a revision submitted, a revision published) and the
workers' (an operation needing an operator) reach it through their hooks, registered in
approvals.apps, so that neither imports approvals; approvals.actions calls it for its own events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from psycopg.rows import dict_row

from approvals.models import Approval, ApprovalCompletion, Assignment, Comment, Notification
from approvals.policies import Policy, get_shortfall
from approvals.sql import COALESCE_NOTIFICATION_SQL, PUBLISHED_RECIPIENTS_SQL
from publishing.identities import PUBLICATION_KINDS, RETRACT
from publishing.models import Brief, Revision
from publishing.roles import LEGAL_GROUP, Role
from publishing.selectors.briefs import list_headlines
from publishing.sql import from_row
from workers.actions.enqueue import enqueue_operation
from workers.prepared import execute_prepared
from workers.registry import OperatorNeeded

NOTIFICATION_EMAIL = "notification_email"


def notification_email_key(notification_id: int) -> str:
    return f"email:notification-{notification_id}"


@transaction.atomic(savepoint=False)
def do_notify(
    recipients: Iterable[User | None],
    *,
    event: str,
    brief: Brief,
    message: str,
    revision_number: int | None = None,
    acting_user: User | None = None,
) -> list[int]:
    """Tell each recipient (never the actor, never twice, only active accounts), in the caller's
    transaction; returns the notifications' ids. Coalesced per brief (Notification): a recipient's
    unread notification of this event on this brief takes this event rather than a new row being
    added. A new notification comes with its email intent when the recipient has an address; one
    that took the event keeps the intent it has, which sends it as it stands then (or has sent it)."""
    seen: set[int] = set()
    chosen = []
    for user in recipients:
        if user is None or not user.is_active or user.pk in seen or (acting_user and user.pk == acting_user.pk):
            continue
        seen.add(user.pk)
        chosen.append(user)
    if not chosen:
        return []
    params = {
        "recipients": [user.pk for user in chosen],
        "event": event,
        "brief_id": brief.pk,
        "revision_number": revision_number,
        "message": message[:500],
    }
    with execute_prepared(COALESCE_NOTIFICATION_SQL, params, row_factory=dict_row) as cursor:
        written = cursor.fetchall()
    by_id = {user.pk: user for user in chosen}
    for row in written:
        recipient = by_id[row["recipient_id"]]
        if not row["created"] or not recipient.email:
            continue
        enqueue_operation(
            key=notification_email_key(row["id"]),
            kind=NOTIFICATION_EMAIL,
            payload_hash=hashlib.sha256(f"{recipient.pk}\n{message}".encode()).hexdigest(),
            subject_type="notification",
            subject_id=str(row["id"]),
        )
    return [row["id"] for row in written]


def _members(role: Role) -> list[User]:
    return list(User.objects.filter(is_active=True, groups__name=role.value).order_by("id"))


def _reviewers(brief: Brief) -> list[User]:
    """Who reviews the brief: its open assignment's approver or group, else every approver."""
    assignment = Assignment.objects.filter(brief=brief, ended_at__isnull=True).select_related("assignee").first()
    if assignment is None:
        return _members(Role.APPROVER)
    if assignment.assignee is not None:
        return [assignment.assignee]
    return list(User.objects.filter(is_active=True, groups=assignment.group_id).order_by("id"))


def _authors(brief: Brief, revision: Revision | None = None) -> list[User | None]:
    return [brief.author, revision.author if revision is not None else None]


def do_notify_assigned(assignment: Assignment, *, acting_user: User) -> None:
    brief = assignment.brief
    recipients = (
        [assignment.assignee]
        if assignment.assignee is not None
        else User.objects.filter(is_active=True, groups=assignment.group_id).order_by("id")
    )
    headline = list_headlines([brief.public_id])[brief.public_id]
    do_notify(
        recipients,
        event=Notification.Event.ASSIGNED,
        brief=brief,
        message=f"{acting_user} asked you to review {brief.public_id} “{headline}”.",
        acting_user=acting_user,
    )


def do_notify_submitted(revision: Revision, *, acting_user: User) -> None:
    brief = revision.brief
    do_notify(
        _reviewers(brief),
        event=Notification.Event.SUBMITTED,
        brief=brief,
        revision_number=revision.number,
        message=f"Revision {revision.number} of {brief.public_id} “{revision.title}” is waiting for review.",
        acting_user=acting_user,
    )


def do_notify_decided(revision: Revision, *, decision: str, completed: bool = True, acting_user: User) -> None:
    """The editors hear of every decision; an approval that does not complete the policy says so."""
    brief = revision.brief
    event = Notification.Event(decision)
    message = f"{acting_user}: {event.label.lower()} on revision {revision.number} of {brief.public_id}."
    if decision == Approval.Decision.APPROVED and not completed:
        message = (
            f"{acting_user} approved revision {revision.number} of {brief.public_id}; its approval policy "
            "needs more before it is published."
        )
    do_notify(
        _authors(brief, revision),
        event=event,
        brief=brief,
        revision_number=revision.number,
        message=message,
        acting_user=acting_user,
    )


def do_notify_review_needed(revision: Revision, *, policy: Policy, acting_user: User) -> None:
    """After an approval that did not complete the policy, the next required reviewers: the members of
    each required group still to approve, or, when only approvals are missing, the brief's reviewers —
    never the author, nor anyone who has decided on the revision already."""
    brief = revision.brief
    missing_approvals, missing_groups = get_shortfall(revision, policy)
    decided = set(revision.approvals.values_list("approver_id", flat=True))
    if not missing_approvals and not missing_groups:
        return
    needs = []
    candidates: list[User] = []
    if missing_groups:
        candidates += (
            User.objects.filter(is_active=True, groups__name__in=missing_groups)
            .filter(groups__name=Role.APPROVER.value)
            .distinct()
            .order_by("id")
        )
        needs.append("an approval from " + " and ".join(missing_groups))
    if missing_approvals:
        candidates += _reviewers(brief)
        needs.append("1 more approval" if missing_approvals == 1 else f"{missing_approvals} more approvals")
    needed = " and ".join(needs)
    recipients = [user for user in candidates if user.pk not in decided and user.pk != revision.author_id]
    do_notify(
        recipients,
        event=Notification.Event.REVIEW_NEEDED,
        brief=brief,
        revision_number=revision.number,
        message=(
            f"{acting_user} approved revision {revision.number} of {brief.public_id} “{revision.title}”; "
            f"it still needs {needed} ({policy.desk} desk: {policy.describe()}). Your approval counts."
        ),
        acting_user=acting_user,
    )


def do_notify_commented(comment: Comment, *, acting_user: User) -> None:
    revision = comment.revision
    brief = revision.brief
    thread_id = comment.parent_id or comment.pk
    participants = User.objects.filter(
        id__in=Comment.objects.filter(Q(id=thread_id) | Q(parent_id=thread_id)).values("author_id")
    )
    verb = "replied" if comment.parent_id else "commented"
    do_notify(
        [*_authors(brief, revision), *participants],
        event=Notification.Event.COMMENTED,
        brief=brief,
        revision_number=revision.number,
        message=f"{acting_user} {verb} on revision {revision.number} of {brief.public_id}: {comment.body[:200]}",
        acting_user=acting_user,
    )


def do_notify_published(brief: Brief, *, revision_number: int, permalink: str) -> None:
    """In the verify operation's finalize: the brief's author and whoever approved the revision."""
    params = {
        "brief_id": brief.pk,
        "number": revision_number,
        "author_id": brief.author_id,
        "approved": Approval.Decision.APPROVED,
    }
    with execute_prepared(PUBLISHED_RECIPIENTS_SQL, params, row_factory=dict_row) as cursor:
        recipients = [from_row(User, row) for row in cursor.fetchall()]
    do_notify(
        recipients,
        event=Notification.Event.PUBLISHED,
        brief=brief,
        revision_number=revision_number,
        message=f"Revision {revision_number} of {brief.public_id} is published and verified at {permalink}.",
    )


def do_notify_publish_problem(needed: OperatorNeeded) -> None:
    """Registered with the workers (approvals.apps): a publish or verify that comes to need an operator
    (a dead letter or a conflict, or a schedule overdue: publishing.actions.overdue) tells the operators
    and the brief's author, in the transaction that records it; a retraction's too (docs/retractions.md)."""
    if needed.kind not in (*PUBLICATION_KINDS, RETRACT) or needed.subject_type != "brief":
        return
    brief = Brief.objects.select_related("author").filter(public_id=needed.subject_id).first()
    if brief is None:
        return
    revision_number = needed.subject_version
    do_notify(
        [brief.author, *_members(Role.OPERATOR)],
        event=Notification.Event.PUBLISH_FAILED,
        brief=brief,
        revision_number=revision_number,
        message=(
            f"{'Retracting' if needed.kind == RETRACT else 'Publishing'} revision {revision_number} of "
            f"{brief.public_id} needs an operator "
            f"({needed.status}): {needed.message}"
        ),
    )


@transaction.atomic(savepoint=False)
def do_mark_read(user: User, *, notification_id: int | None = None) -> int:
    """Mark one notification of `user` (or all of them) read; returns how many changed. Not audited:
    it is the reader's own state, and changes nothing anyone else sees."""
    unread = Notification.objects.filter(recipient=user, read_at__isnull=True)
    if notification_id is not None:
        unread = unread.filter(id=notification_id)
    return unread.update(read_at=timezone.now())


@transaction.atomic(savepoint=False)
def do_record_notification_emailed(notification: Notification) -> bool:
    """In the email operation's fenced finalize: the email was handed to the backend. Returns
    whether this call recorded it (False when an earlier run already had). The send itself is on
    record as the operation's attempt; this only keeps a second run from sending again."""
    return bool(
        Notification.objects.filter(id=notification.pk, emailed_at__isnull=True).update(emailed_at=timezone.now())
    )


def do_notify_legal_review_flagged(brief: Brief, *, acting_user: User) -> None:
    """A brief flagged for legal review while its current revision waits for approvals: Legal's reviewers
    (members of Legal and Approvers, not its author) are told their approval is needed."""
    revision = brief.revisions.order_by("-number").first()
    if revision is None or brief.status not in (Brief.Status.IN_REVIEW, Brief.Status.CHANGES_REQUESTED):
        return
    if ApprovalCompletion.objects.filter(revision=revision).exists():
        return
    reviewers = User.objects.filter(is_active=True, groups__name=LEGAL_GROUP).filter(groups__name=Role.APPROVER.value)
    do_notify(
        [user for user in reviewers.distinct().order_by("id") if user.pk != revision.author_id],
        event=Notification.Event.REVIEW_NEEDED,
        brief=brief,
        revision_number=revision.number,
        message=(
            f"{acting_user} flagged {brief.public_id} “{revision.title}” for legal review: revision "
            f"{revision.number} needs an approval from {LEGAL_GROUP} before it is published."
        ),
        acting_user=acting_user,
    )
