"""A channel's rate limit reaches its gate, which every worker reads before a send
(docs/operations.md#rate-limits-and-pauses)."""

from __future__ import annotations

import pytest

from publishing.actions.channels import do_sync_channel_gate, ensure_primary_channel
from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Channel
from workers.actions.gates import pause_channel
from workers.models import ChannelGate

pytestmark = pytest.mark.django_db


def test_rate_limit__the_primary_channel_has_its_gate_after_every_migrate_or_flush():
    assert ChannelGate.objects.filter(channel=PRIMARY_CHANNEL, rate_per_second=None).exists()
    ChannelGate.objects.all().delete()
    ensure_primary_channel()
    assert ChannelGate.objects.filter(channel=PRIMARY_CHANNEL).exists()


def test_rate_limit__a_channels_rate__copied_to_its_gate_keeping_a_pause():
    channel = Channel.objects.create(slug="partner-feed", name="Partner feed", rate_per_second=5)
    do_sync_channel_gate(channel)
    assert ChannelGate.objects.get(channel="partner-feed").rate_per_second == 5
    paused_until = pause_channel("partner-feed", seconds=60, reason="429")
    channel.rate_per_second = None
    do_sync_channel_gate(channel)
    gate = ChannelGate.objects.get(channel="partner-feed")
    assert (gate.rate_per_second, gate.paused_until) == (None, paused_until)
