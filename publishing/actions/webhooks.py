"""Lifecycle events for webhook subscribers (docs/webhooks.md): each event is written once, with one
delivery intent per subscriber that wants it, in the transaction of what it tells (docs/invariants.md#i5).
A worker delivers each intent (publishing.handlers.webhooks) with no transaction open, so a subscriber
that is slow or down delays nothing here: the publish path only inserts rows.

The subscriber's secret is sealed (publishing.credentials) and never leaves this module's writes in
the clear: the audit records of a subscriber's changes say only whether a secret is set, and when it changed."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from publishing.credentials import seal
from publishing.hashing import payload_hash
from publishing.identities import PUBLICATION_KINDS, RETRACT, WEBHOOK, webhook_key
from publishing.models import Channel, Publication, Revision, WebhookEvent, WebhookEventType, WebhookSubscriber
from workers.actions.enqueue import enqueue_operation
from workers.audit import record_audit_event
from workers.models import Operation
from workers.registry import OperatorNeeded


def event_body(event: WebhookEvent) -> dict[str, Any]:
    """What a subscriber receives, built from the stored event alone, so a redelivery sends the same body."""
    return {
        "id": str(event.id),
        "type": event.type,
        "created_at": event.created_at.isoformat(),
        "data": event.data,
    }


def _subscribers_wanting(event_type: str) -> list[WebhookSubscriber]:
    return [
        subscriber
        for subscriber in WebhookSubscriber.objects.filter(enabled=True).order_by("id")
        if subscriber.wants(event_type)
    ]


@transaction.atomic(savepoint=False)
def do_emit_event(
    event_type: str,
    *,
    brief_public_id: str,
    data: dict[str, Any],
    subscribers: list[WebhookSubscriber] | None = None,
) -> WebhookEvent | None:
    """Record one event and its delivery intents, in the caller's transaction: a rolled-back caller
    leaves neither. One `webhook` operation per enabled subscriber that wants the type (`subscribers`
    when the caller already listed them), keyed `webhook:<event id>:subscriber-<id>` and bound to the
    body's hash; `data` gains the brief's public id as `brief`. An event no subscriber wants is not
    recorded (None): the publish path then pays one read of the subscribers' small table, nothing more."""
    if subscribers is None:
        subscribers = _subscribers_wanting(event_type)
    if not subscribers:
        return None
    event = WebhookEvent.objects.create(
        id=uuid.uuid4(),
        type=WebhookEventType(event_type),
        brief_public_id=brief_public_id,
        data={"brief": brief_public_id, **data},
        created_at=timezone.now(),
    )
    digest = payload_hash(event_body(event))
    for subscriber in subscribers:
        enqueue_operation(
            key=webhook_key(str(event.id), subscriber.id),
            kind=WEBHOOK,
            payload_hash=digest,
            subject_type="webhook_event",
            subject_id=str(event.id),
            arguments={"event": str(event.id), "subscriber": subscriber.id},
        )
    return event


def do_emit_revision_approved(revision: Revision, *, acting_user: User) -> None:
    """In the approval's transaction (approvals.actions.do_decide_revision)."""
    do_emit_event(
        WebhookEventType.REVISION_APPROVED,
        brief_public_id=revision.brief.public_id,
        data={"revision": revision.number, "payload_hash": revision.payload_hash, "approver": acting_user.username},
    )


def do_emit_publication_verified(publication: Publication, *, brief_public_id: str) -> None:
    """In the verification's finalize (publications.do_record_verification): the channel's slug is
    read only when someone subscribes."""
    subscribers = _subscribers_wanting(WebhookEventType.PUBLICATION_VERIFIED)
    if not subscribers:
        return
    channel = Channel.objects.values_list("slug", flat=True).get(id=publication.channel_id)
    do_emit_event(
        WebhookEventType.PUBLICATION_VERIFIED,
        brief_public_id=brief_public_id,
        data={
            "channel": channel,
            "revision": publication.revision.number,
            "payload_hash": publication.payload_hash,
            "permalink": publication.permalink,
        },
        subscribers=subscribers,
    )


def do_emit_publication_retracted(
    publication: Publication, *, brief_public_id: str, channel: str, reason: str, retracted_at: datetime.datetime
) -> None:
    """In the retraction's finalize (retractions.do_record_retraction): taken down and observed on `channel`."""
    do_emit_event(
        WebhookEventType.PUBLICATION_RETRACTED,
        brief_public_id=brief_public_id,
        data={
            "channel": channel,
            "revision": publication.revision.number,
            "reason": reason,
            "retracted_at": retracted_at.isoformat(),
            "permalink": publication.permalink,
        },
    )


def do_emit_publication_problem(needed: OperatorNeeded) -> None:
    """Registered with the workers (publishing.apps): a brief's publication operation that comes to
    need an operator (a dead letter or a conflict) is an event, in the transaction that records it; a
    retraction's too (docs/retractions.md#race)."""
    if needed.kind not in (*PUBLICATION_KINDS, RETRACT) or needed.subject_type != "brief":
        return
    subscribers = _subscribers_wanting(WebhookEventType.PUBLICATION_PROBLEM)
    if not subscribers:
        return
    # The hook is told no channel; the operation's row is already written in this transaction.
    channel, key = Operation.objects.values_list("channel", "key").get(id=needed.operation_id)
    do_emit_event(
        WebhookEventType.PUBLICATION_PROBLEM,
        brief_public_id=needed.subject_id,
        data={
            "channel": channel,
            "revision": needed.subject_version,
            "kind": needed.kind,
            "operation_key": key,
            "status": needed.status,
            "message": needed.message,
        },
        subscribers=subscribers,
    )


def do_emit_publication_resolved(operation: Operation, *, resolution: str, message: str) -> None:
    """In an operator's resolution (publishing.actions.resolutions): which problem, how it was settled."""
    do_emit_event(
        WebhookEventType.PUBLICATION_RESOLVED,
        brief_public_id=operation.subject_id,
        data={
            "channel": operation.channel,
            "revision": operation.subject_version,
            "kind": operation.kind,
            "operation_key": operation.key,
            "resolution": resolution,
            "message": message,
        },
    )


def _audited_state(subscriber: WebhookSubscriber) -> dict[str, Any]:
    """A subscriber as its audit records show it: never the secret, only whether one is set."""
    return {
        "name": subscriber.name,
        "url": subscriber.url,
        "events": list(subscriber.events),
        "enabled": subscriber.enabled,
        "has_secret": bool(subscriber.secret_sealed),
    }


@transaction.atomic(savepoint=False)
def do_save_webhook_subscriber(
    subscriber: WebhookSubscriber, *, secret: str | None, acting_user: User
) -> WebhookSubscriber:
    """Create or change `subscriber` (its fields as the operator set them); `secret` None keeps the
    one it has. Audited with the old and new state, the secret only as whether one is set (and that it
    changed); a change
    that changes nothing writes nothing."""
    old = None
    if subscriber.pk is not None:
        old = _audited_state(WebhookSubscriber.objects.select_for_update(of=("self",)).get(pk=subscriber.pk))
    secret_changed = bool(secret)
    if secret:
        subscriber.secret_sealed = seal(secret)
    new = _audited_state(subscriber)
    if old == new and not secret_changed:
        return subscriber
    subscriber.updated_at = timezone.now()
    subscriber.save()
    if secret_changed:
        new["secret_changed"] = True
    record_audit_event(
        acting_user=acting_user,
        event_type="webhook_subscriber.created" if old is None else "webhook_subscriber.changed",
        subject_type="webhook_subscriber",
        subject_id=str(subscriber.pk),
        old_state=old,
        new_state=new,
    )
    return subscriber


@transaction.atomic(savepoint=False)
def do_delete_webhook_subscriber(subscriber: WebhookSubscriber, *, acting_user: User) -> None:
    """Delete it, audited; its deliveries not yet made end superseded when a worker finds it gone."""
    locked = WebhookSubscriber.objects.select_for_update(of=("self",)).get(pk=subscriber.pk)
    old = _audited_state(locked)
    subject_id = str(locked.pk)
    locked.delete()
    record_audit_event(
        acting_user=acting_user,
        event_type="webhook_subscriber.deleted",
        subject_type="webhook_subscriber",
        subject_id=subject_id,
        old_state=old,
        new_state=None,
    )
