"""The channel set an approval freezes, through the revision page and the JSON API (docs/invariants.md#i14):
the approver sees and chooses the channels, a bad choice is refused with the comment kept, and "also
publish to" adds one channel to an approved revision, audited."""

from __future__ import annotations

import json

import pytest

from approvals.models import Approval, ApprovalChannel
from publishing.identities import PUBLISH, publish_key
from publishing.models import Channel
from tests.publishing.api.support import ApiClient, problem, token_for
from workers.models import AuditEvent, Operation

pytestmark = pytest.mark.django_db


@pytest.fixture
def feed() -> Channel:
    return Channel.objects.create(
        slug="partner-feed", name="Partner feed", base_url="http://127.0.0.1:9", is_default=True
    )


def decide(client, revision, *, channels: list[str] | None, comment: str = "Fine."):
    data = {
        "revision_number": revision.number,
        "payload_hash": revision.payload_hash,
        "decision": "approved",
        "comment": comment,
    }
    if channels is not None:
        data |= {"channels_offered": "1", "channels": channels}
    return client.post(f"/briefs/{revision.brief.public_id}/revisions/{revision.number}/decision/", data)


def publishes(brief) -> set[str]:
    return set(Operation.objects.filter(kind=PUBLISH, subject_id=brief.public_id).values_list("channel", flat=True))


def test_invariant_14__revision_page__offers_every_enabled_channel__the_briefs_ticked(
    client, approver, brief, revise, feed
):
    Channel.objects.create(slug="app", name="App", base_url="http://127.0.0.1:9", enabled=False)
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    page = client.get(revision.get_absolute_url()).content.decode()
    assert 'id="channel-choices"' in page
    # The brief was created before partner-feed existed: its channels are web's alone, ticked; partner-feed
    # is offered, not ticked.
    assert 'value="web" checked' in page
    assert 'value="partner-feed">' in page
    assert 'value="app"' not in page  # disabled: not offered


def test_single_channel_newsroom__revision_page__no_channel_choice(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    assert 'id="channel-choices"' not in client.get(revision.get_absolute_url()).content.decode()


def test_invariant_14__approve_with_the_channels_ticked__only_those_get_a_publish(
    client, approver, brief, revise, feed
):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    response = decide(client, revision, channels=["partner-feed"])
    assert response.status_code == 302
    assert publishes(brief) == {"partner-feed"}
    assert set(ApprovalChannel.objects.values_list("channel__slug", flat=True)) == {"partner-feed"}


def test_invariant_14__approve_with_no_channel_ticked__refused__comment_kept__nothing_written(
    client, approver, brief, revise, feed
):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    response = decide(client, revision, channels=[], comment="Checked the union's statement.")
    assert response.status_code == 400
    page = response.content.decode()
    assert "Choose at least one channel" in page and "Checked the union&#x27;s statement." in page
    assert not Approval.objects.exists() and publishes(brief) == set()


def test_invariant_14__also_publish_form__adds_one_channel__audited__page_says_who(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    decide(client, revision, channels=None)
    Channel.objects.create(slug="newsletter", name="Newsletter", base_url="http://127.0.0.1:9")
    page = client.get(revision.get_absolute_url()).content.decode()
    assert 'id="also-publish-form"' in page and 'value="newsletter"' in page

    response = client.post(f"/briefs/{brief.public_id}/revisions/1/channels/", {"channel": "newsletter"}, follow=True)
    assert response.status_code == 200
    assert publishes(brief) == {"web", "newsletter"}
    page = response.content.decode()
    assert "added by <strong>" in page and 'data-channel="newsletter"' in page
    assert AuditEvent.objects.filter(event_type="revision.channel_added", actor=approver).count() == 1
    brief_page = client.get(brief.get_absolute_url()).content.decode()
    # The brief page's receipt for the channel says it came after the approval, and who added it.
    assert 'data-channel="newsletter"' in brief_page
    assert f"added after the approval by {approver.username}" in brief_page
    web_receipt = brief_page.split('data-channel="web"', 1)[1].split("</li>", 1)[0]
    assert 'data-testid="receipt-added"' not in web_receipt  # web came with the approval
    assert brief_page.count('data-testid="receipt-added"') == 1

    refused = client.post(f"/briefs/{brief.public_id}/revisions/1/channels/", {"channel": "nowhere"})
    assert refused.status_code == 400 and "No channel is called" in refused.content.decode()


def test_invariant_14__api__approve_with_channels__the_answer_names_them(brief, revise, approver, feed):
    api = ApiClient(token_for(approver))
    revision = revise(brief, "Dockers walked out at dawn.")
    response = api.post(
        f"/briefs/{brief.public_id}/revisions/1/decisions",
        {"decision": "approved", "payload_hash": revision.payload_hash, "channels": ["partner-feed", "web"]},
    )
    assert response.status_code == 201, response.content
    assert json.loads(response.content)["channels"] == ["web", "partner-feed"]  # the primary channel first
    assert Operation.objects.filter(key=publish_key(brief.public_id, 1, "partner-feed")).exists()


def test_invariant_14__api__unknown_channel__400_problem__nothing_written(brief, revise, approver):
    api = ApiClient(token_for(approver))
    revision = revise(brief, "Dockers walked out at dawn.")
    response = api.post(
        f"/briefs/{brief.public_id}/revisions/1/decisions",
        {"decision": "approved", "payload_hash": revision.payload_hash, "channels": ["nowhere"]},
    )
    assert response.status_code == 400 and "nowhere" in problem(response)["detail"]
    assert not Approval.objects.exists()


def test_invariant_14__api__also_publish__201_then_200__one_intent(brief, revise, approver):
    api = ApiClient(token_for(approver))
    revision = revise(brief, "Dockers walked out at dawn.")
    api.post(
        f"/briefs/{brief.public_id}/revisions/1/decisions",
        {"decision": "approved", "payload_hash": revision.payload_hash},
    )
    Channel.objects.create(slug="newsletter", name="Newsletter", base_url="http://127.0.0.1:9")
    first = api.post(f"/briefs/{brief.public_id}/revisions/1/channels", {"channel": "newsletter"})
    again = api.post(f"/briefs/{brief.public_id}/revisions/1/channels", {"channel": "newsletter"})
    assert (first.status_code, again.status_code) == (201, 200), first.content
    assert json.loads(again.content)["added"] is False
    assert Operation.objects.filter(kind=PUBLISH, channel="newsletter").count() == 1
