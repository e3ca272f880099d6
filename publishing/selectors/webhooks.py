"""Reads of webhook events and subscribers."""

from __future__ import annotations

from dataclasses import dataclass

from publishing.models import WebhookEvent, WebhookSubscriber


@dataclass(frozen=True)
class WebhookDeliveryTarget:
    event: WebhookEvent
    subscriber: WebhookSubscriber | None  # None once the subscriber was deleted


def get_webhook_delivery(*, event_id: str, subscriber_id: int) -> WebhookDeliveryTarget:
    """The event a webhook operation delivers and the subscriber it goes to. The event is append-only,
    so it is there for as long as its operation is."""
    return WebhookDeliveryTarget(
        event=WebhookEvent.objects.get(id=event_id),
        subscriber=WebhookSubscriber.objects.filter(id=subscriber_id).first(),
    )
