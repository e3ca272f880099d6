"""Adopting what a target holds that Galley lost: after a failover to a replica that had not received
every commit (asynchronous replication, docs/operations.md#failover), the target can hold an
application whose Publication row, or even whose approval, vanished with the old primary. The
reconciliation (publishing.handlers.reconciliation) finds it by brief and by key; this records it,
never sending anything: the post is already there.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from publishing.actions.publications import insert_publication
from publishing.identities import publish_key, revision_subject_id
from publishing.models import Revision
from workers.audit import record_audit_event

ADOPTED = "publication.adopted"
APPROVAL_LOST = "approval.lost"


@transaction.atomic(savepoint=False)
def do_adopt_application(
    revision: Revision, *, channel: str, external_id: str, permalink: str, approval_lost: bool
) -> bool:
    """Record the target's application of `revision` on `channel` (under the revision's publish key,
    with the revision's own hash, which the caller checked) as a Publication, not verified: only a
    verification advances the brief (docs/invariants.md#i4, #i10). With `approval_lost` Galley holds no
    approval of it any more: an audit record says so, for an operator to have it approved again (the
    re-approval's publish finds the post under its key and adopts it, docs/target-protocol.md#publish).

    Idempotent: returns False, writing nothing, when the publication is recorded already. Locks the brief
    first (RECORD_PUBLICATION_SQL, docs/architecture.md#lock-order)."""
    public_id = revision.brief.public_id
    key = publish_key(public_id, revision.number, channel)
    now = timezone.now()
    if insert_publication(revision, channel=channel, external_id=external_id, permalink=permalink, now=now) is None:
        return False
    subject_id = revision_subject_id(public_id, revision.number)
    held = {"external_id": external_id, "permalink": permalink, "payload_hash": revision.payload_hash}
    record_audit_event(
        acting_user=None,
        event_type=ADOPTED,
        subject_type="revision",
        subject_id=subject_id,
        old_state=None,
        new_state={**held, "channel": channel, "operation_key": key, "approval_lost": approval_lost},
    )
    if approval_lost:
        record_audit_event(
            acting_user=None,
            event_type=APPROVAL_LOST,
            subject_type="revision",
            subject_id=subject_id,
            old_state=None,
            new_state={"channel": channel, "operation_key": key, "held_at_target": held},
        )
    return True
