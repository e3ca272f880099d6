from __future__ import annotations

from django.contrib import admin

from approvals.models import Approval, Assignment, Comment, Notification
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
