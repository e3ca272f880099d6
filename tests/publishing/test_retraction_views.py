"""The retraction in the web UI (docs/retractions.md): the brief page's Retract button (approvers, once
published_brief) → the confirm page listing each channel and the revision it holds → done; the brief page and
its timeline then show the retraction per channel, and the dashboard filters retracted briefs."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from publishing.identities import RETRACT
from workers.drain import drain
from workers.models import Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_retract__approver_confirms__taken_down_and_shown_per_channel_in_page_timeline_and_dashboard(
    published_brief, approver
):
    client = signed_in(approver)
    page = client.get(reverse("publishing:brief", args=[published_brief.public_id])).content.decode()
    assert 'data-testid="retract"' in page
    confirm = client.get(reverse("publishing:brief_retract", args=[published_brief.public_id])).content.decode()
    assert 'data-channel="web"' in confirm and "holds revision 1" in confirm

    done = client.post(
        reverse("publishing:brief_retract", args=[published_brief.public_id]),
        {"reason": "Legal asked for a takedown.", "confirm": "yes"},
    )
    assert done.status_code == 302 and done["Location"] == published_brief.get_absolute_url()
    drain(worker_id="w-test", kinds=[RETRACT], time_budget=30, idle_wait=0.5)

    page = client.get(reverse("publishing:brief", args=[published_brief.public_id])).content.decode()
    assert 'id="retractions"' in page and "Legal asked for a takedown." in page
    assert 'data-testid="retract"' not in page  # taken down: nothing left to retract
    assert "Retracted (revision 1)" in page
    assert "Revision 1 retracted on" in page  # the timeline's entry
    listed = client.get(reverse("publishing:dashboard"), {"status": "retracted"}).content.decode()
    assert published_brief.public_id in listed


@pytest.mark.parametrize(
    ("data", "message"),
    [({"reason": "Takedown."}, "Confirm the retraction"), ({"reason": " ", "confirm": "yes"}, "is required")],
    ids=["not-confirmed", "no-reason"],
)
def test_retract__refused__the_page_again_with_why__nothing_written(published_brief, approver, data, message):
    response = signed_in(approver).post(reverse("publishing:brief_retract", args=[published_brief.public_id]), data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Operation.objects.filter(kind=RETRACT).exists()


def test_retract__editor__no_button_and_refused(published_brief, editor):
    client = signed_in(editor)
    page = client.get(reverse("publishing:brief", args=[published_brief.public_id])).content.decode()
    assert 'data-testid="retract"' not in page
    response = client.get(reverse("publishing:brief_retract", args=[published_brief.public_id]))
    assert response.status_code == 403
