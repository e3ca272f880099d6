"""A correction reaches every channel holding the brief, exactly once each, verified by read-back there
(docs/invariants.md#i16), and no other channel unless the approver adds it (#i14).

Every channel is a real reference target of its own (in a thread, real HTTP), the primary channel `web`
the settings' target: "applied exactly once" is read from each target's ledger, not from Galley's rows.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.db import transaction

from approvals.models import ApprovalChannel
from galley.reference_target import Faults, ReferenceTarget
from publishing.actions.revisions import check_create_revision
from publishing.identities import PUBLISH, publish_key
from publishing.models import Brief, Publication, Revision
from publishing.selectors.corrections import list_holding_channels
from tests.publishing.handlers.test_channels import applied, approve, run_worker, verified_on
from workers.models import Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

NOTE = "An earlier version said the strike began on Monday; it began on Tuesday."


@pytest.fixture
def channels(target, add_channel) -> dict[str, ReferenceTarget]:
    """Three channels, each its own target: web (the settings' target), partner-feed and app."""
    return {"web": target, "partner-feed": add_channel("partner-feed"), "app": add_channel("app")}


def correct(brief: Brief, body: str, *, by: Any, note: str = NOTE) -> Revision:
    """The next revision of `brief`, a correction with `note`, written by `by`."""
    latest = brief.revisions.order_by("-number").first()
    with transaction.atomic(durable=True):
        revision, _created = check_create_revision(
            brief.public_id,
            base_number=latest.number,
            title="Harbour strike",
            body=body,
            correction=True,
            correction_note=note,
            acting_user=by,
        )
    return revision


def test_i16_correction_reaches_every_channel_holding_an_earlier_revision__once_each_verified__none_to_a_non_holder(
    channels, brief, revise, editor, approver
):
    first = revise(brief, "Dockers walked out on Monday.")
    approve(first, by=approver, channels=["web", "partner-feed"])
    run_worker()
    assert verified_on(first) == {"web", "partner-feed"}

    second = correct(brief, "Dockers walked out on Tuesday.", by=editor)
    approval = approve(second, by=approver)  # no choice named: the holders, and only they
    run_worker()
    run_worker()  # a second drain finds nothing to do again

    frozen = set(ApprovalChannel.objects.filter(approval=approval).values_list("channel__slug", flat=True))
    assert frozen == {"web", "partner-feed"}
    assert set(Operation.objects.filter(kind=PUBLISH, subject_version=2).values_list("channel", flat=True)) == {
        "web",
        "partner-feed",
    }
    for slug in ("web", "partner-feed"):
        keys = [publish_key(brief.public_id, number, slug) for number in (1, 2)]
        assert applied(channels[slug]) == [(keys[0], 1), (keys[1], 2)]
    assert applied(channels["app"]) == []  # never held the brief: no correction either
    assert verified_on(second) == {"web", "partner-feed"}
    brief.refresh_from_db()
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, 2)
    # The note is part of the payload each target rendered: its permalink page shows it.
    for slug in ("web", "partner-feed"):
        page = httpx.get(Publication.objects.get(revision=second, channel__slug=slug).permalink, timeout=5).text
        assert f'<p class="correction">Correction: {NOTE}</p>' in page


def test_i16_correction__approver_adds_a_channel_that_never_held_it__that_one_too__exactly_once_each(
    channels, brief, revise, editor, approver
):
    first = revise(brief, "Dockers walked out on Monday.")
    approve(first, by=approver, channels=["partner-feed"])
    run_worker()

    second = correct(brief, "Dockers walked out on Tuesday.", by=editor)
    approve(second, by=approver, channels=["partner-feed", "app"])
    run_worker()

    assert applied(channels["web"]) == []
    assert applied(channels["app"]) == [(publish_key(brief.public_id, 2, "app"), 2)]
    assert [number for _key, number in applied(channels["partner-feed"])] == [1, 2]
    assert verified_on(second) == {"partner-feed", "app"}


def test_i16_correction__an_earlier_revision_still_on_its_way_to_a_channel__the_correction_goes_there_too__after_it(
    channels, brief, revise, editor, approver
):
    down = channels["partner-feed"]
    down.faults = Faults(rate_503=1.0, retry_after=1)
    first = revise(brief, "Dockers walked out on Monday.")
    approve(first, by=approver, channels=["web", "partner-feed"])
    run_worker(idle_wait=0.2)
    assert verified_on(first) == {"web"} and applied(down) == []  # revision 1 still on its way there

    second = correct(brief, "Dockers walked out on Tuesday.", by=editor)
    holders = [(h.channel.slug, h.holds) for h in list_holding_channels(brief, before=2)]
    assert holders == [("web", "holds revision 1"), ("partner-feed", "is being sent revision 1")]
    approval = approve(second, by=approver)
    frozen = set(ApprovalChannel.objects.filter(approval=approval).values_list("channel__slug", flat=True))
    assert frozen == {"web", "partner-feed"}
    down.faults = Faults()
    run_worker(idle_wait=1.5)

    # Revision 1's publish there, tried already, may have reached the target: the correction's waits for
    # it (a completion edge) and is applied after it, once, so the channel ends showing the correction.
    keys = [publish_key(brief.public_id, number, "partner-feed") for number in (1, 2)]
    assert applied(down) == [(keys[0], 1), (keys[1], 2)]
    assert verified_on(second) == {"web", "partner-feed"}
