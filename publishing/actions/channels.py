"""Channels: the destinations an approval publishes to (docs/channels.md)."""

from __future__ import annotations

from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Channel
from workers.actions.gates import set_channel_rate


def ensure_primary_channel(*, using: str = "default") -> Channel:
    """The channel the GALLEY_TARGET_* / GALLEY_WORDPRESS_* settings define, made if missing (idempotent),
    with its gate (do_sync_channel_gate)."""
    channel, _created = Channel.objects.using(using).get_or_create(
        slug=PRIMARY_CHANNEL,
        defaults={"name": "Website", "from_settings": True, "is_default": True, "enabled": True},
    )
    do_sync_channel_gate(channel)
    return channel


def do_sync_channel_gate(channel: Channel) -> None:
    """The channel's rate limit onto its gate, which every worker on every host reads before a send
    (docs/operations.md#rate-limits-and-pauses); call it whenever a channel is saved. Idempotent; a
    pause and the send slots already taken stay. Not audited on its own: it copies a setting whose
    change the channel's save records."""
    set_channel_rate(channel.slug, rate_per_second=channel.rate_per_second, using=channel._state.db or "default")
