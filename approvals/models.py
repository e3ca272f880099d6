from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.urls import reverse
from django.utils import timezone

from publishing.models import Brief, Channel, Desk, Revision


class Decision(models.TextChoices):
    APPROVED = "approved", "Approved"
    CHANGES_REQUESTED = "changes_requested", "Changes requested"


class Approval(models.Model):
    """A decision on exactly one revision, bound to the payload hash the approver reviewed.

    Enforced by the database (migration 0002): (revision_id, payload_hash) is a foreign key to
    the revision's (id, payload_hash), so an approval of another hash cannot exist; rows are
    append-only; an approver cannot approve a revision they authored.

    An approval counts towards its revision's approval policy (docs/policies.md); `approver_groups`
    are the approver's groups when they decided, which is what a required group's approval is
    counted by, then and in every later check (a membership changed since changes nothing).
    """

    Decision = Decision

    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="approvals")
    payload_hash = models.CharField(max_length=64)
    decision = models.CharField(max_length=32, choices=Decision.choices)
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals")
    comment = models.TextField(blank=True)
    approver_groups = ArrayField(
        models.CharField(max_length=150), default=list, blank=True, help_text="The approver's groups when they decided."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["revision", "approver"], name="approval_one_decision_per_approver"),
            models.CheckConstraint(condition=models.Q(decision__in=Decision.values), name="approval_decision_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.get_decision_display()} {self.revision} by {self.approver}"


class ApprovalCompletion(models.Model):
    """The approval that completed revision N's approval policy, and the policy that applied then
    (docs/policies.md): the desk, the approvals it required and its required groups (a brief flagged
    for legal review adds Legal). Only it writes the publish intents, one per channel of its set, in
    its own transaction (docs/invariants.md#i5), and the publish's checks count the revision's
    approvals up to it against the policy recorded here (approvals.sql.valid_approval_of).

    Enforced by the database (migration 0006): one completion per revision — two approvals completing
    the policy at the same moment write one, so one set of intents; (revision_id, payload_hash) is a
    foreign key to the revision's, and (approval_id, revision_id) to the approval's; append-only."""

    revision = models.OneToOneField(Revision, on_delete=models.PROTECT, related_name="completion")
    payload_hash = models.CharField(max_length=64)
    approval = models.OneToOneField(Approval, on_delete=models.PROTECT, related_name="completion")
    desk = models.ForeignKey(Desk, on_delete=models.PROTECT, related_name="+")
    approvals_required = models.PositiveSmallIntegerField()
    required_groups = ArrayField(models.CharField(max_length=150), default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(approvals_required__gte=1), name="approval_completion_requires_one"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.revision} completed by approval {self.approval_id}"


class PublicationSchedule(models.Model):
    """The time T the approval that completed revision N's policy publishes it at, and the IANA zone it was
    given in (docs/schedules.md): stored in UTC, shown in `zone`. An approval for "now" has none.

    The claim reads T from the publish operations (workers.Operation.scheduled_for, the database clock);
    this row is what the approver asked for, moved by a reschedule and ended by a cancel
    (approvals.schedules), each audited, in the same transaction as the operations they move. Earlier
    approvals' times are in their audit records only: the completing approval decides.

    Database guards (migration 0007): one per completion (unique), so one per revision; T's zone is
    never empty; cancelled_at, cancelled_by and a non-empty reason are set together, once (a cancelled
    schedule is never moved nor cancelled again: trigger publication_schedule_final)."""

    completion = models.OneToOneField(ApprovalCompletion, on_delete=models.PROTECT, related_name="schedule")
    publish_at = models.DateTimeField(help_text="T in UTC: no channel receives the revision before it.")
    zone = models.CharField(max_length=64, help_text="The IANA zone T was given in, and is shown in.")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    cancel_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~models.Q(zone=""), name="publication_schedule_zone_not_empty"),
            models.CheckConstraint(
                condition=models.Q(cancelled_at__isnull=True, cancelled_by__isnull=True, cancel_reason="")
                | (models.Q(cancelled_at__isnull=False, cancelled_by__isnull=False) & ~models.Q(cancel_reason="")),
                name="publication_schedule_cancel_complete",
            ),
        ]

    def __str__(self) -> str:
        return f"completion {self.completion_id} at {self.publish_at.isoformat()} ({self.zone})"


class ApprovalChannel(models.Model):
    """A channel an approval sends its revision to: the set frozen when it was given (`added_by` empty),
    or one an approver added later with "also publish to" (`added_by` names them). No channel receives
    a revision without one of these rows (docs/invariants.md#i14): the publish's checks look for it.
    Append-only (trigger in migration 0005)."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="channel_rows")
    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, related_name="+")
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who added the channel after the approval; empty for the approval's own set.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["approval_id", "id"]
        constraints = [models.UniqueConstraint(fields=["approval", "channel"], name="approval_channel_once")]

    def __str__(self) -> str:
        return f"{self.approval_id} → {self.channel_id}"


class Assignment(models.Model):
    """Who is to review a brief: one approver, or a group (the Approvers) whose members all see it.

    Enforced by the database (migration 0003): an assignment names exactly one of user and group;
    a brief has at most one open assignment (reassigning ends the open one, so the history stays).
    """

    brief = models.ForeignKey(Brief, on_delete=models.PROTECT, related_name="assignments")
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="review_assignments"
    )
    group = models.ForeignKey(Group, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    assigned_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="When a later assignment replaced this one.")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(assignee__isnull=False, group__isnull=True)
                | models.Q(assignee__isnull=True, group__isnull=False),
                name="assignment_names_user_or_group",
            ),
            models.UniqueConstraint(
                fields=["brief"], condition=models.Q(ended_at__isnull=True), name="assignment_one_open_per_brief"
            ),
        ]
        indexes = [
            # The inbox: open assignments by assignee, and by group.
            models.Index(
                fields=["assignee"], condition=models.Q(ended_at__isnull=True), name="assignment_open_user_idx"
            ),
            models.Index(fields=["group"], condition=models.Q(ended_at__isnull=True), name="assignment_open_group_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.brief.public_id} → {self.assignee or self.group}"

    @property
    def assignee_name(self) -> str:
        return self.assignee.get_username() if self.assignee is not None else f"the {self.group} group"


class Comment(models.Model):
    """A comment on one revision: a thread's first comment (no parent) or a reply to one.

    Enforced by the database (migration 0003): a reply's parent is a thread's first comment on
    the same revision (threads are one level deep); only a thread is resolved, and its
    resolved_at and resolved_by are set together; the text is never empty and never changes.
    """

    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="comments")
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="replies")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=~models.Q(body=""), name="comment_body_not_empty"),
            models.CheckConstraint(
                condition=models.Q(resolved_at__isnull=True, resolved_by__isnull=True)
                | models.Q(parent__isnull=True, resolved_at__isnull=False, resolved_by__isnull=False),
                name="comment_only_threads_resolved",
            ),
        ]

    def __str__(self) -> str:
        return f"comment {self.pk} on {self.revision}"

    def get_absolute_url(self) -> str:
        return f"{self.revision.get_absolute_url()}#comment-{self.parent_id or self.pk}"


class NotificationEvent(models.TextChoices):
    SUBMITTED = "submitted", "Submitted for review"
    ASSIGNED = "assigned", "Assigned for review"
    APPROVED = "approved", "Approved"
    CHANGES_REQUESTED = "changes_requested", "Changes requested"
    REVIEW_NEEDED = "review_needed", "Your approval is needed"
    COMMENTED = "commented", "Commented"
    PUBLISHED = "published", "Published"
    PUBLISH_FAILED = "publish_failed", "Publishing needs an operator"


class Notification(models.Model):
    """Events of one kind on one brief told to one user: in the app (unread until read_at) and by one
    email.

    Coalesced (approvals.notifications.do_notify): while it is unread, the next event of its kind on
    its brief updates it — `count` grows, the message, revision number and created_at become the
    latest event's — instead of adding a row, so a reviewer sees one "submitted" notification naming
    the newest revision, never one per superseded revision. Read, it is history; the next event
    starts a new one.

    Written in the transaction of the event it tells; its email goes out later, from a worker,
    through the operation `email:notification-<id>` written in that same transaction, which sets
    emailed_at when the email has been handed to the email backend. The email tells the
    notification as it stands when it is sent; one that was sent is not sent again for the events
    coalesced into it afterwards.

    Database guards: one unread notification per recipient, brief and event
    (notification_one_unread_per_brief_event, the arbiter of the coalescing insert); count >= 1.
    """

    Event = NotificationEvent

    recipient = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(max_length=32, choices=NotificationEvent.choices)
    brief = models.ForeignKey(Brief, on_delete=models.PROTECT, related_name="+")
    revision_number = models.PositiveIntegerField(null=True, blank=True)
    message = models.CharField(max_length=500)
    count = models.PositiveIntegerField(default=1, help_text="How many events it tells (coalesced while unread).")
    created_at = models.DateTimeField(default=timezone.now, help_text="When its latest event happened.")
    read_at = models.DateTimeField(null=True, blank=True)
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(event__in=NotificationEvent.values), name="notification_event_valid"
            ),
            models.CheckConstraint(condition=models.Q(count__gte=1), name="notification_count_positive"),
            models.UniqueConstraint(
                fields=["recipient", "brief", "event"],
                condition=models.Q(read_at__isnull=True),
                name="notification_one_unread_per_brief_event",
            ),
        ]
        indexes = [
            models.Index(
                fields=["recipient"], condition=models.Q(read_at__isnull=True), name="notification_unread_idx"
            ),
            models.Index(fields=["recipient", "-created_at", "-id"], name="notification_recipient_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_event_display()} {self.brief.public_id} for {self.recipient}"

    def get_absolute_url(self) -> str:
        if self.revision_number is not None:
            return reverse("publishing:revision", args=[self.brief.public_id, self.revision_number])
        return self.brief.get_absolute_url()
