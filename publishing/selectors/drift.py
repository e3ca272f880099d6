"""Drift: the published revisions due for a check, and the notice editors see on the brief page."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Exists, F, Max, OuterRef, Q, Subquery
from django.db.models.functions import Now

from publishing.identities import DRIFT_CHECK, PUBLICATION_KINDS, revision_number
from publishing.models import Brief, Publication
from workers.models import UNFINISHED_STATUSES, Conflict, Operation, OperationStatus


@dataclass(frozen=True)
class DueDriftCheck:
    """A published revision to check for drift on one channel, and what an operator accepted it showing."""

    public_id: str
    number: int
    channel: str
    payload_hash: str
    accepted_hash: str  # "" when no drift of it was accepted


def list_due_drift_checks(*, limit: int, interval: datetime.timedelta) -> list[DueDriftCheck]:
    """At most `limit` published revisions to check for drift, each the newest verified on its channel,
    those checked longest ago first (never checked first), none checked within `interval` (database
    clock). A brief with a publication operation under way or waiting for an operator on that channel is
    left out there: its own verification, republish or check speaks for it. Two queries whatever the
    limit."""
    busy = Operation.objects.filter(
        subject_type="brief",
        subject_id=OuterRef("brief__public_id"),
        channel=OuterRef("channel__slug"),
        kind__in=PUBLICATION_KINDS,
        status__in=(*UNFINISHED_STATUSES, OperationStatus.DEAD, OperationStatus.CONFLICT),
    )
    newer_on_channel = Publication.objects.filter(
        brief_id=OuterRef("brief_id"),
        channel_id=OuterRef("channel_id"),
        verified_at__isnull=False,
        revision__number__gt=OuterRef("revision__number"),
    )
    last_checked = (
        Operation.objects.filter(
            subject_type="brief",
            subject_id=OuterRef("brief__public_id"),
            channel=OuterRef("channel__slug"),
            kind=DRIFT_CHECK,
        )
        .order_by()
        .values("subject_id")
        .annotate(last=Max("created_at"))
        .values("last")
    )
    due = list(
        # A retracted publication shows nothing by design (docs/retractions.md): nothing to drift from.
        Publication.objects.filter(verified_at__isnull=False, retracted_at__isnull=True)
        .exclude(Exists(newer_on_channel))
        .exclude(Exists(busy))
        .annotate(last_checked=Subquery(last_checked))
        .filter(Q(last_checked__isnull=True) | Q(last_checked__lte=Now() - interval))
        .order_by(F("last_checked").asc(nulls_first=True), "id")
        .values_list("brief__public_id", "revision__number", "channel__slug", "payload_hash")[:limit]
    )
    accepted: dict[tuple[str, int | None, str], str] = {}
    drifts = (
        Conflict.objects.filter(
            kind=Conflict.Kind.DRIFT,
            operation__subject_type="brief",
            operation__subject_id__in={public_id for public_id, _number, _channel, _digest in due},
        )
        .order_by("id")
        .values_list(
            "operation__subject_id", "operation__subject_version", "operation__channel", "accepted_payload_hash"
        )
    )
    # The latest drift of each revision on each channel says what is accepted: a republish after an
    # acceptance ends it.
    for public_id, number, channel, digest in drifts:
        accepted[(public_id, number, channel)] = digest
    return [
        DueDriftCheck(public_id, number, channel, digest, accepted.get((public_id, number, channel), ""))
        for public_id, number, channel, digest in due
    ]


@dataclass(frozen=True)
class DriftNotice:
    """For editors, on the brief page: the site stopped showing the published revision (a drift), and
    whether an operator has ended it and how (`outcome`, the ending operation's reason)."""

    revision_number: int
    found_at: datetime.datetime
    open: bool
    outcome: str


def get_drift_notice(brief: Brief) -> DriftNotice | None:
    """The brief's latest drift, unless a newer revision than the drifted one is published (one query,
    none for a brief that has nothing at the target to drift: neither published nor approved)."""
    if brief.published_revision_number is None and brief.status != Brief.Status.APPROVED:
        return None
    conflict = (
        Conflict.objects.filter(
            kind=Conflict.Kind.DRIFT, operation__subject_type="brief", operation__subject_id=brief.public_id
        )
        .select_related("operation")
        .order_by("-id")
        .first()
    )
    if conflict is None:
        return None
    operation = conflict.operation
    number = revision_number(operation)
    if brief.published_revision_number is not None and brief.published_revision_number > number:
        return None
    is_open = conflict.resolved_at is None and operation.status in (OperationStatus.DEAD, OperationStatus.CONFLICT)
    return DriftNotice(
        revision_number=number,
        found_at=conflict.created_at,
        open=is_open,
        outcome="" if is_open else (operation.last_error_message or conflict.resolution),
    )
