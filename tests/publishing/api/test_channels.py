"""Channels in the API (issue 21, point 8): listed without their credentials; a brief's channels and
its receipts per channel in the brief resource, a revision's in the revision resource."""

from __future__ import annotations

import datetime
import json

import pytest
from django.utils import timezone

from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Channel
from tests.publishing.test_channel_receipts import S, add_channel, move, publication, send

pytestmark = pytest.mark.django_db

SECRET = "s3cret-app-password"


def test_channels_list__every_channel_with_kind_and_flags__never_a_credential(as_role):
    partner = add_channel("partner-feed", "Partner feed")
    Channel.objects.filter(pk=partner.pk).update(username="galley-bot", secret_sealed=SECRET, enabled=False)

    for role in ("editor", "approver", "operator"):
        response = as_role(role).get("/channels")

        assert response.status_code == 200
        items = json.loads(response.content)["items"]
        assert [item["slug"] for item in items] == [PRIMARY_CHANNEL, "partner-feed"]
        assert items[1] == {
            "slug": "partner-feed",
            "name": "Partner feed",
            "kind": "reference",
            "enabled": False,
            "is_default": False,
        }
        assert SECRET not in response.content.decode()
        assert "galley-bot" not in response.content.decode()


def test_channels_list__no_role__refused(as_role):
    assert as_role("no_group").get("/channels").status_code == 403
    assert as_role("anonymous").get("/channels").status_code == 401


def test_brief_resource__its_channels_and_a_receipt_per_channel_sent_to(editor_api, brief, revise):
    add_channel("partner-feed", "Partner feed")
    brief.channels.set(Channel.objects.all())
    revision = revise(brief, "Dockers walked out at dawn.")
    move(send(revision, PRIMARY_CHANNEL), S.SUCCEEDED)
    publication(revision, PRIMARY_CHANNEL, verified=True)
    later = timezone.now() + datetime.timedelta(minutes=5)
    move(send(revision, "partner-feed"), S.RETRY_WAIT, last_error_kind="throttled", next_attempt_at=later)

    body = json.loads(editor_api.get(f"/briefs/{brief.public_id}").content)

    assert body["channels"] == [PRIMARY_CHANNEL, "partner-feed"]
    receipts = {receipt["channel"]: receipt for receipt in body["receipts"]}
    assert receipts[PRIMARY_CHANNEL]["state"] == "verified"
    assert receipts[PRIMARY_CHANNEL]["permalink"] == f"http://{PRIMARY_CHANNEL}.example/story/1"
    assert receipts["partner-feed"]["state"] == "waiting"
    assert receipts["partner-feed"]["why"] == "Partner feed asked Galley to slow down"  # the receipt names its channel
    assert receipts["partner-feed"]["until"] is not None
    assert {receipt["revision"] for receipt in body["receipts"]} == {1}


def test_revision_resource__receipts_of_that_revision_only(editor_api, brief, revise):
    add_channel("partner-feed", "Partner feed")
    first = revise(brief, "Dockers walked out at dawn.")
    send(first, "partner-feed")
    second = revise(brief, "Dockers walked out at dawn, in the rain.")

    sent = json.loads(editor_api.get(f"/briefs/{brief.public_id}/revisions/1").content)
    unsent = json.loads(editor_api.get(f"/briefs/{brief.public_id}/revisions/{second.number}").content)

    assert [(r["channel"], r["state"]) for r in sent["receipts"]] == [("partner-feed", "queued")]
    assert unsent["receipts"] == []
