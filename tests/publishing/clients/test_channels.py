"""A channel's client (publishing.clients.channels.client_for) over real HTTP to reference targets:
the primary channel's is exactly the settings' client; another channel's is built from its row with
its unsealed credentials, kept per process and rebuilt when the row changes; a missing or disabled
channel, or credentials sealed under another SECRET_KEY, are refused before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import transaction

from galley.reference_target.harness import ReferenceTarget
from publishing.actions.channels import do_save_channel
from publishing.clients.channels import ChannelCredentialsUnreadable, ChannelUnavailable, client_for
from publishing.clients.target import TargetAuthError, shared_from_settings
from publishing.credentials import SealedValueUnreadable, seal, unseal
from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Channel

pytestmark = pytest.mark.django_db(transaction=True)

PARTNER_TOKEN = "partner-feed-token"


@pytest.fixture
def partner_target(tmp_path) -> Iterator[ReferenceTarget]:
    target = ReferenceTarget(db_path=tmp_path / "partner.sqlite3", token=PARTNER_TOKEN, port=0).start()
    yield target
    target.stop()


def save_partner(url: str, *, secret: str = PARTNER_TOKEN, **values: object) -> Channel:
    existing = Channel.objects.filter(slug="partner-feed").first()
    with transaction.atomic():
        return do_save_channel(
            existing,
            values={"slug": "partner-feed", "name": "Partner feed", "base_url": url, **values},
            secret=secret,
            acting_user=None,
        )


def test_seal__round_trip__sealed_differs_each_time_and_hides_the_text():
    first, second = seal("s3cret"), seal("s3cret")

    assert unseal(first) == unseal(second) == "s3cret"
    assert first != second and "s3cret" not in first


def test_unseal__secret_key_changed__refused_with_what_to_do(settings):
    sealed = seal("s3cret")
    settings.SECRET_KEY = "another-secret-key-" + "x" * 40

    with pytest.raises(SealedValueUnreadable, match="enter them again"):
        unseal(sealed)


def test_client_for__primary_channel__exactly_the_settings_client(target):
    assert client_for(PRIMARY_CHANNEL) is shared_from_settings()
    assert "its revision fence is on" in client_for(PRIMARY_CHANNEL).check()


def test_client_for__other_channel__its_url_and_unsealed_token_over_http(target, partner_target):
    save_partner(partner_target.url)

    client = client_for("partner-feed")

    assert client.base_url == partner_target.url
    assert "accepts the channel's credentials" in client.check()
    assert client_for("partner-feed") is client  # kept per process while the row is unchanged


def test_client_for__row_changed__rebuilt_with_the_new_credentials(partner_target):
    save_partner(partner_target.url, secret="wrong-token")
    stale = client_for("partner-feed")
    with pytest.raises(TargetAuthError, match="the channel's credentials"):
        stale.check()

    save_partner(partner_target.url, secret=PARTNER_TOKEN)
    fresh = client_for("partner-feed")

    assert fresh is not stale
    assert "its revision fence is on" in fresh.check()


def test_client_for__missing_or_disabled_channel__refused_nothing_sent(partner_target):
    with pytest.raises(ChannelUnavailable, match="no channel 'nowhere'"):
        client_for("nowhere")
    save_partner(partner_target.url, enabled=False)
    with pytest.raises(ChannelUnavailable, match="'partner-feed' is disabled"):
        client_for("partner-feed")
    assert partner_target.ledger() == []


def test_client_for__secret_key_changed__names_the_channel_and_says_to_re_enter(settings, partner_target):
    save_partner(partner_target.url)
    settings.SECRET_KEY = "another-secret-key-" + "x" * 40
    Channel.objects.filter(slug="partner-feed").update(name="Partner feed (touched)")  # row unchanged: cached
    channel = Channel.objects.get(slug="partner-feed")
    with transaction.atomic():
        do_save_channel(channel, values={"name": "Partner wire"}, acting_user=None)

    with pytest.raises(ChannelCredentialsUnreadable, match=r"'partner-feed'.*Re-enter them in the admin"):
        client_for("partner-feed")
