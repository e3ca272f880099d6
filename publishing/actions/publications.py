"""Publishing a revision: the intent (in the approval's transaction), the publication with its
verification (in the publish operation's finalize: observed in the publish's own attempt, or else the
intent of a verify operation), and a verify operation's observed verification (in its finalize)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from psycopg.rows import dict_row

from publishing.actions.resolutions import OPEN, do_close_replaced_problems
from publishing.actions.revisions import check_brief_transition
from publishing.actions.webhooks import do_emit_publication_verified
from publishing.announcements import announce_published
from publishing.identities import (
    PUBLICATION_KINDS,
    PUBLISH,
    VERIFY,
    publish_key,
    revision_number,
    revision_subject_id,
    verify_key,
)
from publishing.models import Brief, Channel, Publication, Revision
from publishing.sql import (
    LOCK_BRIEF_SQL,
    RECORD_PUBLICATION_SQL,
    RECORD_VERIFICATION_SQL,
    from_row,
)
from workers.actions.enqueue import Enqueued, add_dependency, enqueue_operation, supersede_waiting_operation
from workers.audit import record_audit_event
from workers.models import Dependency, Operation, OperationStatus
from workers.prepared import execute_prepared, the_row


@transaction.atomic(savepoint=False)
def do_request_publication(revision: Revision, *, channel: str, scheduled_for: datetime | None = None) -> Enqueued:
    """Record the intent to publish `revision` on `channel`, in the transaction of the approval (or
    the "also publish to") that holds the channel (docs/invariants.md#i5, #i14).

    Idempotent: a second approval of the same revision returns the same operation. Per brief and
    channel, publishes never regress (docs/invariants.md#i4): an older publish to the channel that has
    not been claimed yet is superseded; one that may already be in flight becomes a prerequisite
    (completion edge), so this one is claimed only after it finished either way. Another channel's
    publishes are never touched: one channel's state never holds up another's.

    `scheduled_for` (aware) embargoes it until that time T on the database clock (docs/invariants.md#i15).
    An older publish waiting for its own T is superseded like any unclaimed one: the newest approval wins.

    Caller holds the brief's row lock, taken before any operation row (docs/architecture.md#lock-order);
    older operations are touched in id order.
    """
    public_id = revision.brief.public_id
    enqueued = enqueue_operation(
        key=publish_key(public_id, revision.number, channel),
        kind=PUBLISH,
        channel=channel,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        subject_version=revision.number,
        arguments={"revision": revision.number},
        scheduled_for=scheduled_for,
    )
    if not enqueued.created:
        return enqueued
    older = (
        Operation.objects.unfinished()
        .for_subject("brief", public_id)
        .filter(kind=PUBLISH, channel=channel, subject_version__lt=revision.number)
        .order_by("id")
    )
    for operation in older:
        reason = f"revision {revision.number} was approved before revision {operation.subject_version} was sent"
        if not supersede_waiting_operation(operation, reason=reason):
            add_dependency(enqueued.operation, prerequisite=operation, requires=Dependency.Requires.COMPLETION)
    return enqueued


def insert_publication(
    revision: Revision, *, channel: str, external_id: str, permalink: str, now: datetime
) -> dict[str, Any] | None:
    """Insert the Publication of `revision` on `channel` under its publish key, the brief locked first
    (RECORD_PUBLICATION_SQL); its new row's id and channel_id, or None when it is recorded already.
    In the caller's transaction."""
    params = {
        "brief_id": revision.brief_id,
        "revision_id": revision.id,
        "key": publish_key(revision.brief.public_id, revision.number, channel),
        "payload_hash": revision.payload_hash,
        "external_id": external_id,
        "permalink": permalink,
        "now": now,
        "channel": channel,
    }
    with execute_prepared(RECORD_PUBLICATION_SQL, params, row_factory=dict_row) as cursor:
        return cursor.fetchone()


@transaction.atomic(savepoint=False)
def do_record_publication(
    revision: Revision,
    *,
    channel: str,
    publish_operation_id: int,
    external_id: str,
    permalink: str,
    observed: bool = False,
) -> Publication:
    """The publication on `channel` and its verification, in the publish operation's finalize
    transaction (docs/invariants.md#i5): `observed` when the publish's attempt has read it back and seen
    its page (docs/invariants.md#i10), then the verification itself and no verify operation; otherwise
    the verify operation's intent. Idempotent: the publication is keyed by the operation key.

    Locks the brief first (docs/architecture.md#lock-order), before the fenced update locks the operation.
    """
    public_id = revision.brief.public_id
    key = publish_key(public_id, revision.number, channel)
    now = timezone.now()
    inserted = insert_publication(revision, channel=channel, external_id=external_id, permalink=permalink, now=now)
    if inserted is None:
        publication = Publication.objects.get(operation_key=key)
    else:
        # What was just inserted: no second round trip to read it back.
        publication = Publication(
            id=inserted["id"],
            brief_id=revision.brief_id,
            revision=revision,
            channel_id=inserted["channel_id"],
            operation_key=key,
            payload_hash=revision.payload_hash,
            external_id=external_id,
            permalink=permalink,
            created_at=now,
        )
        publication._state.adding = False
    publication.revision = revision
    if inserted is not None:
        record_audit_event(
            acting_user=None,
            event_type="publication.recorded",
            subject_type="revision",
            subject_id=revision_subject_id(public_id, revision.number),
            old_state=None,
            new_state={"external_id": external_id, "permalink": permalink, "payload_hash": revision.payload_hash},
        )
    if observed:
        do_record_verification(publication)
        return publication
    enqueue_operation(
        key=verify_key(public_id, revision.number, channel),
        kind=VERIFY,
        channel=channel,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        subject_version=revision.number,
        arguments={"revision": revision.number, "publish_key": key},
        after=[(publish_operation_id, Dependency.Requires.SUCCESS)],
    )
    return publication


def _record_replaced_applications(operation_ids: list[int], *, brief_id: int, published_number: int) -> None:
    """Every application at the target ends with a Publication and an audit record, even a replaced one.

    An older revision's publish that ended without a Publication (dead or in conflict, about to be
    cancelled for revision `published_number`, or cancelled by an operator) although its attempt
    recorded the target's receipt before its finalize (the operation's `result`:
    workers.actions.claims) was applied there. It gets its Publication now, never verified (the
    target shows the newer revision), and an audit record saying which revision superseded it. The
    brief's published revision is not touched: it only ever advances (docs/invariants.md#i4), and only a
    verification advances it.

    In the verification's finalize, the brief locked (docs/architecture.md#lock-order)."""
    if not operation_ids:  # the usual case, on every verification: not even a query to compile
        return
    for operation in Operation.objects.filter(id__in=operation_ids).order_by("id"):
        revision = Revision.objects.get(brief_id=brief_id, number=revision_number(operation))
        receipt = operation.result
        _publication, created = Publication.objects.get_or_create(
            operation_key=operation.key,
            defaults={
                "brief_id": brief_id,
                "revision": revision,
                "channel": Channel.objects.get(slug=operation.channel),
                "payload_hash": revision.payload_hash,
                "external_id": str(receipt["external_id"]),
                "permalink": str(receipt.get("permalink", "")),
            },
        )
        if created:
            record_audit_event(
                acting_user=None,
                event_type="publication.recorded",
                subject_type="revision",
                subject_id=revision_subject_id(operation.subject_id, revision.number),
                old_state=None,
                new_state={
                    "external_id": receipt["external_id"],
                    "permalink": receipt.get("permalink", ""),
                    "payload_hash": revision.payload_hash,
                    "superseded_by_revision": published_number,
                },
            )


@transaction.atomic(savepoint=False)
def do_record_verification(publication: Publication) -> None:
    """Record the observation on the publication's channel (docs/invariants.md#i10) and advance the brief's
    published revision, the highest verified on any channel, never backwards (docs/invariants.md#i4); the
    brief shows "published" when this is its latest revision (each channel's receipt says where it is).

    In the finalize of the operation that observed it (a verify, or the publish whose own attempt read it
    back: do_record_publication): locks the brief first, then the publication, then any operation rows;
    the fenced update locks that operation last (docs/architecture.md#lock-order).
    """
    number = publication.revision.number
    channel = Channel.objects.only("slug").get(id=publication.channel_id).slug
    with execute_prepared(LOCK_BRIEF_SQL, {"brief_id": publication.brief_id}, row_factory=dict_row) as cursor:
        locked = from_row(Brief, the_row(cursor))
    public_id, status, published_before = locked.public_id, locked.status, locked.published_revision_number
    params = {
        "brief_id": publication.brief_id,
        "publication_id": publication.id,
        "public_id": public_id,
        "number": number,
        "channel": channel,
        "channel_id": publication.channel_id,
        "now": timezone.now(),
        "published": Brief.Status.PUBLISHED,
        "kinds": list(PUBLICATION_KINDS),
        "open": list(OPEN),
        "publish": PUBLISH,
        "ended": [*OPEN, OperationStatus.CANCELLED],
    }
    with execute_prepared(RECORD_VERIFICATION_SQL, params, row_factory=dict_row) as cursor:
        outcome = the_row(cursor)
    new_status, latest = outcome["new_status"], outcome["latest"]
    if not outcome["first_observation"] or outcome["newer_on_channel"]:
        return  # observed before, or a newer revision is verified on this channel already: nothing advances
    if new_status is not None and latest == number and status != Brief.Status.PUBLISHED:
        check_brief_transition(public_id, status, Brief.Status.PUBLISHED)  # raises: the finalize rolls back
    _record_replaced_applications(outcome["unrecorded"], brief_id=publication.brief_id, published_number=number)
    do_close_replaced_problems(outcome["replaced"], published_number=number)
    record_audit_event(
        acting_user=None,
        event_type="publication.verified",
        subject_type="brief",
        subject_id=public_id,
        old_state={"published_revision": published_before, "status": status},
        new_state={
            "published_revision": max(number, published_before or 0),
            "status": new_status or status,
            "channel": channel,
            "revision": number,
            "permalink": publication.permalink,
        },
    )
    do_emit_publication_verified(publication, brief_public_id=public_id)
    if new_status is None:  # the brief was already published at this revision (another channel) or newer
        return
    # The brief as it is now, from the locked row; the columns not read load if ever read.
    locked.status, locked.published_revision_number = new_status, number
    announce_published(locked, revision_number=number, permalink=publication.permalink)
