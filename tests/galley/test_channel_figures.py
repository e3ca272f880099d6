"""Per-channel figures on /ops and /metrics (issue 21, point 8): queue depth, oldest pending age,
sends, waits, dead letters and conflicts labelled by channel, each channel counted from its own
operations only, in one statement whatever the number of channels."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from publishing.identities import PRIMARY_CHANNEL
from publishing.selectors.metrics import list_channel_figures
from tests.galley.test_metrics import METRICS, samples, value
from tests.publishing.test_channel_receipts import S, add_channel, move, send
from tests.web import client_for
from workers.errors import FailureKind
from workers.models import Operation

pytestmark = pytest.mark.django_db


@pytest.fixture
def on_channels(brief, revise):
    """Revision 1 published on 'web'; on 'partner-feed' one throttled wait, then dead; revision 2
    queued on both, and stopped on a conflict on 'partner-feed'."""
    add_channel("partner-feed", "Partner feed")
    first = revise(brief, "Dockers walked out at dawn.")
    move(send(first, PRIMARY_CHANNEL), S.SUCCEEDED)
    throttled = send(first, "partner-feed")
    move(throttled, S.RETRY_WAIT, last_error_kind=FailureKind.THROTTLED)
    Operation.objects.filter(pk=throttled.pk).update(waits=1, attempts=2)
    Operation.objects.filter(pk=throttled.pk).update(status=S.DEAD, finished_at=timezone.now(), needs_operator=True)
    second = revise(brief, "Dockers walked out at dawn, in the rain.")
    queued = send(second, PRIMARY_CHANNEL)
    Operation.objects.filter(pk=queued.pk).update(created_at=timezone.now() - datetime.timedelta(minutes=7))
    move(send(second, "partner-feed"), S.CONFLICT, last_error_kind=FailureKind.KEY_CONFLICT, needs_operator=True)


def test_channel_figures__each_channel_from_its_own_operations(on_channels):
    figures = {f.channel: f for f in list_channel_figures()}

    web, partner = figures[PRIMARY_CHANNEL], figures["partner-feed"]
    assert (web.name, web.queued, web.sends, web.waits, web.dead, web.conflicts) == ("Website", 1, 1, 0, 0, 0)
    assert (partner.name, partner.queued, partner.sends, partner.waits, partner.dead, partner.conflicts) == (
        "Partner feed",
        0,
        3,
        1,
        1,
        1,
    )
    age = web.oldest_queued_age(timezone.now())
    assert age is not None and age >= datetime.timedelta(minutes=7)
    assert partner.oldest_queued_age(timezone.now()) is None


@pytest.mark.parametrize("extra", [0, 5])
def test_channel_figures__one_statement_for_any_number_of_channels(brief, revise, extra, django_assert_num_queries):
    revision = revise(brief, "Dockers walked out at dawn.")
    for slug in [PRIMARY_CHANNEL] + [add_channel(f"extra-{n}", f"Extra {n}").slug for n in range(extra)]:
        send(revision, slug)

    with django_assert_num_queries(1):
        figures = list_channel_figures()

    assert len(figures) == 1 + extra


def test_metrics__per_channel_families_labelled_by_channel(on_channels, operator):
    parsed = samples(client_for(operator).get(METRICS))

    assert value(parsed, "galley_channel_queue_depth", channel=PRIMARY_CHANNEL) == 1
    assert value(parsed, "galley_channel_queue_depth", channel="partner-feed") == 0
    assert value(parsed, "galley_channel_oldest_pending_age_seconds", channel=PRIMARY_CHANNEL) >= 7 * 60
    assert value(parsed, "galley_channel_sends_total", channel="partner-feed") == 3
    assert value(parsed, "galley_channel_waits_total", channel="partner-feed") == 1
    assert value(parsed, "galley_channel_dead_letters", channel="partner-feed") == 1
    assert value(parsed, "galley_channel_dead_letters", channel=PRIMARY_CHANNEL) == 0
    assert value(parsed, "galley_channel_conflicts", channel="partner-feed") == 1


def test_ops_page__a_row_per_channel(on_channels, operator):
    from workers.actions.gates import pause_channel, set_channel_rate

    set_channel_rate("partner-feed", rate_per_second=5)
    pause_channel("partner-feed", seconds=60, reason="429 with Retry-After: 60")
    html = client_for(operator).get("/ops/").content.decode()

    assert 'id="ops-channels-heading"' in html
    partner = html.split('<tr data-channel="partner-feed">', 1)[1].split("</tr>", 1)[0]
    assert "Partner feed" in partner
    cells = [cell.split("</td>")[0].strip() for cell in partner.split("<td>")[1:]]
    assert cells == ["0", "—", "3", "1", "1", "1", "5/s", "0"]
    pauses = partner.split('data-testid="channel-pauses">', 1)[1].split("</td>", 1)[0]
    assert pauses.startswith("1 — paused now") and "429 with Retry-After: 60" in pauses
