from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from publishing.actions.api_tokens import check_revoke_api_token
from publishing.actions.channels import (
    CHANNEL_SETTINGS,
    CONNECTION_SETTINGS,
    channel_deletion_refusal,
    check_delete_channel,
    check_save_channel,
)
from publishing.actions.desks import (
    DESK_SETTINGS,
    check_delete_desk,
    check_save_desk,
    clean_desk_values,
    desk_deletion_refusal,
)
from publishing.actions.resolutions import (
    OPEN,
    Outcome,
    check_accept_drift,
    check_adopt_drift,
    check_adopt_target_revision,
    check_cancel_publication,
    check_publish_as_next_revision,
    check_republish_approved,
    check_retry_publication,
)
from publishing.actions.webhooks import do_delete_webhook_subscriber, do_save_webhook_subscriber
from publishing.errors import GalleyError
from publishing.identities import WEBHOOK
from publishing.models import (
    ApiToken,
    Brief,
    Channel,
    Desk,
    Draft,
    EditorPresence,
    PublicationProblem,
    Revision,
    WebhookDelivery,
    WebhookEventType,
    WebhookSubscriber,
)
from publishing.roles import Role, has_role, require_role
from publishing.selectors.problems import PROBLEM_KINDS, PROBLEM_QUEUED, get_publication_problem
from publishing.story import story_fields
from workers.admin import OperationAdmin, ReadOnlyAdmin
from workers.models import AuditEvent, OperationStatus

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
    """Read-only, as revisions are immutable: the story field by field (publishing/story.py), empty
    where a revision has none, beside the payload exactly as hashed."""

    list_display = ["brief", "number", "headline", "payload_hash", "author", "created_at"]
    search_fields = ["brief__public_id", "payload_hash"]
    list_select_related = ["brief", "author"]
    fieldsets = [
        (None, {"fields": ["brief", "number", "author", "created_at"]}),
        ("Story", {"fields": ["headline", "standfirst", "body_markdown", "byline", "section", "tags"]}),
        ("As hashed", {"fields": ["payload_hash", "payload"]}),
    ]
    readonly_fields = ["headline", "standfirst", "body_markdown", "byline", "section", "tags"]

    @admin.display(description="Headline")
    def headline(self, revision: Revision) -> str:
        return str(story_fields(revision.payload)["title"])

    @admin.display(description="Standfirst")
    def standfirst(self, revision: Revision) -> str:
        return str(story_fields(revision.payload)["standfirst"])

    @admin.display(description="Body (Markdown)")
    def body_markdown(self, revision: Revision) -> str:
        return str(story_fields(revision.payload)["body"])

    @admin.display(description="Byline")
    def byline(self, revision: Revision) -> str:
        return str(story_fields(revision.payload)["byline"])

    @admin.display(description="Section")
    def section(self, revision: Revision) -> str:
        return str(story_fields(revision.payload)["section"])

    @admin.display(description="Tags")
    def tags(self, revision: Revision) -> str:
        return ", ".join(story_fields(revision.payload)["tags"])


@admin.register(Draft)
class DraftAdmin(ReadOnlyAdmin):
    """Read-only: a draft changes only from its edit page (publishing.actions.drafts)."""

    list_display = ["brief", "version", "base_number", "holder", "updated_by", "updated_at"]
    search_fields = ["brief__public_id"]
    list_select_related = ["brief", "holder", "updated_by"]


@admin.register(EditorPresence)
class EditorPresenceAdmin(ReadOnlyAdmin):
    """Read-only: written by the edit page's heartbeat; older than a minute, it shows nowhere."""

    list_display = ["brief", "user", "last_seen_at", "typing_at"]
    search_fields = ["brief__public_id", "user__username"]
    list_select_related = ["brief", "user"]


class ProblemState(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("open", "Needs an operator"), ("queued", "Retry queued"), ("ended", "Settled")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[PublicationProblem]) -> QuerySet[PublicationProblem]:
        if self.value() == "open":
            return queryset.filter(status__in=OPEN)
        if self.value() == "queued":
            # An operator's retry or look-up whose outcome is not known yet: not settled before it ran.
            return queryset.filter(status__in=PROBLEM_QUEUED)
        if self.value() == "ended":
            return queryset.exclude(status__in=(*OPEN, *PROBLEM_QUEUED))
        return queryset


@admin.register(PublicationProblem)
class PublicationProblemAdmin(ReadOnlyAdmin):
    """Dead letters and conflicts of publication operations (publish, verify, republish, drift check) and of
    retractions, and the ones settled before.

    The page of one shows what Galley intended beside what the target held, and the actions that
    end it (publishing.actions.resolutions); each is a POST to `resolve/`, audited and idempotent.
    """

    list_display = ["key", "kind", "channel", "problem", "status", "attempts", "updated_at"]
    list_filter = [ProblemState, "status", "kind", "channel"]
    search_fields = ["key", "subject_id"]
    ordering = ["-updated_at", "-id"]
    change_form_template = "admin/publishing/publicationproblem/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[PublicationProblem]:
        ever_stuck = (
            Q(status__in=(*OPEN, OperationStatus.CANCELLED))
            | Q(conflicts__isnull=False)
            | Q(attempt_set__outcome__in=("dead", "conflict"))
        )
        return (
            super()
            .get_queryset(request)
            .filter(ever_stuck, kind__in=PROBLEM_KINDS)
            .distinct()
            .prefetch_related("conflicts")
        )

    @admin.display(description="problem")
    def problem(self, operation: PublicationProblem) -> str:
        conflicts = sorted(operation.conflicts.all(), key=lambda conflict: conflict.id)
        if conflicts:
            return conflicts[-1].get_kind_display().split(":")[0]
        return "Dead letter" if operation.status == OperationStatus.DEAD else operation.last_error_kind or "—"

    def get_urls(self) -> list[URLPattern]:
        resolve = path(
            "<int:object_id>/resolve/",
            self.admin_site.admin_view(self.resolve_view),
            name="publishing_publicationproblem_resolve",
        )
        return [resolve, *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        operation = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if operation is not None:
            problem = get_publication_problem(operation)
            context.update(
                problem=problem,
                can_operate=has_role(request.user, Role.OPERATOR),
                edit_url=reverse("publishing:revision_edit", args=[problem.brief.public_id]),
                brief_url=reverse("publishing:brief", args=[problem.brief.public_id]),
                audit=AuditEvent.objects.filter(
                    Q(subject_id=operation.key) | Q(subject_type="brief", subject_id=operation.subject_id)
                ).order_by("-created_at", "-id")[:20],
            )
        return super().change_view(request, object_id, form_url, extra_context=context)

    def resolve_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        operation = self.get_object(request, str(object_id))
        if operation is None or not self.has_view_permission(request, operation):
            raise Http404("There is no such publication problem.")
        action = request.POST.get("action", "")
        try:
            with transaction.atomic(durable=True):
                if action == "adopt":
                    outcome = check_adopt_target_revision(operation, acting_user=request.user)
                elif action in ("retry", "look_up"):
                    outcome = check_retry_publication(operation, acting_user=request.user, look_up=action == "look_up")
                elif action == "publish_as_next_revision":
                    outcome = check_publish_as_next_revision(operation, acting_user=request.user)
                elif action == "adopt_drift":
                    outcome = check_adopt_drift(operation, acting_user=request.user)
                elif action == "republish":
                    outcome = check_republish_approved(operation, acting_user=request.user)
                elif action == "accept_drift":
                    outcome = check_accept_drift(
                        operation, reason=request.POST.get("reason", ""), acting_user=request.user
                    )
                elif action == "cancel":
                    outcome = check_cancel_publication(
                        operation, reason=request.POST.get("reason", ""), acting_user=request.user
                    )
                else:
                    outcome = Outcome(False, "Choose one of the actions on the page.")
        except GalleyError as refusal:
            outcome = Outcome(False, refusal.message)
        self.message_user(request, outcome.message, messages.SUCCESS if outcome.changed else messages.WARNING)
        return HttpResponseRedirect(reverse("admin:publishing_publicationproblem_change", args=[operation.id]))


class TokenState(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("live", "Live"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> QuerySet[ApiToken]:
        if self.value() == "live":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """The JSON API's tokens: who holds which, and the operators' "revoke" (audited, idempotent).

    Tokens are made with `manage.py create_api_token`, which shows the secret once; Galley keeps
    only its sha256, and this page shows neither (the prefix tells tokens apart). Galley does not
    record when a token was last used: that would be a write on every API read.
    """

    list_display = ["prefix", "name", "user", "created_at", "revoked_at"]
    list_filter = [TokenState]
    search_fields = ["prefix", "name", "user__username"]
    list_select_related = ["user"]
    fields = ["prefix", "name", "user", "created_at", "revoked_at"]
    actions = ["revoke"]

    @admin.action(description="Revoke (the API answers 401 to it from now on)", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked, already = 0, []
        try:
            for token in queryset.order_by("id"):
                with transaction.atomic(durable=True):
                    if check_revoke_api_token(token, acting_user=request.user):
                        revoked += 1
                    else:
                        already.append(f"{token.prefix}… ({token.name})")
        except GalleyError as refusal:
            self.message_user(request, refusal.message, messages.ERROR)
            return
        self.message_user(request, f"{revoked} token(s) revoked.")
        if already:
            self.message_user(request, "Already revoked, left as they were: " + ", ".join(already), messages.WARNING)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return has_role(request.user, Role.OPERATOR)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # A token is revoked, never deleted: its row (and the audit trail naming its prefix) stays.
        return False


def _operator(request: HttpRequest) -> User:
    return require_role(request.user, Role.OPERATOR, to="manage webhook subscribers")


class WebhookSubscriberForm(forms.ModelForm):
    """The secret is write-only: typed to set or replace it, never rendered back (the page says only
    whether one is set); left empty on a change, the one it has stays."""

    secret = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Signs every delivery (docs/webhooks.md). Write-only: leave empty to keep the one set.",
    )
    url = forms.URLField(max_length=500, assume_scheme="https", help_text="Where each event is POSTed.")
    events = forms.MultipleChoiceField(
        required=False,
        choices=WebhookEventType.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every event type.",
    )

    class Meta:
        model = WebhookSubscriber
        fields = ["name", "url", "events", "enabled"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not cleaned.get("secret") and not self.instance.secret_sealed:
            self.add_error("secret", "Set a secret: every delivery is signed with it.")
        return cleaned


class OperatorConfiguredAdmin(admin.ModelAdmin):
    """Settings operators configure (webhook subscribers, channels, desks), each change through an
    audited action: only Operators add, change and delete."""

    # The changelist's bulk delete, offered only where delete_queryset goes through the action: elsewhere
    # it would bypass the action's refusal and audit, and a row is deleted from its own page.
    bulk_delete = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return has_role(request.user, Role.OPERATOR)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return has_role(request.user, Role.OPERATOR)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return has_role(request.user, Role.OPERATOR)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        if not self.bulk_delete:
            actions.pop("delete_selected", None)
        return actions


@admin.register(WebhookSubscriber)
class WebhookSubscriberAdmin(OperatorConfiguredAdmin):
    """Operators register the URLs that receive lifecycle events; every create, change and delete is
    audited (publishing.actions.webhooks), the secret never in the record."""

    form = WebhookSubscriberForm
    bulk_delete = True  # delete_queryset deletes each through the action, audited
    list_display = ["name", "url", "event_types", "enabled", "secret_state", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name", "url"]
    fields = ["name", "url", "events", "enabled", "secret", "secret_state", "created_at", "updated_at"]
    readonly_fields = ["secret_state", "created_at", "updated_at"]

    @admin.display(description="secret")
    def secret_state(self, subscriber: WebhookSubscriber) -> str:
        return "set" if subscriber.secret_sealed else "not set"

    @admin.display(description="events")
    def event_types(self, subscriber: WebhookSubscriber) -> str:
        return ", ".join(subscriber.events) or "all"

    def save_model(self, request: HttpRequest, obj: WebhookSubscriber, form: forms.ModelForm, change: bool) -> None:
        # The admin's change form runs in its own transaction already: the action joins it.
        do_save_webhook_subscriber(obj, secret=form.cleaned_data.get("secret") or None, acting_user=_operator(request))

    def delete_model(self, request: HttpRequest, obj: WebhookSubscriber) -> None:
        do_delete_webhook_subscriber(obj, acting_user=_operator(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WebhookSubscriber]) -> None:
        for subscriber in queryset.order_by("id"):
            do_delete_webhook_subscriber(subscriber, acting_user=_operator(request))


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(OperationAdmin):
    """Every event's delivery to every subscriber, read-only, with its attempts; a dead letter is
    retried with the operators' own "Retry now" (workers.actions.operator), which sends the same
    event id and body again."""

    list_display = ["key", "status", "attempts", "waits", "last_error_kind", "next_attempt_at", "updated_at"]
    list_filter = ["status", "last_error_kind"]
    actions = ["retry_now", "cancel_with_reason"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookDelivery]:
        return WebhookDelivery.objects.filter(kind=WEBHOOK)


class ChannelForm(forms.ModelForm):
    """A channel's settings, and its credentials write-only: never rendered back (the page says only
    whether they are set), blank keeps the stored ones, "clear" removes them."""

    # Declared for its scheme: a URL typed without one is https (Django 6's default, chosen now).
    base_url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="Reference: the service's root URL. WordPress: the site's URL.",
    )

    credentials = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Reference: the bearer token. WordPress: the application password. Blank keeps the stored one.",
    )
    clear_credentials = forms.BooleanField(required=False, label="Clear the stored credentials")

    class Meta:
        model = Channel
        # base_url is the declared field above, never the model's (whose form field warns about its scheme).
        fields = [name for name in CHANNEL_SETTINGS if name != "base_url"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("credentials") and cleaned.get("clear_credentials"):
            raise forms.ValidationError("Enter new credentials or clear the stored ones, not both.")
        return cleaned


PRIMARY_NOTE = (
    "The primary channel: its connection (kind, URL, credentials) is defined by the GALLEY_TARGET_* settings "
    "(GALLEY_TARGET_KIND, GALLEY_TARGET_URL, GALLEY_TARGET_TOKEN; for WordPress GALLEY_WORDPRESS_*), "
    "docs/configuration.md. Its operation keys are the unextended ones."
)


@admin.register(Channel)
class ChannelAdmin(OperatorConfiguredAdmin):
    """Operators configure channels here (publishing.actions.channels: every change audited, the
    credentials never in an audit record, a page or a log). The slug is set once: it is part of every
    operation key on the channel."""

    form = ChannelForm
    list_display = ["slug", "name", "kind", "base_url", "enabled", "is_default", "rate_per_second", "credentials_set"]
    list_filter = ["enabled", "is_default", "kind"]
    search_fields = ["slug", "name"]

    @admin.display(description="Credentials", boolean=False)
    def credentials_set(self, channel: Channel) -> str:
        if channel.from_settings:
            return "from the settings"
        return "set" if channel.secret_sealed else "not set"

    @admin.display(description="Connection")
    def primary_note(self, channel: Channel) -> str:
        return PRIMARY_NOTE

    def get_fields(self, request: HttpRequest, obj: Channel | None = None) -> tuple[str, ...]:
        if obj is not None and obj.from_settings:
            return ("slug", "primary_note", "name", *CONNECTION_SETTINGS, "enabled", "is_default", "rate_per_second")
        return (*CHANNEL_SETTINGS[:5], "credentials_set", "credentials", "clear_credentials", *CHANNEL_SETTINGS[5:])

    def get_readonly_fields(self, request: HttpRequest, obj: Channel | None = None) -> list[str]:
        if obj is None:
            return ["credentials_set"]
        if obj.from_settings:
            # The credentials too, though not shown: the form then has no field a crafted POST could fill.
            return ["slug", "primary_note", *CONNECTION_SETTINGS, "credentials", "clear_credentials"]
        return ["slug", "credentials_set"]

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        if isinstance(obj, Channel) and obj.from_settings:
            return False
        return super().has_delete_permission(request, obj)

    # An error report of a request to this page (an exception's email or page) shows the credentials as stars.
    @method_decorator(sensitive_post_parameters("credentials"))
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Channel, form: forms.ModelForm, change: bool) -> None:
        # The admin's change view holds a transaction; the action joins it.
        saved = check_save_channel(
            obj.pk if change else None,
            values={name: form.cleaned_data[name] for name in CHANNEL_SETTINGS if name in form.cleaned_data},
            secret=form.cleaned_data.get("credentials", ""),
            clear_secret=form.cleaned_data.get("clear_credentials", False),
            acting_user=request.user,
        )
        obj.pk = saved.pk
        obj.refresh_from_db()

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, list[Any]]:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        refusals = [refusal for channel in objs if (refusal := channel_deletion_refusal(channel))]
        return deleted, counts, perms_needed, [*protected, *refusals]

    def delete_model(self, request: HttpRequest, obj: Channel) -> None:
        check_delete_channel(obj.pk, acting_user=request.user)


class DeskForm(forms.ModelForm):
    """A desk's policy. `is_default` is the form's own field, outside the model form's validation:
    the model's desk_one_default would refuse making a second desk the default, and the action moves
    the flag from the desk that has it instead."""

    approvals_required = forms.IntegerField(
        min_value=1, max_value=10, initial=1, help_text="Approvals from distinct approvers a revision needs (1 to 10)."
    )
    is_default = forms.BooleanField(
        required=False, label="Default desk", help_text="New briefs go to the default desk; there is always one."
    )

    class Meta:
        model = Desk
        fields = ["slug", "name", "approvals_required", "required_groups"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.errors:
            try:
                clean_desk_values(self.instance if self.instance.pk else None, desk_values(cleaned))
            except GalleyError as refusal:
                raise forms.ValidationError(refusal.message) from refusal
        return cleaned

    def validate_unique(self) -> None:
        # clean_desk_values has said, in its words, whether the slug or the name is taken.
        pass


def desk_values(cleaned: dict[str, Any]) -> dict[str, Any]:
    """The desk form's values as the actions take them: the required groups by name."""
    values = {name: cleaned[name] for name in DESK_SETTINGS if name in cleaned}
    values["required_groups"] = [group.name for group in cleaned.get("required_groups", [])]
    return values


@admin.register(Desk)
class DeskAdmin(OperatorConfiguredAdmin):
    """Operators define desks and their approval policies here (publishing.actions.desks: every
    change audited with the required groups, old and new). The slug is set once; a desk with briefs,
    and the default desk, are never deleted."""

    form = DeskForm
    list_display = ["slug", "name", "approvals_required", "groups", "is_default", "updated_at"]
    list_filter = ["is_default"]
    search_fields = ["slug", "name"]
    fields = ["slug", "name", "approvals_required", "required_groups", "is_default", "created_at", "updated_at"]
    # The model form never sets is_default: the form's field of that name goes to the action.
    exclude = ["is_default"]
    filter_horizontal = ["required_groups"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Desk]:
        return super().get_queryset(request).prefetch_related("required_groups")

    @admin.display(description="Required groups")
    def groups(self, desk: Desk) -> str:
        return ", ".join(sorted(group.name for group in desk.required_groups.all())) or "—"

    def get_readonly_fields(self, request: HttpRequest, obj: Desk | None = None) -> list[str]:
        return ["created_at", "updated_at"] if obj is None else ["slug", "created_at", "updated_at"]

    def get_form(self, request: HttpRequest, obj: Desk | None = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        form.base_fields["is_default"].initial = obj is not None and obj.is_default
        return form

    def save_model(self, request: HttpRequest, obj: Desk, form: forms.ModelForm, change: bool) -> None:
        # The admin's change view holds a transaction; the action joins it and sets the required
        # groups too, so that one audit record holds them old and new.
        saved = check_save_desk(
            obj.pk if change else None, values=desk_values(form.cleaned_data), acting_user=request.user
        )
        obj.pk = saved.pk
        obj.refresh_from_db()

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool) -> None:
        # save_model's action has set the required groups, audited: the form's own save_m2m would set
        # them again, unaudited. A desk has no inlines, so there is nothing else to save.
        pass

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        if isinstance(obj, Desk) and obj.is_default:
            return False
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, list[Any]]:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        refusals = [refusal for desk in objs if (refusal := desk_deletion_refusal(desk))]
        if refusals:
            # The page would otherwise ask for permission to delete the briefs, which are never deleted
            # with their desk (PROTECT): it says why the desk stays instead.
            return deleted, counts, set(), [*protected, *refusals]
        return deleted, counts, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Desk) -> None:
        check_delete_desk(obj.pk, acting_user=request.user)
