"""Retracting a brief (docs/retractions.md): the request (one retract operation per channel that holds
the brief, with the brief's status change and its audit record, in one transaction) and the
observed retraction (in the retract operation's finalize). No action calls the target: a worker does."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import available_timezones

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from publishing.actions.revisions import do_change_brief_status
from publishing.actions.webhooks import do_emit_publication_retracted
from publishing.errors import InvalidInput
from publishing.identities import DRIFT_CHECK, PUBLISH, REPUBLISH, RETRACT, VERIFY, retract_key, revision_subject_id
from publishing.models import Brief, Publication
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.retractions import Holding, list_holdings
from publishing.validation import clean_text
from workers.actions.enqueue import Enqueued, enqueue_operation, supersede_waiting_operation
from workers.audit import record_audit_event
from workers.models import Operation

REASON_MAX_CHARS = 2000
# What a retraction makes obsolete while it has not been claimed: a publish, a verification, a republish
# or a drift check of a revision it takes down.
_TAKEN_DOWN_KINDS = (PUBLISH, VERIFY, REPUBLISH, DRIFT_CHECK)


def check_retract_brief(
    public_id: str,
    *,
    reason: str,
    confirm: bool,
    acting_user: AnyUser,
    retract_at: datetime | None = None,
    zone: str = "",
) -> list[Enqueued]:
    """Retract the brief on every channel that holds it, now or at `retract_at` (aware; due on the database
    clock), shown in the IANA `zone` it was given in (default TIME_ZONE; the web form's zone select, read by
    approvals.schedules.clean_schedule, as an approval's time is). Approvers only; `reason` is required and
    `confirm` must be True (the second step: the UI's confirm page, the API's `"confirm": true`). Returns
    the retract operations, one per channel.

    Idempotent: asked again while nothing newer is published, it returns the same operations and writes
    nothing. Raises PermissionRefused, NotFound, InvalidInput (no reason, not confirmed, a time without
    a zone, an unknown zone, nothing to take down)."""
    user = require_role(acting_user, Role.APPROVER, to="retract a brief")
    reason = clean_text(reason, field="The reason for the retraction", max_chars=REASON_MAX_CHARS, required=True)
    if confirm is not True:
        raise InvalidInput("Confirm the retraction: it takes the brief down on every channel listed.")
    if retract_at is not None and timezone.is_naive(retract_at):
        raise InvalidInput("The retraction time needs a time zone.")
    if zone and zone not in available_timezones():
        raise InvalidInput(f"{zone[:64]} is not a time zone Galley knows.")
    shown_in = (zone or str(settings.TIME_ZONE)) if retract_at is not None else ""
    with transaction.atomic(savepoint=False):
        brief = access_brief(public_id, acting_user=user, lock=True)
        holdings = list_holdings(brief)
        if not holdings:
            if brief.status == Brief.Status.RETRACTED:
                return []
            raise InvalidInput(f"{public_id} is published on no channel: there is nothing to retract.")
        return do_retract_brief(
            brief, holdings=holdings, reason=reason, acting_user=user, retract_at=retract_at, zone=shown_in
        )


@transaction.atomic(savepoint=False)
def do_retract_brief(
    brief: Brief,
    *,
    holdings: list[Holding],
    reason: str,
    acting_user: User,
    retract_at: datetime | None,
    zone: str = "",
) -> list[Enqueued]:
    """One `retract` operation per holding (key retract_key(brief, N, channel), bound to N's payload hash),
    the brief's status and fence (retracted_revision_number), the unclaimed publication work of the
    revisions it takes down superseded, and the audit record — one transaction (docs/invariants.md#i5).

    Caller holds the brief's row lock (taken before any operation row, docs/architecture.md#lock-order);
    operations are superseded in id order. A second request that creates nothing writes nothing."""
    enqueued = [
        enqueue_operation(
            key=retract_key(brief.public_id, holding.number, holding.channel),
            kind=RETRACT,
            channel=holding.channel,
            payload_hash=holding.publication.payload_hash,
            subject_type="brief",
            subject_id=brief.public_id,
            subject_version=holding.number,
            arguments={
                "revision": holding.number,
                "reason": reason,
                "publish_key": holding.publication.operation_key,
                # The zone T was given in, for display only: the claim reads T from scheduled_for.
                **({"zone": zone} if retract_at is not None else {}),
            },
            scheduled_for=retract_at,
        )
        for holding in holdings
    ]
    if not any(one.created for one in enqueued):
        return enqueued
    fence = max(holding.number for holding in holdings)
    obsolete = (
        Operation.objects.unfinished()
        .for_subject("brief", brief.public_id)
        .filter(kind__in=_TAKEN_DOWN_KINDS, subject_version__lte=fence)
        .order_by("id")
    )
    superseded = [
        operation.key
        for operation in obsolete
        if supersede_waiting_operation(operation, reason=f"{brief.public_id} is retracted up to revision {fence}")
    ]
    old = {
        "status": brief.status,
        "retracted_revision": brief.retracted_revision_number,
        "reason": brief.retraction_reason,
    }
    brief.retracted_revision_number = max(fence, brief.retracted_revision_number or 0)
    brief.retraction_reason = reason
    brief.save(update_fields=["retracted_revision_number", "retraction_reason"])
    if brief.status != Brief.Status.RETRACTED:
        do_change_brief_status(brief, Brief.Status.RETRACTED)
    record_audit_event(
        acting_user=acting_user,
        event_type="brief.retraction_requested",
        subject_type="brief",
        subject_id=brief.public_id,
        old_state=old,
        new_state={
            "status": brief.status,
            "retracted_revision": brief.retracted_revision_number,
            "reason": reason,
            "channels": {holding.channel: holding.number for holding in holdings},
            "retract_at": retract_at.isoformat() if retract_at is not None else None,
            "zone": zone or None,
            "superseded": superseded,
        },
    )
    return enqueued


@transaction.atomic(savepoint=False)
def do_record_retraction(publication: Publication, *, channel: str, reason: str, target_retracted_at: str) -> int:
    """The observed retraction on `channel` (read-back retracted, permalink gone), in the retract
    operation's finalize: every publication of the brief there at its revision or older is marked
    retracted (the target took them all down), the audit record and the "publication.retracted" webhook
    event commit with the operation's success. Idempotent: a publication already marked is left alone,
    and nothing is written when none is left. Returns how many it marked.

    Locks the brief first (docs/architecture.md#lock-order), before the fenced update locks the operation."""
    brief = Brief.objects.select_for_update(of=("self",)).only("id", "public_id").get(id=publication.brief_id)
    number = publication.revision.number
    now = timezone.now()
    marked = Publication.objects.filter(
        brief_id=brief.id, channel_id=publication.channel_id, revision__number__lte=number, retracted_at__isnull=True
    ).update(retracted_at=now)
    if not marked:
        return 0
    record_audit_event(
        acting_user=None,
        event_type="publication.retracted",
        subject_type="revision",
        subject_id=revision_subject_id(brief.public_id, number),
        old_state={"channel": channel, "retracted_at": None},
        new_state={
            "channel": channel,
            "retracted_at": now.isoformat(),
            "target_retracted_at": target_retracted_at,
            "reason": reason,
            "permalink": publication.permalink,
        },
    )
    do_emit_publication_retracted(
        publication, brief_public_id=brief.public_id, channel=channel, reason=reason, retracted_at=now
    )
    return marked
