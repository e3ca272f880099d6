"""Where an approval of a brief publishes unless the approver names the channels (docs/channels.md)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef

from publishing.models import Brief, Channel


@dataclass(frozen=True)
class ChannelOptions:
    """The channels an approver may choose (every enabled one, the primary first, then by slug) and the
    ones an approval of the brief goes to unless the approver names others (`chosen`)."""

    enabled: list[Channel]
    chosen: list[Channel]


def get_channel_options(brief: Brief) -> ChannelOptions:
    """One query. The chosen set is the brief's enabled channels, or, for a brief that names none, the
    enabled default channels, or the primary channel when no enabled channel is marked default."""
    on_brief = Brief.channels.through.objects.filter(brief_id=brief.pk, channel_id=OuterRef("pk"))
    enabled: list[Channel] = list(Channel.objects.filter(enabled=True).annotate(on_brief=Exists(on_brief)))
    chosen = [channel for channel in enabled if getattr(channel, "on_brief")]  # noqa: B009 -- an annotation
    chosen = chosen or [channel for channel in enabled if channel.is_default]
    chosen = chosen or [channel for channel in enabled if channel.from_settings]
    return ChannelOptions(enabled=enabled, chosen=chosen)


def get_channel_set(brief: Brief) -> list[Channel]:
    """Where an approval of `brief` publishes unless the approver names channels (get_channel_options)."""
    return get_channel_options(brief).chosen
