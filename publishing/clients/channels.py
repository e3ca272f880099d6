"""The client of one channel (docs/channels.md): what a worker sends a channel's operations through.

The primary channel (`from_settings`) is exactly the client the GALLEY_TARGET_* / GALLEY_WORDPRESS_*
settings give (target.shared_from_settings), so a single-target newsroom changes nothing. Every other
channel's client is built from its row and kept per process: building one costs 40-55 ms (the CA
bundle), more than a publish. Each call reads the row once (one primary-key-sized query by the unique
slug) and rebuilds the client when the row's updated_at has changed, so an operator's change in the
admin reaches every worker at its next operation without a restart.
"""

from __future__ import annotations

import threading
from datetime import datetime

from django.conf import settings

from publishing.clients import target
from publishing.clients.target import (
    DEFAULT_TIMEOUT_SECONDS,
    TargetAuthError,
    TargetClient,
    TargetRejected,
    WordPressClient,
)
from publishing.credentials import SealedValueUnreadable, unseal
from publishing.models import Channel, ChannelKind

# Named in a refusal of the credentials (401/403): where an operator fixes them.
_ADMIN_CREDENTIALS = "the channel's credentials (admin: Publishing > Channels)"


class ChannelTargetClient(TargetClient):
    credentials = _ADMIN_CREDENTIALS


class ChannelWordPressClient(WordPressClient):
    credentials = _ADMIN_CREDENTIALS


class ChannelUnavailable(TargetRejected):
    """No channel has this slug, or it is disabled: nothing was sent. Terminal for the operation (an
    operator enables the channel, then retries it)."""


class ChannelCredentialsUnreadable(TargetAuthError):
    """The channel's sealed credentials cannot be opened with the current SECRET_KEY: nothing was sent."""


_lock = threading.Lock()
_built: dict[str, tuple[datetime, TargetClient]] = {}


def client_for(slug: str) -> TargetClient:
    """The client for channel `slug`; one query per call. Raises ChannelUnavailable for a missing or
    disabled channel and ChannelCredentialsUnreadable when SECRET_KEY changed since its credentials
    were entered. Thread-safe; the clients it returns are shared by the process's threads."""
    channel = Channel.objects.filter(slug=slug).first()
    if channel is None:
        raise ChannelUnavailable(f"There is no channel {slug!r}; nothing was sent")
    if not channel.enabled:
        raise ChannelUnavailable(f"Channel {slug!r} is disabled; nothing was sent (enable it in the admin)")
    if channel.from_settings:
        # Looked up on the module at each call: the settings' client is the process's one, read now.
        return target.shared_from_settings()
    with _lock:
        built = _built.get(slug)
        if built is not None and built[0] == channel.updated_at:
            return built[1]
        client = _build(channel)
        if built is not None:
            built[1].close()
        _built[slug] = (channel.updated_at, client)
        return client


def _build(channel: Channel) -> TargetClient:
    try:
        secret = unseal(channel.secret_sealed) if channel.secret_sealed else ""
    except SealedValueUnreadable:
        raise ChannelCredentialsUnreadable(
            f"The credentials of channel {channel.slug!r} cannot be opened: SECRET_KEY changed since they were "
            "entered. Re-enter them in the admin (Publishing > Channels); nothing was sent"
        ) from None
    # The same limit as the primary channel's: one worker's lease is sized for it (docs/configuration.md).
    timeout = float(getattr(settings, "GALLEY_TARGET_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS))
    if channel.kind == ChannelKind.WORDPRESS:
        return ChannelWordPressClient(
            site_url=channel.base_url, user=channel.username, app_password=secret, timeout=timeout
        )
    return ChannelTargetClient(base_url=channel.base_url, token=secret, timeout=timeout)
