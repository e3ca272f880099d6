from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce, Upper
from django.urls import reverse
from django.utils import timezone

from publishing.summary_rules import SummaryStep
from workers.models import Operation


class BriefStatus(models.TextChoices):
    DRAFTING = "drafting", "Drafting"
    IN_REVIEW = "in_review", "In review"
    CHANGES_REQUESTED = "changes_requested", "Changes requested"
    APPROVED = "approved", "Approved"
    PUBLISHED = "published", "Published"
    # Taken down on every channel that held it (docs/retractions.md); only a newer approved revision
    # publishes it again.
    RETRACTED = "retracted", "Retracted"


def current_headline(brief: str = "pk", *, title: str = "title") -> Coalesce:
    """The headline a brief goes by: its latest revision's title, else the title it was created with.
    `brief` names the brief's id and `title` its creation title in the outer query ("brief_id" and
    "brief__title" on a row that names a brief). One probe of the (brief, number) unique index, as a
    column of the outer query: a list of briefs stays one query."""
    latest_title = (
        Revision.objects.filter(brief=models.OuterRef(brief))
        .order_by("-number")
        .values(headline=KeyTextTransform("title", "payload"))[:1]
    )
    return Coalesce(models.Subquery(latest_title), models.F(title), output_field=models.CharField())


class ChannelKind(models.TextChoices):
    REFERENCE = "reference", "Target protocol (reference or any service speaking it)"
    WORDPRESS = "wordpress", "WordPress with the companion plugin"


class Channel(models.Model):
    """A configured destination: one publication per (revision, channel), exactly once and verified.

    The primary channel (`web`, publishing.identities.PRIMARY_CHANNEL) is made by migration 0014 and
    takes its connection from the GALLEY_TARGET_* / GALLEY_WORDPRESS_* settings (`from_settings`), so a
    single-target newsroom changes nothing; its operation keys are the unextended ones. Every other
    channel is configured here, by operators in the admin. `secret_sealed` holds the credentials sealed
    with a key derived from SECRET_KEY (publishing.credentials): write-only, never shown, logged or
    audited. The slug never changes: it is part of every operation key on the channel.
    """

    Kind = ChannelKind

    slug = models.SlugField(max_length=50, unique=True, help_text="Part of every operation key on it; never changes.")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices, default=ChannelKind.REFERENCE)
    base_url = models.URLField(max_length=500, blank=True)
    username = models.CharField(
        max_length=150, blank=True, help_text="WordPress: the user of the application password."
    )
    secret_sealed = models.TextField(blank=True, editable=False)
    enabled = models.BooleanField(default=True)
    is_default = models.BooleanField(default=False, help_text="New briefs go to the default channels.")
    rate_per_second = models.PositiveIntegerField(
        null=True, blank=True, help_text="Sends per second across every worker on every host; empty: no limit."
    )
    from_settings = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-from_settings", "slug"]
        constraints = [
            models.CheckConstraint(condition=models.Q(slug__regex=r"^[a-z0-9][a-z0-9-]*$"), name="channel_slug_form"),
            models.CheckConstraint(condition=models.Q(kind__in=ChannelKind.values), name="channel_kind_valid"),
            models.UniqueConstraint(
                fields=["from_settings"], condition=models.Q(from_settings=True), name="channel_one_from_settings"
            ),
            models.CheckConstraint(
                condition=models.Q(rate_per_second__isnull=True) | models.Q(rate_per_second__gte=1),
                name="channel_rate_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Desk(models.Model):
    """A section of the newsroom, and the approval policy of its briefs (docs/policies.md): how many
    approvals from distinct approvers a revision needs, and the groups each of which must approve it
    (e.g. Legal). The default desk (migration 0016: one approval, no group) is today's single
    approver. Operators manage desks in the admin, audited; the approval that completes a revision's
    policy records the policy that applied (approvals.models.ApprovalCompletion)."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100, unique=True)
    approvals_required = models.PositiveSmallIntegerField(
        default=1, help_text="Approvals from distinct approvers a revision needs (1 to 10)."
    )
    required_groups = models.ManyToManyField(
        "auth.Group",
        blank=True,
        related_name="+",
        help_text="Groups each of which must approve a revision (one approval from a member of each).",
    )
    is_default = models.BooleanField(default=False, help_text="New briefs go to the default desk.")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(approvals_required__gte=1, approvals_required__lte=10),
                name="desk_approvals_required_range",
            ),
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="desk_one_default"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Brief(models.Model):
    Status = BriefStatus

    public_id = models.CharField(max_length=32, unique=True, editable=False, help_text="Stable job id, e.g. brief-042.")
    title = models.CharField(max_length=200)
    # The title as the brief list's search compares it (UPPER, as icontains does), stored: folding
    # every title's case in each search was two thirds of its cost (migration 0011).
    title_search = models.GeneratedField(
        expression=Upper("title"),
        output_field=models.CharField(max_length=200),
        db_persist=True,
    )
    source_material = models.TextField(blank=True)
    source_hash = models.CharField(
        max_length=64, blank=True, help_text="publishing.hashing.source_hash of the source material."
    )
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="briefs")
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.DRAFTING)
    channels = models.ManyToManyField(
        Channel,
        blank=True,
        related_name="briefs",
        help_text="Where an approval of it publishes (the default channels).",
    )
    desk = models.ForeignKey(
        Desk, on_delete=models.PROTECT, related_name="briefs", help_text="Its section; its policy says who approves."
    )
    legal_review = models.BooleanField(
        default=False, help_text="Flagged as needing legal review: Legal must approve; only Legal lifts it."
    )
    published_revision_number = models.PositiveIntegerField(
        null=True, blank=True, help_text="Highest revision verified on any channel; only ever grows."
    )
    retracted_revision_number = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Highest revision a retraction took down: Galley's own fence, that revision and older are "
        "never approved or published again; only ever grows.",
    )
    # db_default too: rows written in bulk by SQL that predates the column (tests/benchmarks/bulk.py) get it.
    retraction_reason = models.TextField(
        blank=True, default="", db_default="", help_text="Why the last retraction took the brief down."
    )
    form_token = models.UUIDField(
        null=True,
        blank=True,
        unique=True,
        editable=False,
        help_text="The one-time token of the new-brief form that created it; that form sent again finds this brief.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(status__in=BriefStatus.values), name="brief_status_valid"),
            models.CheckConstraint(
                condition=models.Q(public_id__regex=r"^brief-[0-9]{3,}$"), name="brief_public_id_form"
            ),
        ]
        # The brief list (publishing.selectors.briefs.list_briefs) picks a page's ids from these alone: they
        # hold its order, its status filter and the columns its search reads (migration 0009).
        indexes = [
            models.Index(
                fields=["-created_at", "-id"], include=["title_search", "public_id"], name="brief_created_idx"
            ),
            models.Index(
                fields=["status", "-created_at", "-id"],
                include=["title_search", "public_id"],
                name="brief_status_created_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.title}"

    def get_absolute_url(self) -> str:
        return reverse("publishing:brief", args=[self.public_id])


class Revision(models.Model):
    """Immutable: the database refuses UPDATE and DELETE of a row (trigger in migration 0002).

    `payload_hash` is publishing.hashing.payload_hash(payload), computed once, by the action
    that writes the row.
    """

    brief = models.ForeignKey(Brief, on_delete=models.PROTECT, related_name="revisions")
    number = models.PositiveIntegerField()
    payload = models.JSONField()
    payload_hash = models.CharField(max_length=64)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="revisions")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["brief_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["brief", "number"], name="revision_number_unique_per_brief"),
            # Target of the approvals' composite foreign key (revision_id, payload_hash).
            models.UniqueConstraint(fields=["id", "payload_hash"], name="revision_id_hash_unique"),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="revision_number_positive"),
            models.CheckConstraint(
                condition=models.Q(payload_hash__regex=r"^[0-9a-f]{64}$"), name="revision_hash_is_sha256_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.brief.public_id} revision {self.number}"

    def get_absolute_url(self) -> str:
        return reverse("publishing:revision", args=[self.brief.public_id, self.number])

    @property
    def title(self) -> str:
        return str(self.payload.get("title", ""))

    @property
    def body(self) -> str:
        return str(self.payload.get("body", ""))


class Publication(models.Model):
    """Revision `revision` applied on channel `channel` under `operation_key` (one per revision and channel).

    Recorded in the same transaction as the publish operation's success, with the verification
    operation that depends on it. `verified_at` is set once a read-back showed the target
    holding this payload hash at the permalink (docs/invariants.md#i10). The payload hash is the
    revision's, enforced by a composite foreign key (migration 0004).
    """

    brief = models.ForeignKey(Brief, on_delete=models.PROTECT, related_name="publications")
    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="publications")
    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, related_name="publications")
    operation_key = models.CharField(max_length=255, unique=True)
    payload_hash = models.CharField(max_length=64)
    external_id = models.CharField(max_length=200)
    permalink = models.URLField(max_length=500)
    created_at = models.DateTimeField(default=timezone.now)
    verified_at = models.DateTimeField(null=True, blank=True)
    # Set once a retraction was observed here: the read-back says retracted and the permalink is gone
    # (docs/retractions.md); never cleared, a newer revision publishes as a publication of its own.
    retracted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["revision", "channel"], name="publication_one_per_revision_channel")
        ]

    def __str__(self) -> str:
        return f"{self.operation_key} -> {self.permalink}"


class SummaryRun(models.Model):
    """One run of the summary pipeline over one version of a brief's source material.

    Its steps are operations `summary:<brief>:run-<n>:<step>`, each a durable prerequisite of
    the next. Editing the source material starts a new run; older runs stop at their next step.
    """

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        SUPERSEDED = "superseded", "Superseded"

    brief = models.ForeignKey(Brief, on_delete=models.PROTECT, related_name="summary_runs")
    number = models.PositiveIntegerField()
    source_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    revision = models.ForeignKey(
        Revision,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The first revision this run wrote.",
    )
    suggestion = models.BooleanField(
        default=False, help_text="An editor wrote a revision first: the draft is offered, never written over."
    )
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["brief_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["brief", "number"], name="summary_run_number_unique"),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="summary_run_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.brief.public_id} summary run {self.number}"


class StepArtifact(models.Model):
    """The one canonical artifact of a step identity `<brief>/summary/<source-hash>/<step>`.

    Written canonical-first (insert, or read what already holds the identity); every later
    decision uses the stored value. Immutable: the database refuses UPDATE and DELETE.
    """

    brief = models.ForeignKey(Brief, on_delete=models.PROTECT, related_name="step_artifacts")
    source_hash = models.CharField(max_length=64)
    step = models.CharField(max_length=16, choices=SummaryStep.choices)
    identity = models.CharField(max_length=255, unique=True)
    content = models.JSONField()
    provider = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=100, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["brief_id", "created_at"]

    def __str__(self) -> str:
        return self.identity


class PublicationProblem(Operation):
    """A publish or verify operation as the operator settles it in the admin ("Publication
    problems"): what Galley intended beside what the target holds, and the actions that end it."""

    class Meta:
        proxy = True
        verbose_name = "publication problem"


class ApiToken(models.Model):
    """A user's bearer token for the JSON API (`Authorization: Bearer <secret>`).

    Only the sha256 hex digest of the secret is stored (publishing.actions.api_tokens); the
    secret is shown once, when the token is made. A token acts with its user's roles.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. the integration's name.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=16, editable=False, help_text="The secret's first characters, to tell tokens apart."
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name}, {self.user})"


class IdempotencyRecord(models.Model):
    """The stored response of one API POST under a user's Idempotency-Key (docs/api.md).

    Written in the same transaction as the write it answers, so a replay never returns a response
    whose write did not commit. While a request runs, its key is held by a transaction-level
    advisory lock (publishing.actions.idempotency), not by a row. Database guard: one record per
    (user, key). Records older than GALLEY_RETENTION_DAYS count as absent and are purged.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="sha256 of method, path and canonical body.")
    response_status = models.PositiveSmallIntegerField()
    response_body = models.TextField(help_text="The response's JSON text, replayed byte for byte.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_one_record_per_user_key")]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]

    def __str__(self) -> str:
        return f"{self.key} ({self.user_id})"


class Draft(models.Model):
    """A brief's working draft: the story as editors are writing it, autosaved, not yet a revision.

    `story` holds every field of publishing.story.STORY_KEYS (empty ones as ""/[]), unchecked
    beyond what the database can store: an unfinished draft may be invalid, and is checked when it is
    submitted as the next revision (publishing.actions.drafts). `version` grows on every save: a save
    names the version it started from, and a stale one is refused with the text saved meanwhile.
    `holder` is the editor whose saves go through while their edit page is open (the soft lock:
    another editor takes over explicitly; it lapses with the holder's presence).
    """

    brief = models.OneToOneField(Brief, on_delete=models.PROTECT, related_name="draft")
    story = models.JSONField(default=dict)
    base_number = models.PositiveIntegerField(help_text="The revision the draft started from; 0 before the first.")
    version = models.PositiveIntegerField(default=1)
    holder = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [models.CheckConstraint(condition=models.Q(version__gte=1), name="draft_version_positive")]

    def __str__(self) -> str:
        return f"{self.brief.public_id} draft v{self.version}"


class EditorPresence(models.Model):
    """Who has a brief's edit page open: `last_seen_at` is their page's latest heartbeat,
    `typing_at` the latest one sent while they typed. Only recent presence is shown
    (publishing.selectors.drafts.PRESENCE_SECONDS), so a closed tab leaves nothing behind."""

    brief = models.ForeignKey(Brief, on_delete=models.CASCADE, related_name="presences")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    last_seen_at = models.DateTimeField(default=timezone.now)
    typing_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["brief_id", "-last_seen_at"]
        constraints = [models.UniqueConstraint(fields=["brief", "user"], name="editor_presence_unique")]

    def __str__(self) -> str:
        return f"{self.user} on {self.brief.public_id}"


class WebhookEventType(models.TextChoices):
    REVISION_APPROVED = "revision.approved", "Revision approved"
    PUBLICATION_VERIFIED = "publication.verified", "Published and verified (per channel)"
    PUBLICATION_PROBLEM = "publication.problem", "Publication needs an operator"
    PUBLICATION_RESOLVED = "publication.resolved", "Publication problem resolved by an operator"
    PUBLICATION_RETRACTED = "publication.retracted", "Retracted and verified (per channel)"


class WebhookSubscriber(models.Model):
    """A URL that receives Galley's lifecycle events (docs/webhooks.md), each signed with its secret.

    `secret_sealed` is the signing secret sealed by publishing.credentials: write-only, never shown,
    logged or audited. `events` lists the WebhookEventType values it wants; empty means every type.
    """

    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500)
    secret_sealed = models.TextField(blank=True, editable=False)
    events = models.JSONField(default=list, blank=True, help_text="Event types it receives; empty: all.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(url__regex=r"^https?://"), name="webhook_subscriber_url_http"),
        ]

    def __str__(self) -> str:
        return self.name

    def wants(self, event_type: str) -> bool:
        return not self.events or event_type in self.events


class WebhookEvent(models.Model):
    """One lifecycle event, as every subscriber receives it: `id` is the event id (PRODUCT.md §3),
    the subscriber's Idempotency-Key, the same on every redelivery. Append-only: the database refuses
    UPDATE and DELETE (migration 0015), so a replay always sends the body first sent."""

    Type = WebhookEventType

    id = models.UUIDField(primary_key=True, editable=False)
    type = models.CharField(max_length=40, choices=WebhookEventType.choices)
    brief_public_id = models.CharField(max_length=32, blank=True)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(type__in=WebhookEventType.values), name="webhook_event_type_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class WebhookDelivery(Operation):
    """A webhook operation as the operator watches it in the admin ("Webhook deliveries"): one event
    to one subscriber, its attempts, and its dead letter if it came to one."""

    class Meta:
        proxy = True
        verbose_name = "webhook delivery"
        verbose_name_plural = "webhook deliveries"
