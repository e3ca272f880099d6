from __future__ import annotations

from datetime import UTC
from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from approvals.models import Approval, Assignment, Comment, Notification, PublicationSchedule
from approvals.selectors import ChannelFiring, Schedule, get_schedule_of
from workers.admin import ReadOnlyAdmin


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ["revision", "decision", "approver", "payload_hash", "created_at"]
    list_filter = ["decision"]
    search_fields = ["revision__brief__public_id", "payload_hash"]
    list_select_related = ["revision__brief", "approver"]


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ["brief", "assignee", "group", "assigned_by", "created_at", "ended_at"]
    search_fields = ["brief__public_id", "assignee__username"]
    list_select_related = ["brief", "assignee", "group", "assigned_by"]


@admin.register(Comment)
class CommentAdmin(ReadOnlyAdmin):
    list_display = ["id", "revision", "parent_id", "author", "created_at", "resolved_at"]
    search_fields = ["revision__brief__public_id", "author__username"]
    list_select_related = ["revision__brief", "author"]


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["recipient", "event", "brief", "revision_number", "created_at", "read_at", "emailed_at"]
    list_filter = ["event"]
    search_fields = ["brief__public_id", "recipient__username"]
    list_select_related = ["recipient", "brief"]


@admin.register(PublicationSchedule)
class PublicationScheduleAdmin(ReadOnlyAdmin):
    """Read-only: a schedule moves and ends only through the approvers' audited reschedule and cancel
    (approvals.schedules). Its state and each channel's firing are read from its publish operations
    by approvals.selectors, as on the revision page: never stored twice."""

    list_display = ["brief", "revision", "t_utc", "t_local", "state", "channels", "cancelled_by", "cancel_reason"]
    search_fields = ["completion__revision__brief__public_id"]
    list_select_related = ["completion__revision__brief", "cancelled_by"]
    # Each row's state costs its publish operations and their first attempts (two queries).
    list_per_page = 50
    fields = readonly_fields = (
        "brief",
        "revision",
        "t_utc",
        "t_local",
        "state",
        "channels",
        "cancelled_by",
        "cancel_reason",
        "cancelled_at",
        "created_at",
        "updated_at",
    )

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str) -> tuple[Any, bool]:
        # Public ids are lowercase (brief_public_id_form): "Brief-042" finds brief-042.
        return super().get_search_results(request, queryset, search_term.strip().lower())

    def _standing(self, schedule: PublicationSchedule) -> Schedule:
        # One reading per row, shared by the columns that show it.
        cached = getattr(schedule, "_standing", None)
        if cached is None:
            cached = get_schedule_of(schedule)
            schedule._standing = cached  # type: ignore[attr-defined]
        return cached

    @admin.display(description="brief", ordering="completion__revision__brief__public_id")
    def brief(self, schedule: PublicationSchedule) -> str:
        return schedule.completion.revision.brief.public_id

    @admin.display(description="revision")
    def revision(self, schedule: PublicationSchedule) -> int:
        return schedule.completion.revision.number

    @admin.display(description="T (UTC)", ordering="publish_at")
    def t_utc(self, schedule: PublicationSchedule) -> str:
        return f"{schedule.publish_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"

    @admin.display(description="T in its zone")
    def t_local(self, schedule: PublicationSchedule) -> str:
        return f"{self._standing(schedule).local:%Y-%m-%d %H:%M:%S %Z} ({schedule.zone})"

    @admin.display(description="state")
    def state(self, schedule: PublicationSchedule) -> str:
        return self._standing(schedule).state

    @admin.display(description="channels: firing, lateness")
    def channels(self, schedule: PublicationSchedule) -> str:
        return "; ".join(_firing(firing) for firing in self._standing(schedule).channels) or "—"


def _firing(firing: ChannelFiring) -> str:
    if firing.fired_at is None or firing.lateness is None:
        return f"{firing.channel}: {firing.status}, not fired"
    return (
        f"{firing.channel}: {firing.status}, fired {firing.fired_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC, "
        f"{firing.lateness.total_seconds():.1f} s late"
    )
