from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib.auth.models import Group, User
from django.contrib.postgres.fields import ArrayField
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    Exists,
    F,
    Field,
    Func,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    TextField,
)
from django.db.models.sql.compiler import SQLCompiler
from psycopg.rows import dict_row

from approvals.models import (
    Approval,
    ApprovalChannel,
    ApprovalCompletion,
    Assignment,
    Comment,
    Notification,
    PublicationSchedule,
)
from approvals.sql import VALID_APPROVAL_SQL, current_shortfall
from publishing.identities import PUBLISH
from publishing.models import Brief, Revision, current_headline
from publishing.roles import Role, user_group_names
from publishing.sql import from_row
from workers.models import Attempt, Operation, OperationStatus
from workers.prepared import execute_prepared


def list_decisions(revision: Revision) -> QuerySet[Approval]:
    return revision.approvals.select_related("approver").order_by("created_at", "id")


def get_valid_approval(revision: Revision) -> Approval | None:
    """The approval of exactly this revision and its payload hash that completed its approval policy, or None.

    An approval of another revision never counts, however similar its payload: the rule is
    approvals.sql.valid_approval_of, which the publish's own checks embed too.
    """
    with execute_prepared(VALID_APPROVAL_SQL, {"revision_id": revision.pk}, row_factory=dict_row) as cursor:
        row = cursor.fetchone()
    return None if row is None else from_row(Approval, row)


# --- Assignment and the inbox ------------------------------------------------------------------------


def list_approval_channels(revision: Revision) -> list[ApprovalChannel]:
    """The channels the revision's approval sends it to, with who added each one afterwards (empty
    `added_by`: the approval's own set), in the order they were added. One query."""
    return list(
        ApprovalChannel.objects.filter(approval__revision=revision)
        .select_related("channel", "added_by")
        .order_by("created_at", "id")
    )


def list_added_channels(brief: Brief, number: int) -> dict[str, ApprovalChannel]:
    """The channels an approver added to revision `number`'s approval afterwards ("also publish to"),
    by slug, with who added them and when. One query."""
    rows = ApprovalChannel.objects.filter(
        approval__revision__brief=brief, approval__revision__number=number, added_by__isnull=False
    ).select_related("channel", "added_by")
    return {row.channel.slug: row for row in rows}


def list_assignable_approvers() -> QuerySet[User]:
    return User.objects.filter(is_active=True, groups__name=Role.APPROVER.value).order_by("username")


def get_approvers_group() -> Group:
    return Group.objects.get(name=Role.APPROVER.value)


def get_open_assignment(brief: Brief) -> Assignment | None:
    return (
        Assignment.objects.select_related("assignee", "group", "assigned_by")
        .filter(brief=brief, ended_at__isnull=True)
        .first()
    )


def _assigned_to(user: User) -> Exists:
    return Exists(
        Assignment.objects.filter(brief=OuterRef("pk"), ended_at__isnull=True).filter(
            Q(assignee=user) | Q(group__user=user)
        )
    )


class _CurrentShortfall(Func):
    """One column of approvals.sql.current_shortfall for the brief row of the query it is in: the SQL
    rule itself, given the brief's columns as Django aliases them (a subquery's are renamed)."""

    def __init__(self, column: str, output_field: Field) -> None:
        super().__init__(F("pk"), F("desk_id"), F("legal_review"), output_field=output_field)
        self.column = column

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, list[Any]]:
        compiled = [compiler.compile(expression) for expression in self.get_source_expressions()]
        (brief_id, _), (desk_id, _), (legal_review, _) = compiled
        shortfall = current_shortfall(brief_id=brief_id, desk_id=desk_id, legal_review=legal_review)
        sql = f"(SELECT cs.{self.column} FROM ({shortfall}) cs)"  # noqa: S608 -- a column name of ours, the brief's columns
        return sql, [p for _, params in compiled for p in params]


def _awaiting_review(user: User) -> QuerySet[Brief]:
    """Briefs in review whose current revision awaits `user`'s approval under the brief's current policy
    (docs/editorial.md#inbox): they did not write it nor decide on it, its policy is not completed, and
    their approval would count (it still needs approvals, or one of their groups, or is met since the
    policy was loosened: approvals.policies.PolicyProgress.counts_for) — and the brief is assigned to
    them or a group of theirs, or one of their groups is among the groups it still needs (so Legal sees
    what needs Legal without an assignment). The count is approvals.sql.current_shortfall, in the query."""
    mine = sorted(user_group_names(user))
    current = Revision.objects.filter(brief=OuterRef("pk")).order_by("-number")
    needs_mine = Q(missing_groups__overlap=mine)
    return (
        Brief.objects.filter(status=Brief.Status.IN_REVIEW)
        .alias(current_id=Subquery(current.values("pk")[:1]), current_author=Subquery(current.values("author")[:1]))
        .annotate(
            missing_approvals=_CurrentShortfall("missing_approvals", IntegerField()),
            missing_groups=_CurrentShortfall("missing_groups", ArrayField(TextField())),
        )
        .exclude(current_author=user.pk)
        .filter(
            ~Exists(Approval.objects.filter(revision=OuterRef("current_id"), approver=user)),
            ~Exists(ApprovalCompletion.objects.filter(revision=OuterRef("current_id"))),
            Q(missing_approvals__gt=0) | Q(missing_groups__len=0) | needs_mine,
            _assigned_to(user) | needs_mine,
        )
    )


def list_inbox(user: User) -> QuerySet[Brief]:
    """The briefs awaiting `user`'s review (_awaiting_review), the longest waiting first, each with its
    current revision's number, since when it has waited, and its policy's approvals and what it lacks."""
    current = Revision.objects.filter(brief=OuterRef("pk")).order_by("-number")
    return (
        _awaiting_review(user)
        .annotate(
            current_number=Subquery(current.values("number")[:1]),
            waiting_since=Subquery(current.values("created_at")[:1]),
            headline=current_headline(),
            approvals_required=F("desk__approvals_required"),
        )
        # For "1 of 2 approvals": missing_approvals is what the policy still lacks, never below 0.
        .annotate(approvals_given=F("approvals_required") - F("missing_approvals"))
        .only("public_id", "title", "status")
        .order_by("waiting_since", "id")
    )


class _Counted(Subquery):
    template = "(SELECT count(*) FROM (%(subquery)s) counted)"
    output_field = IntegerField()


@dataclass(frozen=True)
class NavCounts:
    unread: int
    inbox: int


def get_nav_counts(user: User, *, with_inbox: bool) -> NavCounts:
    """Unread notifications and (for approvers) the inbox's size, in one query."""
    counts: dict[str, Any] = {
        "unread": _Counted(Notification.objects.filter(recipient=user, read_at__isnull=True).values("pk"))
    }
    if with_inbox:
        counts["inbox"] = _Counted(_awaiting_review(user).values("pk"))
    row = User.objects.filter(pk=user.pk).annotate(**counts).values_list(*counts).first()
    found = dict(zip(counts, row or (), strict=False))
    return NavCounts(unread=found.get("unread", 0), inbox=found.get("inbox", 0))


# --- Comment threads ---------------------------------------------------------------------------------


def _threads(comments: QuerySet[Comment]) -> QuerySet[Comment]:
    replies = Comment.objects.select_related("author").order_by("created_at", "id")
    return (
        comments.filter(parent__isnull=True)
        .select_related("author", "resolved_by", "revision__brief")
        .prefetch_related(Prefetch("replies", queryset=replies))
        .order_by("created_at", "id")
    )


def list_threads(revision: Revision) -> QuerySet[Comment]:
    """The revision's threads, oldest first, each with its replies (two queries)."""
    return _threads(Comment.objects.filter(revision=revision))


def list_brief_threads(brief: Brief) -> QuerySet[Comment]:
    """Every revision's threads of the brief, oldest first, each with its replies (two queries)."""
    return _threads(Comment.objects.filter(revision__brief=brief))


def get_thread(revision: Revision, comment_id: int, *, lock: bool = False) -> Comment | None:
    """The thread (first comment) that comment `comment_id` of `revision` belongs to, or None."""
    comment = Comment.objects.filter(revision=revision, id=comment_id).only("id", "parent_id").first()
    if comment is None:
        return None
    threads = Comment.objects.select_related("revision__brief")
    if lock:
        threads = threads.select_for_update(of=("self",))
    return threads.get(id=comment.parent_id or comment.id)


# --- Notifications -----------------------------------------------------------------------------------


def list_notifications(user: User) -> QuerySet[Notification]:
    return (
        Notification.objects.filter(recipient=user)
        .select_related("brief")
        .only(
            "event", "message", "created_at", "read_at", "revision_number", "count", "brief__public_id", "brief__title"
        )
        .annotate(brief_headline=current_headline("brief_id", title="brief__title"))
    )


def get_notification_for_email(notification_id: int) -> Notification:
    return Notification.objects.select_related("recipient", "brief").get(id=notification_id)


# The notifications that ask for a review of one revision: once a newer revision exists, what they ask
# for is superseded.
REVIEW_REQUESTS = (Notification.Event.SUBMITTED, Notification.Event.REVIEW_NEEDED)


def get_superseding_revision_number(notification: Notification) -> int | None:
    """For a notification asking for a review ("submitted for review", "your approval is needed"), the
    brief's latest revision number when it is newer than the notification's revision (the review it
    asked for is of a superseded revision); else None."""
    if notification.event not in REVIEW_REQUESTS or notification.revision_number is None:
        return None
    latest = (
        Revision.objects.filter(brief_id=notification.brief_id, number__gt=notification.revision_number)
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )
    return latest


# --- Schedules (docs/schedules.md) -----------------------------------------------------------------------


class ScheduleState:
    """Where a schedule stands, derived from its publish operations (never stored twice)."""

    WAITING = "waiting"  # no channel's publish claimed yet: embargoed until T
    FIRED = "fired"  # a worker claimed at least one channel's publish, at or after T
    CANCELLED = "cancelled"  # an approver cancelled it before it fired (or an operator every channel's publish)
    SUPERSEDED = "superseded"  # a newer revision was approved for every one of its channels first


@dataclass(frozen=True)
class ChannelFiring:
    """One channel's publish of a scheduled revision: its status, when its first attempt started (the
    firing) and how late that was after T, both on the database clock; None while it has not fired."""

    channel: str
    status: str
    scheduled_for: datetime | None
    fired_at: datetime | None
    lateness: timedelta | None


@dataclass(frozen=True)
class Schedule:
    """A revision's publication schedule: T (UTC), its zone, its state and each channel's firing."""

    revision: int
    publish_at: datetime
    zone: str
    state: str
    channels: list[ChannelFiring]
    cancelled_at: datetime | None
    cancelled_by: str
    cancel_reason: str

    @property
    def local(self) -> datetime:
        """T in the zone it was given in."""
        return self.publish_at.astimezone(ZoneInfo(self.zone))

    @property
    def may_change(self) -> bool:
        return self.state == ScheduleState.WAITING


def _state(schedule: PublicationSchedule, firings: list[ChannelFiring]) -> str:
    if schedule.cancelled_at is not None:
        return ScheduleState.CANCELLED
    unsent = (OperationStatus.PENDING, OperationStatus.SUPERSEDED, OperationStatus.CANCELLED, OperationStatus.DEAD)
    if any(f.fired_at is not None or f.status not in unsent for f in firings):
        return ScheduleState.FIRED
    if any(f.status == OperationStatus.PENDING for f in firings) or not firings:
        return ScheduleState.WAITING
    # Every channel's publish ended unsent: superseded by newer revisions, else cancelled by an operator.
    if all(f.status == OperationStatus.SUPERSEDED for f in firings):
        return ScheduleState.SUPERSEDED
    return ScheduleState.CANCELLED


def _schedule_of(schedule: PublicationSchedule, revision: Revision) -> Schedule:
    operations = list(
        Operation.objects.for_subject("brief", revision.brief.public_id)
        .filter(kind=PUBLISH, subject_version=revision.number)
        .order_by("channel", "id")
        .values("id", "channel", "status", "scheduled_for")
    )
    started = dict(
        Attempt.objects.filter(operation_id__in=[op["id"] for op in operations], number=1).values_list(
            "operation_id", "started_at"
        )
    )
    firings = []
    for op in operations:
        fired_at = started.get(op["id"])
        t = op["scheduled_for"]
        lateness = fired_at - t if fired_at is not None and t is not None else None
        firings.append(ChannelFiring(op["channel"], op["status"], t, fired_at, lateness))
    return Schedule(
        revision=revision.number,
        publish_at=schedule.publish_at,
        zone=schedule.zone,
        state=_state(schedule, firings),
        channels=firings,
        cancelled_at=schedule.cancelled_at,
        cancelled_by=schedule.cancelled_by.get_username() if schedule.cancelled_by else "",
        cancel_reason=schedule.cancel_reason,
    )


def get_schedule_of(schedule: PublicationSchedule) -> Schedule:
    """What `schedule` stands at now (after a reschedule or a cancel, say)."""
    return _schedule_of(schedule, schedule.completion.revision)


def get_revision_schedule(revision: Revision) -> Schedule | None:
    """Revision N's schedule, or None when it was approved for "now" (or not yet approved). Three queries."""
    schedule = PublicationSchedule.objects.select_related("cancelled_by").filter(completion__revision=revision).first()
    return _schedule_of(schedule, revision) if schedule is not None else None


def get_schedule(brief: Brief) -> Schedule | None:
    """The schedule of the brief's newest scheduled revision (waiting, fired, cancelled or superseded), or None."""
    schedule = (
        PublicationSchedule.objects.select_related("cancelled_by", "completion__revision__brief")
        .filter(completion__revision__brief=brief)
        .order_by("-completion__revision__number")
        .first()
    )
    return _schedule_of(schedule, schedule.completion.revision) if schedule is not None else None
