"""Channels: the destinations an approval publishes to (docs/channels.md)."""

from __future__ import annotations

from publishing.errors import InvalidInput
from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Brief, Channel
from publishing.selectors.channel_sets import get_channel_set
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


def check_channel_set(brief: Brief, requested: object) -> list[Channel]:
    """The channels an approval of `brief` freezes: `requested` (a list of slugs) when given, else the
    brief's set (get_channel_set). Raises InvalidInput naming what is wrong: not a list of slugs, an
    unknown or disabled channel, or none at all."""
    if requested is None:
        return get_channel_set(brief)
    if not isinstance(requested, list | tuple) or not all(isinstance(slug, str) for slug in requested):
        raise InvalidInput('Channels must be a list of channel slugs, e.g. ["web", "partner-feed"].')
    slugs = list(dict.fromkeys(requested))
    if not slugs:
        raise InvalidInput("Choose at least one channel to publish to.")
    found = {channel.slug: channel for channel in Channel.objects.filter(slug__in=slugs)}
    unknown = [slug for slug in slugs if slug not in found]
    if unknown:
        raise InvalidInput(f"No channel is called {', '.join(map(repr, unknown))}; choose among the configured ones.")
    disabled = [slug for slug in slugs if not found[slug].enabled]
    if disabled:
        names = ", ".join(map(repr, disabled))
        raise InvalidInput(f"Channel {names} is disabled; an operator enables it in the admin.")
    return [found[slug] for slug in sorted(slugs, key=lambda slug: (slug != PRIMARY_CHANNEL, slug))]


def do_sync_channel_gate(channel: Channel) -> None:
    """The channel's rate limit onto its gate, which every worker on every host reads before a send
    (docs/operations.md#rate-limits-and-pauses); call it whenever a channel is saved. Idempotent; a
    pause and the send slots already taken stay. Not audited on its own: it copies a setting whose
    change the channel's save records."""
    set_channel_rate(channel.slug, rate_per_second=channel.rate_per_second, using=channel._state.db or "default")
