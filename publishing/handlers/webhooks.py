"""The `webhook` handler: one event POSTed to one subscriber, signed, after the event committed
(publishing.actions.webhooks wrote the intent with it). A worker entry point, thin like a view.

The body is rebuilt from the stored, append-only event, so every attempt and every operator's replay
sends the same bytes with the same event id; only the timestamp and its signature are new. The call is
made with no transaction open; its failures map to kinds in handlers.failures, and workers.policy
retries them (5xx and timeouts with backoff, 429/503 after Retry-After, other 4xx a dead letter).
"""

from __future__ import annotations

from django.conf import settings

from publishing.actions.webhooks import event_body
from publishing.clients import webhooks
from publishing.credentials import SealedValueUnreadable, unseal
from publishing.handlers.failures import call_service
from publishing.hashing import canonical_json, payload_hash
from publishing.selectors.webhooks import get_webhook_delivery
from workers.actions.claims import renew_lease
from workers.errors import FailureKind, OperationFailed, Superseded
from workers.registry import ClaimedOperation, Success


def handle_webhook(claimed: ClaimedOperation) -> Success:
    delivery = get_webhook_delivery(
        event_id=str(claimed.arguments["event"]), subscriber_id=int(claimed.arguments["subscriber"])
    )
    subscriber = delivery.subscriber
    if subscriber is None:
        raise Superseded("the subscriber was deleted before this event reached it")
    if not subscriber.enabled:
        raise Superseded(f"{subscriber.name} was disabled before this event reached it")
    body = event_body(delivery.event)
    if payload_hash(body) != claimed.payload_hash:
        raise OperationFailed(
            FailureKind.INVALID, f"event {delivery.event.id} is not the one {claimed.key} was bound to"
        )
    try:
        secret = unseal(subscriber.secret_sealed) if subscriber.secret_sealed else ""
    except SealedValueUnreadable:
        secret = ""
    if not secret:
        raise OperationFailed(
            FailureKind.AUTH,
            f"{subscriber.name} has no readable secret (none set, or sealed under another SECRET_KEY): "
            "set it in the admin, then retry",
        )
    client = webhooks.shared_client(timeout=settings.GALLEY_WEBHOOK_TIMEOUT_SECONDS)
    # Fence check immediately before the side effect: a worker that lost its lease stops here.
    renew_lease(claimed)
    status = call_service(
        lambda: client.deliver(
            subscriber.url, event_id=str(delivery.event.id), body=canonical_json(body), secret=secret
        )
    )
    return Success(result={"status": status, "subscriber": subscriber.id})
