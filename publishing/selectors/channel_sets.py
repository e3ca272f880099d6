"""Where an approval of a brief publishes unless the approver names the channels (docs/channels.md)."""

from __future__ import annotations

from publishing.models import Brief, Channel


def get_channel_set(brief: Brief) -> list[Channel]:
    """The brief's enabled channels, or, for a brief that names none, the enabled default channels (the
    primary channel when no enabled channel is marked default). The primary channel first, then by slug.
    Two queries at most."""
    chosen = list(brief.channels.filter(enabled=True))
    if chosen:
        return chosen
    defaults = list(Channel.objects.filter(enabled=True, is_default=True))
    return defaults or list(Channel.objects.filter(from_settings=True))
