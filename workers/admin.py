from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from workers.models import AuditEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """For records no one edits by hand: immutable rows, and rows that only audited actions change."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "event_type", "subject_type", "subject_id", "actor"]
    list_filter = ["event_type", "subject_type"]
    search_fields = ["subject_id", "event_type"]
    list_select_related = ["actor"]
    date_hierarchy = "created_at"
