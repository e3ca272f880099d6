"""Every application at a target ends with a Publication and an audit record, even when a newer
revision supersedes it (docs/invariants.md#i4 and #i13), with the real reference target over HTTP.

Revision 1 is applied at the target; its worker recorded the target's receipt, then stopped inside its
finalize, and the operation ended dead (its deadline passed while it was stuck), left so or cancelled by
an operator. Revision 2 is then
published and verified first. Revision 1 was live at the target: it ends with its Publication (never
verified, marked superseded in its audit record), and the brief's published revision stays 2.
"""

from __future__ import annotations

import datetime
import time

import pytest
from django.db import transaction
from django.utils import timezone

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.actions.resolutions import check_cancel_publication
from publishing.handlers.publications import handle_publish
from publishing.identities import PUBLISH, VERIFY, publish_key, revision_subject_id
from publishing.models import Brief, Publication, Revision
from publishing.timeline import get_brief_timeline
from workers.actions.claims import claim_operations, complete_operation
from workers.actions.housekeeping import reconcile_expired_leases
from workers.drain import drain
from workers.models import AuditEvent, Operation
from workers.registry import Success

pytestmark = pytest.mark.django_db(transaction=True)


def approve(revision: Revision, *, by) -> None:
    with transaction.atomic(durable=True):
        check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=by,
        )


@pytest.mark.parametrize("operator_cancels", [False, True], ids=["dead-letter", "cancelled-by-an-operator"])
def test_every_application_recorded__older_revision_applied_then_newer_published_first__publication_and_audit(
    target, brief, revise, approver, operator, settings, operator_cancels
):
    settings.GALLEY_BACKOFF_BASE_SECONDS = 0.01
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    (claimed,) = claim_operations(worker_id="w-frozen", limit=1, kinds=[PUBLISH])
    success = handle_publish(claimed)  # revision 1 applied at the target

    def frozen() -> None:
        raise RuntimeError("the worker stopped inside its finalize")

    with pytest.raises(RuntimeError):
        complete_operation(claimed, Success(result=success.result, finalize=frozen), started=time.monotonic())
    first_key = publish_key(brief.public_id, first.number)
    past = timezone.now() - datetime.timedelta(hours=1)
    Operation.objects.filter(key=first_key).update(lease_expires_at=past, deadline=past)
    assert reconcile_expired_leases()["dead"] == 1  # stuck past its deadline: a dead letter
    if operator_cancels:
        with transaction.atomic(durable=True):
            check_cancel_publication(
                Operation.objects.get(key=first_key), reason="Superseded by the correction", acting_user=operator
            )

    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)
    drain(worker_id="w-test", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5)

    assert [row["revision"] for row in target.ledger()] == [1, 2]
    brief = Brief.objects.get(pk=brief.pk)
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, 2)
    # What the target applied for revision 1 is on record, superseded by revision 2, never verified.
    recorded = Publication.objects.get(operation_key=first_key)
    assert (recorded.revision_id, recorded.external_id) == (first.id, success.result["external_id"])
    assert recorded.permalink == success.result["permalink"] and recorded.verified_at is None
    (event,) = AuditEvent.objects.filter(
        event_type="publication.recorded", subject_id=revision_subject_id(brief.public_id, first.number)
    )
    assert event.new_state["superseded_by_revision"] == 2
    assert event.new_state["external_id"] == success.result["external_id"]
    # The dead letter is over: cancelled, by the operator or for the newer revision, as before.
    reason = (
        "cancelled by an operator: Superseded by the correction"
        if operator_cancels
        else ("revision 2 was published instead")
    )
    dead = Operation.objects.get(key=first_key)
    assert (dead.status, dead.last_error_message) == ("cancelled", reason)
    assert Publication.objects.get(revision=second).verified_at is not None
    # The brief's timeline says so, rather than "Verifying" for ever.
    entries = [e for e in get_brief_timeline(brief, viewer=approver).entries if e.kind == "publication"]
    assert {(e.status, e.description) for e in entries} == {
        ("published", "Revision 2 published, read back and verified"),
        ("superseded", "Revision 1 applied at the target, superseded: revision 2 is published"),
    }
