"""The approval of a correction freezes its channel set (docs/invariants.md#i14): every channel holding
an earlier revision of the brief, and any the approver adds; a choice that leaves a holder out is
refused, nothing written (#i16)."""

from __future__ import annotations

import pytest

from approvals.errors import DecisionAlreadyMade
from approvals.models import Approval, ApprovalChannel
from publishing.errors import InvalidInput
from publishing.identities import PUBLISH
from publishing.models import Brief, Channel, Revision
from tests.publishing.handlers.test_channels import also_publish, approve, run_worker
from tests.publishing.handlers.test_corrections import correct
from workers.models import Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

NOTE = "An earlier version named the wrong port."


@pytest.fixture
def corrected(target, add_channel, brief, revise, editor, approver) -> Revision:
    """Revision 1 published on web and partner-feed (not on app), and revision 2, a correction, in review."""
    add_channel("partner-feed")
    add_channel("app")
    approve(revise(brief, "Dockers walked out in Gdynia."), by=approver, channels=["web", "partner-feed"])
    run_worker()
    return correct(brief, "Dockers walked out in Gdańsk.", by=editor, note=NOTE)


def test_i14_correction_approval_leaving_out_a_holder__refused_with_the_holder_named__nothing_written(
    corrected, approver
):
    with pytest.raises(InvalidInput) as refused:
        approve(corrected, by=approver, channels=["web", "app"])
    assert "Revision 2 is a correction" in refused.value.message
    assert "Partner Feed (partner-feed) holds revision 1" in refused.value.message
    assert not Approval.objects.filter(revision=corrected).exists()
    assert not Operation.objects.filter(kind=PUBLISH, subject_version=2).exists()
    assert Brief.objects.get(pk=corrected.brief_id).status == Brief.Status.IN_REVIEW


@pytest.mark.parametrize("channels", [[], "web"], ids=["none", "not-a-list"])
def test_i14_correction_approval__empty_or_malformed_choice__refused(corrected, approver, channels):
    with pytest.raises(InvalidInput):
        approve(corrected, by=approver, channels=channels)
    assert not Approval.objects.filter(revision=corrected).exists()


def test_i14_correction_approval__holders_plus_an_extra__frozen_with_one_intent_each(corrected, approver):
    approval = approve(corrected, by=approver, channels=["partner-feed", "web", "app"])
    frozen = list(ApprovalChannel.objects.filter(approval=approval).values_list("channel__slug", flat=True))
    assert sorted(frozen) == ["app", "partner-feed", "web"]
    publishes = Operation.objects.filter(kind=PUBLISH, subject_version=2)
    assert sorted(publishes.values_list("channel", flat=True)) == ["app", "partner-feed", "web"]


def test_i16_correction_approval__a_holder_disabled_since__still_gets_its_intent__waits_for_an_operator(
    corrected, approver
):
    Channel.objects.filter(slug="partner-feed").update(enabled=False)
    approval = approve(corrected, by=approver)
    frozen = set(ApprovalChannel.objects.filter(approval=approval).values_list("channel__slug", flat=True))
    assert frozen == {"web", "partner-feed"}
    assert set(Operation.objects.filter(kind=PUBLISH, subject_version=2).values_list("channel", flat=True)) == {
        "web",
        "partner-feed",
    }


def test_i14_correction_approval__disabled_extra__refused(corrected, approver):
    Channel.objects.filter(slug="app").update(enabled=False)
    with pytest.raises(InvalidInput, match="'app' is disabled"):
        approve(corrected, by=approver, channels=["web", "partner-feed", "app"])


def test_i16_after_a_correction_was_sent__also_publish_of_the_corrected_revision_to_a_new_channel__refused(
    corrected, approver
):
    approve(corrected, by=approver)
    first = Revision.objects.get(brief_id=corrected.brief_id, number=1)
    with pytest.raises(DecisionAlreadyMade, match="Revision 2 is a correction of revision 1 and was sent already"):
        also_publish(first, "app", by=approver)
    assert not Operation.objects.filter(channel="app").exists()
    assert also_publish(corrected, "app", by=approver) is True  # the correction itself may go there
