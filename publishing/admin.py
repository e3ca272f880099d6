from __future__ import annotations

from django.contrib import admin

from publishing.models import Brief, Revision
from workers.admin import ReadOnlyAdmin


class RevisionInline(admin.TabularInline):
    model = Revision
    fields = ["number", "payload_hash", "author", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(Brief)
class BriefAdmin(ReadOnlyAdmin):
    """Read-only: briefs change only through the editorial actions, which audit every change."""

    list_display = ["public_id", "title", "status", "author", "created_at", "updated_at"]
    list_filter = ["status"]
    search_fields = ["public_id", "title"]
    list_select_related = ["author"]
    inlines = [RevisionInline]


@admin.register(Revision)
class RevisionAdmin(ReadOnlyAdmin):
    list_display = ["brief", "number", "payload_hash", "author", "created_at"]
    search_fields = ["brief__public_id", "payload_hash"]
    list_select_related = ["brief", "author"]
