"""The channels a brief may go to, and where an approval of it publishes unless the approver names the
channels (docs/channels.md)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef

from publishing.models import Brief, Channel


def default_channels(enabled: list[Channel]) -> list[Channel]:
    """Among `enabled` (loaded), the default ones, else the primary channel: where a brief goes unless
    someone chose."""
    return [channel for channel in enabled if channel.is_default] or [c for c in enabled if c.from_settings]


def list_enabled_channels() -> list[Channel]:
    """The channels a brief may go to, the primary one first, then by slug."""
    return list(Channel.objects.filter(enabled=True))


def list_default_channels() -> list[Channel]:
    """Where a new brief goes unless the editor chose (default_channels)."""
    return default_channels(list_enabled_channels())


@dataclass(frozen=True)
class ChannelOptions:
    """The channels an approver may choose (every enabled one, the primary first, then by slug) and the
    ones an approval of the brief goes to unless the approver names others (`chosen`)."""

    enabled: list[Channel]
    chosen: list[Channel]


def get_channel_options(brief: Brief) -> ChannelOptions:
    """One query. The chosen set is the brief's enabled channels, or, for a brief that names none (or
    none still enabled), the default ones (default_channels)."""
    on_brief = Brief.channels.through.objects.filter(brief_id=brief.pk, channel_id=OuterRef("pk"))
    enabled: list[Channel] = list(Channel.objects.filter(enabled=True).annotate(on_brief=Exists(on_brief)))
    chosen = [channel for channel in enabled if getattr(channel, "on_brief")]  # noqa: B009 -- an annotation
    return ChannelOptions(enabled=enabled, chosen=chosen or default_channels(enabled))


def get_channel_set(brief: Brief) -> list[Channel]:
    """Where an approval of `brief` publishes unless the approver names channels (get_channel_options)."""
    return get_channel_options(brief).chosen
