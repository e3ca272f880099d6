"""The durable machinery's records.

The audit log lives here, at the bottom of the dependency graph, because every app writes to
it (editorial actions, approvals, and the operator actions on operations) and `workers` must
import no domain app.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    """Append-only: the database refuses UPDATE and DELETE (trigger in migration 0002)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="audit_events",
        help_text="Who did it; empty for the system itself (workers, pipeline).",
    )
    event_type = models.CharField(max_length=64)
    subject_type = models.CharField(max_length=64)
    subject_id = models.CharField(max_length=200)
    old_state = models.JSONField(null=True, blank=True)
    new_state = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["subject_type", "subject_id"], name="audit_subject_idx")]

    def __str__(self) -> str:
        return f"{self.event_type} {self.subject_type}:{self.subject_id}"


class OperationStatus(models.TextChoices):
    """The operation's state machine; its allowed moves are OPERATION_TRANSITIONS below.

    pending ──claim──► running ──► succeeded | retry_wait | dead | conflict | superseded | cancelled
    retry_wait ──claim──► running;  running ──lease expired (reconciler)──► retry_wait
    pending | retry_wait ──operator / superseding newer intent──► cancelled | superseded
    dead | conflict ──operator "retry now"──► retry_wait
    """

    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    RETRY_WAIT = "retry_wait", "Waiting to retry"
    # Not every dead letter needs an operator (a quality gate's is the editor's next step): whether
    # one does is NEEDS_OPERATOR below, not the status's label.
    DEAD = "dead", "Dead"
    CONFLICT = "conflict", "Conflict"
    SUPERSEDED = "superseded", "Superseded"
    CANCELLED = "cancelled", "Cancelled"


_S = OperationStatus
# Every status change an operation may make, by anyone: the claim and the reconciler (in SQL),
# a worker's fenced transitions, superseding and the operator actions. The database enforces
# exactly this table (trigger `operation_status_transition`, migration 0005); a status staying
# the same (a lease taken over: running → running) is not a move.
OPERATION_TRANSITIONS: dict[str, frozenset[str]] = {
    _S.PENDING: frozenset({_S.RUNNING, _S.SUPERSEDED, _S.CANCELLED, _S.DEAD}),
    _S.RETRY_WAIT: frozenset({_S.RUNNING, _S.SUPERSEDED, _S.CANCELLED, _S.DEAD}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.RETRY_WAIT, _S.DEAD, _S.CONFLICT, _S.SUPERSEDED}),
    _S.DEAD: frozenset({_S.RETRY_WAIT, _S.CANCELLED}),
    _S.CONFLICT: frozenset({_S.RETRY_WAIT, _S.CANCELLED}),
    _S.SUCCEEDED: frozenset(),
    _S.SUPERSEDED: frozenset(),
    _S.CANCELLED: frozenset(),
}

UNFINISHED_STATUSES = (OperationStatus.PENDING, OperationStatus.RUNNING, OperationStatus.RETRY_WAIT)
# Unfinished and not running: due at `next_attempt_at` (the claim's partial index, operation_due_idx).
WAITING_STATUSES = (OperationStatus.PENDING, OperationStatus.RETRY_WAIT)
FINISHED_STATUSES = (
    OperationStatus.SUCCEEDED,
    OperationStatus.DEAD,
    OperationStatus.CONFLICT,
    OperationStatus.SUPERSEDED,
    OperationStatus.CANCELLED,
)


# What "needs an operator" means, in one place, for the ops page's tile and lists, the admin and
# /metrics: an operation that ended dead or in conflict with the retry policy's verdict that only an
# operator can settle it (workers.policy: auth failures, conflicts, attempts or deadline spent). A
# dead letter the policy left to the editors (a quality gate's, invalid input) is not one; an
# operator's retry or cancel clears the flag.
OPERATOR_STATUSES = (OperationStatus.DEAD, OperationStatus.CONFLICT)
NEEDS_OPERATOR = models.Q(needs_operator=True, status__in=OPERATOR_STATUSES)


class OperationQuerySet(models.QuerySet):
    def needing_operator(self) -> OperationQuerySet:
        return self.filter(NEEDS_OPERATOR)

    def unfinished(self) -> OperationQuerySet:
        return self.filter(status__in=UNFINISHED_STATUSES)

    def finished(self) -> OperationQuerySet:
        return self.filter(status__in=FINISHED_STATUSES)

    def for_subject(self, subject_type: str, subject_id: str) -> OperationQuerySet:
        return self.filter(subject_type=subject_type, subject_id=subject_id)


class Operation(models.Model):
    """One retryable side effect, identified by its key and bound to one payload hash.

    The row is the durable intent (the outbox): it is written in the same transaction as the
    state change that wants it. Workers claim it with a lease; every claim increments the
    fencing token, and every later write names operation id, lease owner and token.

    Database guards: one row per key (unique); a known status; a running operation has a lease
    owner and expiry; a finished one has a finish time; attempts, waits not counted, never exceed
    the maximum; the
    status moves only along OPERATION_TRANSITIONS (trigger, migration 0005).
    """

    Status = OperationStatus

    key = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=64)
    payload_hash = models.CharField(max_length=64)
    subject_type = models.CharField(max_length=64)
    subject_id = models.CharField(max_length=200)
    subject_version = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The version of the subject the operation acts on (a brief's revision number for a publish, "
        "verify, republish or drift check); empty when the subject has none.",
    )
    channel = models.CharField(
        max_length=50,
        blank=True,
        default="",
        help_text="The destination the operation acts on (a publishing channel's slug), whose rate limit and "
        "pauses it shares with every operation on it; empty when it has none.",
    )
    arguments = models.JSONField(default=dict, blank=True, help_text="Ids only; handlers load the rest.")
    status = models.CharField(max_length=16, choices=OperationStatus.choices, default=OperationStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="Every try, including waits.")
    waits = models.PositiveIntegerField(
        default=0,
        help_text="Tries the target answered with 'wait' (throttled, in progress): they never count against "
        "max_attempts; the deadline bounds them.",
    )
    max_attempts = models.PositiveIntegerField(help_text="Tries that may fail (waits not counted).")
    next_attempt_at = models.DateTimeField(default=timezone.now)
    scheduled_for = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The time T the intent is scheduled for (an embargo): no claim before it, by the database "
        "clock; it stays as written while retries move next_attempt_at. Empty: due when written.",
    )
    deadline = models.DateTimeField(help_text="No attempt starts after this; then the operation is dead.")
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.BigIntegerField(default=0)
    last_error_kind = models.CharField(max_length=64, blank=True)
    last_error_message = models.TextField(blank=True)
    needs_operator = models.BooleanField(default=False)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = OperationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("operate_operation", "Can retry, reconcile, cancel operations and resolve conflicts")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=OperationStatus.values), name="operation_status_valid"
            ),
            models.CheckConstraint(
                condition=~models.Q(status=OperationStatus.RUNNING)
                | (~models.Q(lease_owner="") & models.Q(lease_expires_at__isnull=False)),
                name="operation_running_has_lease",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=UNFINISHED_STATUSES) | models.Q(finished_at__isnull=False),
                name="operation_finished_has_time",
            ),
            models.CheckConstraint(
                condition=models.Q(attempts__lte=models.F("max_attempts") + models.F("waits")),
                name="operation_attempts_bounded",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at", "id"],
                name="operation_due_idx",
                condition=models.Q(status__in=WAITING_STATUSES),
            ),
            models.Index(
                fields=["lease_expires_at"],
                name="operation_lease_idx",
                condition=models.Q(status=OperationStatus.RUNNING),
            ),
            # A subject's operations, and among them one kind's older or newer versions (a brief's
            # earlier publishes): the two leading columns serve the subject alone.
            models.Index(
                fields=["subject_type", "subject_id", "kind", "subject_version"], name="operation_subject_version_idx"
            ),
            models.Index(fields=["status", "finished_at"], name="operation_status_finished_idx"),
            # Schedules still to fire or under way: the overdue gauge and the ops page read only these.
            models.Index(
                fields=["scheduled_for"],
                name="operation_scheduled_idx",
                condition=models.Q(scheduled_for__isnull=False, status__in=UNFINISHED_STATUSES),
            ),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def needs_an_operator(self) -> bool:
        """NEEDS_OPERATOR for a loaded row (tests/workers hold the two equal)."""
        return self.needs_operator and self.status in OPERATOR_STATUSES


class Dependency(models.Model):
    """A durable happens-before edge: `operation` cannot be claimed until `prerequisite` has
    succeeded (requires=success) or finished in any way (requires=completion, used for ordering)."""

    class Requires(models.TextChoices):
        SUCCESS = "success", "Prerequisite succeeded"
        COMPLETION = "completion", "Prerequisite finished"

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="prerequisite_edges")
    prerequisite = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="dependent_edges")
    requires = models.CharField(max_length=16, choices=Requires.choices, default=Requires.SUCCESS)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["operation", "prerequisite"], name="dependency_unique"),
            models.CheckConstraint(condition=~models.Q(operation=models.F("prerequisite")), name="dependency_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.operation_id} after {self.prerequisite_id} ({self.requires})"


class Attempt(models.Model):
    """One try of an operation, for diagnosis only (never business identity).

    An attempt without `finished_at` never recorded an outcome: the worker died or lost its
    lease mid-try, so the next attempt treats the side effect as ambiguous.
    """

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded", "Succeeded"
        RETRY = "retry", "Will retry"
        DEAD = "dead", "Dead"
        CONFLICT = "conflict", "Conflict"
        SUPERSEDED = "superseded", "Superseded"
        LEASE_LOST = "lease_lost", "Lease lost (wrote nothing)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="attempt_set")
    number = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=200)
    fencing_token = models.BigIntegerField()
    ambiguous = models.BooleanField(
        default=False, help_text="The previous attempt may have had its effect: look the key up first."
    )
    due_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the operation became claimable for this try (due, or its lease expired); "
        "started_at minus this is the time it queued. Empty for attempts older than the field.",
    )
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True)
    error_kind = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True, help_text="e.g. AI tokens spent by this attempt.")

    class Meta:
        ordering = ["operation_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["operation", "number"], name="attempt_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.operation_id} attempt {self.number}"


class Conflict(models.Model):
    """Galley's intent and the target disagree in a way no retry can settle: never a success,
    always an operator's call (docs/operations.md#settling-problems). `target_state` is what the worker saw the target
    hold when it stopped, so the operator compares without a network call from the admin."""

    class Source(models.TextChoices):
        ENQUEUE = "enqueue", "Enqueued again with another payload"
        TARGET = "target", "Found at the target"

    class Kind(models.TextChoices):
        KEY_CONFLICT = "key_conflict", "Key conflict: the target holds this key with another payload"
        STALE_REVISION = "stale_revision", "Stale revision: the target holds a revision Galley did not publish"
        VERIFICATION_MISMATCH = "verification_mismatch", "Verification mismatch: the read-back shows other content"
        DRIFT = "drift", "Drift: the site no longer shows the approved revision"

    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, related_name="conflicts")
    source = models.CharField(max_length=16, choices=Source.choices)
    kind = models.CharField(max_length=32, choices=Kind.choices, default=Kind.KEY_CONFLICT)
    existing_payload_hash = models.CharField(max_length=64, help_text="The payload hash Galley intended.")
    conflicting_payload_hash = models.CharField(max_length=64, blank=True)
    target_state = models.JSONField(
        null=True, blank=True, help_text="What the target held (id, revision, payload hash, permalink), if known."
    )
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resolution = models.TextField(blank=True)
    accepted_payload_hash = models.CharField(
        max_length=64,
        blank=True,
        help_text="A drift an operator accepted (or adopted): the hash of what the target shows, which later "
        "checks of the same revision take as expected.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"conflict on {self.operation.key}"


class ChannelGate(models.Model):
    """A channel's send gate, shared by every worker on every host (docs/operations.md#rate-limits-and-pauses).

    `next_send_at` is the earliest time the next send may start (GCRA with no burst): each send
    reserves the slot `greatest(next_send_at, now)` and moves it on by 1/rate, in one statement on the
    database clock (workers.sql.RESERVE_SEND_SQL). `next_return_at` spaces the operations that the
    limit turned away, one slot apart, so that a backlog comes back one per slot rather than all at
    once. A channel's 429 or 503 with Retry-After sets `paused_until`: no worker claims the channel's
    operations before then (workers.sql.CLAIM_SQL). No row, or no rate, means no limit. The channel's
    settings (publishing.Channel.rate_per_second) are copied here by the publishing app: workers
    knows channels by slug only.
    """

    channel = models.CharField(max_length=50, primary_key=True, help_text="The channel's slug (Operation.channel).")
    rate_per_second = models.PositiveIntegerField(
        null=True, blank=True, help_text="Sends per second across every worker on every host; empty: no limit."
    )
    next_send_at = models.DateTimeField(default=timezone.now, help_text="The earliest time the next send may start.")
    next_return_at = models.DateTimeField(
        default=timezone.now, help_text="When the next operation turned away by the limit is told to come back."
    )
    paused_until = models.DateTimeField(null=True, blank=True, help_text="The channel's last Retry-After, if later.")
    pause_reason = models.TextField(blank=True)
    # Counters for /metrics, kept by the statements that make each event (so every host's are summed).
    waits = models.PositiveBigIntegerField(default=0, help_text="Sends held back by the rate limit or a pause.")
    pauses = models.PositiveBigIntegerField(default=0, help_text="Answers with Retry-After that paused the channel.")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(rate_per_second__isnull=True) | models.Q(rate_per_second__gte=1),
                name="channel_gate_rate_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.channel
