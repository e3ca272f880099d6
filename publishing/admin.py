from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from galley.admin import ReadOnlyAdmin
from publishing.models import Brief, Revision

REVISION_FIELDS = ("number", "payload_hash", "author", "created_at")


class RevisionInline(admin.TabularInline):
    model = Revision
    fields = REVISION_FIELDS
    readonly_fields = REVISION_FIELDS
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Brief | None = None) -> bool:
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
