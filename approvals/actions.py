"""Revision-bound decisions: approve or request changes on exactly one revision and hash."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.utils import timezone

from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from approvals.models import Approval, ApprovalChannel, ApprovalCompletion, Assignment, Comment, PublicationSchedule
from approvals.notifications import (
    do_notify_assigned,
    do_notify_commented,
    do_notify_decided,
    do_notify_review_needed,
)
from approvals.policies import Policy, get_policy
from approvals.schedules import ScheduleRequest, clean_schedule, database_now, schedule_state
from approvals.selectors import (
    get_approvers_group,
    get_open_assignment,
    get_thread,
    get_valid_approval,
    list_assignable_approvers,
)
from approvals.sql import COMPLETE_POLICY_SQL
from publishing.actions.channels import check_channel_set, check_revision_channel_set
from publishing.actions.publications import do_request_publication
from publishing.actions.revisions import do_change_brief_status
from publishing.actions.webhooks import do_emit_revision_approved
from publishing.errors import InvalidInput, NotFound
from publishing.identities import revision_subject_id
from publishing.models import Brief, Channel, Revision
from publishing.roles import AnyUser, Role, require_reviewer, require_role, user_group_names
from publishing.selectors.briefs import access_brief
from publishing.selectors.corrections import get_newer_sent_correction
from publishing.selectors.publications import get_newer_sent_number
from publishing.selectors.revisions import get_latest_revision, get_revision
from publishing.validation import clean_number, clean_text
from workers.audit import record_audit_event
from workers.prepared import execute_prepared

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
    channels: Any = None,
    publish_at: Any = None,
    zone: Any = None,
    acting_user: AnyUser,
) -> tuple[Approval, bool]:
    """Record the approver's decision on revision `revision_number` as reviewed with `payload_hash`;
    an approval freezes the channels it publishes to: `channels` (slugs) when given, else the brief's
    (publishing.actions.channels.check_channel_set; docs/invariants.md#i14) — for a correction, every
    channel holding the brief, and any the approver adds (check_revision_channel_set; #i16); and publishes now or, with
    `publish_at` (ISO 8601, with an offset or read in the IANA `zone`), at that time T
    (approvals.schedules.clean_schedule; docs/schedules.md). Only the approval that completes the policy
    decides T; an earlier or later approval's time is in its audit record only.

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
    if decision != Approval.Decision.APPROVED and publish_at not in (None, ""):
        raise InvalidInput("A request for changes publishes nothing, so it takes no publish time.")
    schedule = clean_schedule(publish_at, zone) if decision == Approval.Decision.APPROVED else None

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
    if brief.retracted_revision_number is not None and revision.number <= brief.retracted_revision_number:
        # Galley's own fence (docs/retractions.md): what was taken down comes back only as a newer revision.
        raise DecisionAlreadyMade(
            f"Revision {revision.number} was retracted ({brief.retraction_reason}): it is never published "
            "again. To bring the article back, ask the editor for a new revision and approve that."
        )
    if brief.published_revision_number == revision.number:
        raise DecisionAlreadyMade(
            f"Revision {revision.number} is already published: there is nothing left to decide on it. "
            "To change the article, ask the editor for a new revision."
        )
    completion = ApprovalCompletion.objects.filter(revision=revision).select_related("approval__approver").first()
    if completion is not None and decision == Approval.Decision.CHANGES_REQUESTED:
        raise DecisionAlreadyMade(
            f"Revision {revision.number} was approved by {completion.approval.approver}, which completed its "
            "approval policy, and it is being published; ask the editor for a new revision instead."
        )
    # An approval after the completing one is recorded (the approver agrees) and publishes nothing more.
    wanted = decision == Approval.Decision.APPROVED and completion is None
    # A correction goes to every channel holding the brief (docs/invariants.md#i16).
    channel_set = check_revision_channel_set(brief, revision, channels) if wanted else []
    decided = do_decide_revision(
        revision,
        decision=decision,
        comment=comment,
        channels=channel_set,
        policy=get_policy(brief),
        schedule=schedule,
        acting_user=acting_user,
    )
    return decided, True


@transaction.atomic(savepoint=False)
def do_decide_revision(
    revision: Revision,
    *,
    decision: str,
    comment: str,
    channels: list[Channel],
    policy: Policy,
    schedule: ScheduleRequest | None = None,
    acting_user: User,
) -> Approval:
    """Caller holds the brief's row lock and has checked that `revision` is the current one.

    The decision counts towards `policy` (docs/policies.md), recording the approver's groups. The
    approval that completes the policy records the policy that applied (ApprovalCompletion, written only
    when the revision's decisions meet it; its unique index arbitrates), freezes its channel set
    (`channels`: one ApprovalChannel row each) and writes one publish operation per channel, due now or at
    `schedule`'s T (a PublicationSchedule row records it, docs/schedules.md), all in this
    transaction (docs/invariants.md#i5, #i14), their rows locked after the brief's, never before
    (docs/architecture.md#lock-order). An approval that does not complete it tells whoever is still needed.
    """
    approval = Approval.objects.create(
        revision=revision,
        payload_hash=revision.payload_hash,
        decision=decision,
        approver=acting_user,
        comment=comment,
        approver_groups=sorted(user_group_names(acting_user)),
    )
    brief = revision.brief
    completed = decision == Approval.Decision.APPROVED and _complete_policy(revision, approval, policy)
    old_status = brief.status
    new_status = (
        Brief.Status.CHANGES_REQUESTED
        if decision == Approval.Decision.CHANGES_REQUESTED
        else Brief.Status.APPROVED
        if completed
        else brief.status
    )
    if brief.status != new_status:
        do_change_brief_status(brief, new_status)
    record_audit_event(
        acting_user=acting_user,
        event_type=f"revision.{decision}",
        subject_type="revision",
        subject_id=revision_subject_id(brief.public_id, revision.number),
        old_state={"status": old_status},
        new_state={
            "status": brief.status,
            "decision": decision,
            "payload_hash": revision.payload_hash,
            **(
                {
                    "completes_policy": completed,
                    "policy": {
                        "desk": policy.desk.slug,
                        "approvals_required": policy.approvals_required,
                        "required_groups": list(policy.required_groups),
                    },
                }
                if decision == Approval.Decision.APPROVED
                else {}
            ),
            # An approval for "now" says nothing of time, as before schedules.
            **(schedule_state(schedule) if schedule is not None else {}),
            **({"channels": [channel.slug for channel in channels]} if completed else {}),
        },
    )
    if completed:
        ApprovalChannel.objects.bulk_create([ApprovalChannel(approval=approval, channel=c) for c in channels])
        if schedule is not None:
            PublicationSchedule.objects.create(
                completion=ApprovalCompletion.objects.get(approval=approval), publish_at=schedule.at, zone=schedule.zone
            )
        for channel in channels:
            do_request_publication(revision, channel=channel.slug, scheduled_for=schedule.at if schedule else None)
        do_emit_revision_approved(revision, acting_user=acting_user)
    waiting = (
        decision == Approval.Decision.APPROVED
        and not completed
        and not ApprovalCompletion.objects.filter(revision=revision).exists()
    )
    do_notify_decided(revision, decision=decision, completed=not waiting, acting_user=acting_user)
    if waiting:
        do_notify_review_needed(revision, policy=policy, acting_user=acting_user)
    return approval


def _complete_policy(revision: Revision, approval: Approval, policy: Policy) -> bool:
    """Record that `approval` completes `revision`'s policy if the decisions up to it meet `policy`; whether
    it did (approvals.sql.COMPLETE_POLICY_SQL: one completion per revision, however many approvals race)."""
    params = {
        "revision_id": revision.pk,
        "approval_id": approval.pk,
        "desk_id": policy.desk.pk,
        "approvals_required": policy.approvals_required,
        "required_groups": list(policy.required_groups),
    }
    with execute_prepared(COMPLETE_POLICY_SQL, params) as cursor:
        return cursor.fetchone() is not None


def check_also_publish(public_id: str, *, revision_number: Any, channel: Any, acting_user: AnyUser) -> bool:
    """An approver's explicit "also publish to X": approved revision `revision_number` goes to channel
    `channel` (a slug) too, which its approval did not name (a channel added or enabled since). Writes
    the channel into the approval's set (ApprovalChannel, `added_by` the approver) and the publish intent
    for that one channel, audited, in one transaction (docs/invariants.md#i14). Returns whether it was
    added (False: the channel already holds it). Raises InvalidInput, NotFound, PermissionRefused,
    SelfApproval, DecisionAlreadyMade."""
    acting_user = require_role(acting_user, Role.APPROVER, to="add a channel to an approval")
    number = clean_number(
        revision_number, minimum=1, message="The revision number is missing or not a number; reload the page."
    )
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    revision = get_revision(brief, number)
    approval = get_valid_approval(revision)
    if approval is None:
        raise InvalidInput(f"Revision {revision.number} is not approved: approve it first, then choose its channels.")
    if revision.author_id == acting_user.pk:
        raise SelfApproval(
            f"You wrote revision {revision.number}, so you cannot send it anywhere; another approver must."
        )
    if brief.retracted_revision_number is not None and revision.number <= brief.retracted_revision_number:
        raise DecisionAlreadyMade(
            f"Revision {revision.number} was retracted: it is sent to no channel again. Publish a newer "
            "approved revision instead."
        )
    if not isinstance(channel, str) or not channel:
        raise InvalidInput("Choose the channel to publish to.")
    (target,) = check_channel_set(brief, [channel])
    if ApprovalChannel.objects.filter(approval__revision=revision, channel=target).exists():
        return False
    newer = get_newer_sent_number(brief, revision.number, channel=target.slug)
    if newer is not None:
        raise DecisionAlreadyMade(
            f"Revision {newer} is newer and already on its way to {target.name}: revision {revision.number} "
            "would replace nothing there. Publish the newest approved revision instead."
        )
    corrected = get_newer_sent_correction(brief, revision.number)
    if corrected is not None:
        # A new channel would show the very text the correction corrects (docs/invariants.md#i16).
        raise DecisionAlreadyMade(
            f"Revision {corrected} is a correction of revision {revision.number} and was sent already: "
            f"{target.name} would show the text it corrects. Publish revision {corrected} there instead."
        )
    schedule = PublicationSchedule.objects.filter(completion__revision=revision).first()
    if schedule is not None and schedule.cancelled_at is not None:
        raise DecisionAlreadyMade(
            f"Revision {revision.number}'s scheduled publication was cancelled: it goes to no channel. "
            "Approve a new revision to publish it."
        )
    # A channel added while the embargo holds waits for the same T; once T has passed it is due now.
    waiting = schedule is not None and schedule.publish_at > database_now()
    do_also_publish(
        revision,
        approval=approval,
        channel=target,
        scheduled_for=schedule.publish_at if schedule is not None and waiting else None,
        acting_user=acting_user,
    )
    return True


@transaction.atomic(savepoint=False)
def do_also_publish(
    revision: Revision,
    *,
    approval: Approval,
    channel: Channel,
    scheduled_for: datetime | None = None,
    acting_user: User,
) -> None:
    """Caller holds the brief's row lock and has checked the approval, the approver and the channel;
    `scheduled_for` is the revision's T while its embargo holds."""
    before = list(ApprovalChannel.objects.filter(approval__revision=revision).values_list("channel__slug", flat=True))
    ApprovalChannel.objects.create(approval=approval, channel=channel, added_by=acting_user)
    enqueued = do_request_publication(revision, channel=channel.slug, scheduled_for=scheduled_for)
    record_audit_event(
        acting_user=acting_user,
        event_type="revision.channel_added",
        subject_type="revision",
        subject_id=revision_subject_id(revision.brief.public_id, revision.number),
        old_state={"channels": before},
        new_state={
            "channels": [*before, channel.slug],
            "added": channel.slug,
            "payload_hash": revision.payload_hash,
            "operation": enqueued.operation.key,
            **({"publish_at": scheduled_for.isoformat()} if scheduled_for is not None else {}),
        },
    )


# --- Review workflow: assignment and comment threads ----------------------------------------------------

# The assignment form's value naming the Approvers group rather than one approver.
APPROVERS_GROUP = "group"


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
