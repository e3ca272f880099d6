"""The client of one channel (publishing.models.Channel)."""

from __future__ import annotations

from django.conf import settings

from publishing.clients import target
from publishing.credentials import unseal
from publishing.models import Channel


def client_for(slug: str) -> target.TargetClient:
    """The channel's client: the settings' target for the primary channel, else one built from its row."""
    channel = Channel.objects.get(slug=slug)
    if channel.from_settings:
        return target.shared_from_settings()
    timeout = float(settings.GALLEY_TARGET_TIMEOUT_SECONDS)
    return target.TargetClient(base_url=channel.base_url, token=unseal(channel.secret_sealed), timeout=timeout)
