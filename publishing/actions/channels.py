"""Channels: the destinations an approval publishes to (docs/channels.md)."""

from __future__ import annotations

from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Channel


def ensure_primary_channel(*, using: str = "default") -> Channel:
    """The channel the GALLEY_TARGET_* / GALLEY_WORDPRESS_* settings define, made if missing (idempotent)."""
    channel, _created = Channel.objects.using(using).get_or_create(
        slug=PRIMARY_CHANNEL,
        defaults={"name": "Website", "from_settings": True, "is_default": True, "enabled": True},
    )
    return channel
