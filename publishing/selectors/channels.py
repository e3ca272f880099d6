"""Channels as editors choose them for a brief (docs/channels.md)."""

from __future__ import annotations

from publishing.models import Channel


def list_enabled_channels() -> list[Channel]:
    """The channels a brief may go to, the primary one first."""
    return list(Channel.objects.filter(enabled=True))


def list_default_channels() -> list[Channel]:
    """Where a new brief goes unless the editor chose: the enabled default channels, else the primary one."""
    defaults = [channel for channel in list_enabled_channels() if channel.is_default]
    return defaults or list(Channel.objects.filter(from_settings=True))
