from __future__ import annotations

from django.contrib import admin

from approvals.models import Approval
from galley.admin import ReadOnlyAdmin


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ["revision", "decision", "approver", "payload_hash", "created_at"]
    list_filter = ["decision"]
    search_fields = ["revision__brief__public_id", "payload_hash"]
    list_select_related = ["revision__brief", "approver"]
