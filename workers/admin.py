from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from workers.actions.operator import do_cancel_operation, do_resolve_conflict, do_retry_operation_now
from workers.models import NEEDS_OPERATOR, Attempt, AuditEvent, Conflict, Operation


class ReadOnlyAdmin(admin.ModelAdmin):
    """For records no one edits by hand: immutable rows, and rows that only audited actions change.

    The admin base of every Galley app's model admins: it lives here, in the machinery every app
    already imports, so that no app imports anything of `galley` (pyproject's import contracts)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class OperatorRequest(HttpRequest):
    """An admin request: the admin site lets only signed-in staff accounts in."""

    user: User


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "event_type", "subject_type", "subject_id", "actor"]
    list_filter = ["event_type", "subject_type"]
    search_fields = ["subject_id", "event_type"]
    list_select_related = ["actor"]
    date_hierarchy = "created_at"


ATTEMPT_FIELDS = (
    "number",
    "worker_id",
    "fencing_token",
    "ambiguous",
    "started_at",
    "finished_at",
    "outcome",
    "error_kind",
    "http_status",
    "duration_ms",
    "error_message",
)


class AttemptInline(admin.TabularInline):
    model = Attempt
    fields = ATTEMPT_FIELDS
    readonly_fields = ATTEMPT_FIELDS
    extra = 0
    can_delete = False
    ordering = ["-number"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class OperatorActionForm(ActionForm):
    reason = forms.CharField(required=False, label="Reason / resolution")


class NeedsOperatorFilter(admin.SimpleListFilter):
    """NEEDS_OPERATOR, the one definition the ops page's tile and list and /metrics count by."""

    title = "needs an operator"
    parameter_name = "needs_operator"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Needs an operator"), ("no", "Does not")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Operation]) -> QuerySet[Operation]:
        if self.value() == "yes":
            return queryset.filter(NEEDS_OPERATOR)
        if self.value() == "no":
            return queryset.exclude(NEEDS_OPERATOR)
        return queryset


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    """Operations, dead letters and conflicts. Changes happen only through the audited actions."""

    list_display = [
        "key",
        "kind",
        "channel",
        "status",
        "attempts",
        "waits",
        "max_attempts",
        "needs_an_operator",
        "next_attempt_at",
        "lease_owner",
        "fencing_token",
        "last_error_kind",
        "updated_at",
    ]
    list_filter = ["status", "kind", "channel", NeedsOperatorFilter, "last_error_kind"]
    search_fields = ["key", "subject_id"]
    date_hierarchy = "created_at"
    inlines = [AttemptInline]
    action_form = OperatorActionForm
    actions = ["retry_now", "reconcile_with_target", "cancel_with_reason"]

    @admin.display(description="needs an operator", ordering="needs_operator")
    def needs_an_operator(self, operation: Operation) -> str:
        # Words, not Django's boolean icons: a green tick beside "needs an operator" reads as "all well".
        return "needs an operator" if operation.needs_an_operator else "—"

    @admin.action(description="Retry now", permissions=["operate"])
    def retry_now(self, request: OperatorRequest, queryset: QuerySet[Operation]) -> None:
        self._apply(request, queryset, lambda op: do_retry_operation_now(op, acting_user=request.user), "retried")

    @admin.action(description="Reconcile with the target (look the key up, adopt what exists)", permissions=["operate"])
    def reconcile_with_target(self, request: OperatorRequest, queryset: QuerySet[Operation]) -> None:
        self._apply(
            request,
            queryset,
            lambda op: do_retry_operation_now(op, acting_user=request.user, reconcile=True),
            "queued for reconciliation",
        )

    @admin.action(description="Cancel (give a reason)", permissions=["operate"])
    def cancel_with_reason(self, request: OperatorRequest, queryset: QuerySet[Operation]) -> None:
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(request, "Give a reason to cancel.", level=messages.ERROR)
            return
        self._apply(
            request,
            queryset,
            lambda op: do_cancel_operation(op, reason=reason, acting_user=request.user),
            "cancelled",
        )

    def _apply(self, request: HttpRequest, queryset: QuerySet[Operation], action: Any, verb: str) -> None:
        changed, unchanged = 0, []
        for operation in queryset.order_by("id"):
            with transaction.atomic(durable=True):
                if action(operation):
                    changed += 1
                else:
                    unchanged.append(f"{operation.key} ({operation.status})")
        self.message_user(request, f"{changed} operation(s) {verb}.")
        if unchanged:
            self.message_user(
                request,
                "Left as they were (not allowed from their state): " + ", ".join(unchanged),
                messages.WARNING,
            )

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("workers.operate_operation"))


@admin.register(Conflict)
class ConflictAdmin(ReadOnlyAdmin):
    list_display = [
        "operation",
        "kind",
        "source",
        "existing_payload_hash",
        "conflicting_payload_hash",
        "created_at",
        "resolved_at",
    ]
    list_filter = ["kind", "source", ("resolved_at", admin.EmptyFieldListFilter)]
    search_fields = ["operation__key"]
    list_select_related = ["operation"]
    action_form = OperatorActionForm
    actions = ["mark_resolved"]

    @admin.action(description="Mark resolved (give the resolution)", permissions=["operate"])
    def mark_resolved(self, request: OperatorRequest, queryset: QuerySet[Conflict]) -> None:
        resolution = request.POST.get("reason", "").strip()
        if not resolution:
            self.message_user(request, "Describe the resolution.", level=messages.ERROR)
            return
        resolved = 0
        for conflict in queryset.order_by("id"):
            with transaction.atomic(durable=True):
                resolved += do_resolve_conflict(conflict, resolution=resolution, acting_user=request.user)
        self.message_user(request, f"{resolved} conflict(s) marked resolved.")

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("workers.operate_operation"))


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = [
        "operation",
        "number",
        "worker_id",
        "fencing_token",
        "outcome",
        "error_kind",
        "http_status",
        "duration_ms",
        "started_at",
    ]
    list_filter = ["outcome", "error_kind"]
    search_fields = ["operation__key", "worker_id"]
    list_select_related = ["operation"]
