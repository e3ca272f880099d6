from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, User
from django.db.models import Exists, IntegerField, OuterRef, Prefetch, Q, QuerySet, Subquery
from psycopg.rows import dict_row

from approvals.models import Approval, ApprovalChannel, Assignment, Comment, Notification
from approvals.sql import VALID_APPROVAL_SQL
from publishing.models import Brief, Revision, current_headline
from publishing.roles import Role
from publishing.sql import from_row
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


def list_inbox(user: User) -> QuerySet[Brief]:
    """Briefs in review whose open assignment names `user` or a group of theirs, the longest
    waiting first, each with its current revision's number and since when it has waited."""
    current = Revision.objects.filter(brief=OuterRef("pk")).order_by("-number")
    return (
        Brief.objects.filter(_assigned_to(user), status=Brief.Status.IN_REVIEW)
        .annotate(
            current_number=Subquery(current.values("number")[:1]),
            waiting_since=Subquery(current.values("created_at")[:1]),
            headline=current_headline(),
        )
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
        counts["inbox"] = _Counted(Brief.objects.filter(_assigned_to(user), status=Brief.Status.IN_REVIEW).values("pk"))
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


def get_superseding_revision_number(notification: Notification) -> int | None:
    """For a "submitted for review" notification, the brief's latest revision number when it is newer
    than the notification's revision (the review it asked for is of a superseded revision); else None."""
    if notification.event != Notification.Event.SUBMITTED or notification.revision_number is None:
        return None
    latest = (
        Revision.objects.filter(brief_id=notification.brief_id, number__gt=notification.revision_number)
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )
    return latest
