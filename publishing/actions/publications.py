"""Publishing a revision: the intent (in the approval's transaction), the publication and its
verification intent (in the publish operation's finalize), and the observed verification (in
the verify operation's finalize)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.notifications import do_notify_published
from publishing.actions.resolutions import do_close_replaced_problems
from publishing.actions.revisions import do_change_brief_status
from publishing.identities import PUBLISH, VERIFY, publish_key, revision_subject_id, verify_key
from publishing.models import Brief, Publication, Revision
from workers.actions.enqueue import Enqueued, add_dependency, enqueue_operation, supersede_waiting_operation
from workers.audit import record_audit_event
from workers.models import Dependency, Operation


@transaction.atomic(savepoint=False)
def do_request_publication(revision: Revision) -> Enqueued:
    """Record the intent to publish `revision`, in the approval's transaction (invariant 5).

    Idempotent: a second approval of the same revision returns the same operation. Per brief,
    publishes never regress (invariant 4): an older publish that has not been claimed yet is
    superseded; one that may already be in flight becomes a prerequisite (completion edge),
    so this one is claimed only after it finished either way.

    Caller holds the brief's row lock, taken before any operation row (README, "Lock order");
    older operations are touched in id order.
    """
    public_id = revision.brief.public_id
    enqueued = enqueue_operation(
        key=publish_key(public_id, revision.number),
        kind=PUBLISH,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        arguments={"revision": revision.number},
    )
    if not enqueued.created:
        return enqueued
    older = (
        Operation.objects.unfinished()
        .for_subject("brief", public_id)
        .filter(kind=PUBLISH)
        .exclude(id=enqueued.operation.id)
        .order_by("id")
    )
    for operation in older:
        if int(operation.arguments["revision"]) >= revision.number:
            continue
        reason = f"revision {revision.number} was approved before revision {operation.arguments['revision']} was sent"
        if not supersede_waiting_operation(operation, reason=reason):
            add_dependency(enqueued.operation, prerequisite=operation, requires=Dependency.Requires.COMPLETION)
    return enqueued


@transaction.atomic(savepoint=False)
def do_record_publication(
    revision: Revision, *, publish_operation_id: int, external_id: str, permalink: str
) -> Publication:
    """The publication and its verification intent, in the publish operation's finalize
    transaction (invariant 5). Idempotent: the publication is keyed by the operation key.

    Locks the brief first (README, "Lock order"), before the fenced update locks the operation.
    """
    # Without this lock the publication's foreign-key check would take the brief at COMMIT,
    # after the operation row: the reverse of an approval, which holds the brief and waits for
    # the operation. NO KEY UPDATE still serialises with the brief's writers.
    Brief.objects.select_for_update(of=("self",), no_key=True).get(id=revision.brief_id)
    public_id = revision.brief.public_id
    key = publish_key(public_id, revision.number)
    publication, created = Publication.objects.get_or_create(
        operation_key=key,
        defaults={
            "brief": revision.brief,
            "revision": revision,
            "payload_hash": revision.payload_hash,
            "external_id": external_id,
            "permalink": permalink,
        },
    )
    enqueue_operation(
        key=verify_key(public_id, revision.number),
        kind=VERIFY,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        arguments={"revision": revision.number, "publish_key": key},
        after=[(Operation.objects.get(id=publish_operation_id), Dependency.Requires.SUCCESS)],
    )
    if created:
        record_audit_event(
            acting_user=None,
            event_type="publication.recorded",
            subject_type="revision",
            subject_id=revision_subject_id(public_id, revision.number),
            old_state=None,
            new_state={"external_id": external_id, "permalink": permalink, "payload_hash": revision.payload_hash},
        )
    return publication


@transaction.atomic(savepoint=False)
def do_record_verification(publication: Publication) -> None:
    """Record the observation (invariant 10) and advance the brief's published revision, never
    backwards (invariant 4); the brief shows "published" when this is its latest revision.

    In the verify operation's finalize: locks the brief first, then the publication, then any
    operation rows; the fenced update locks the verify operation last (README, "Lock order").
    """
    number = publication.revision.number
    brief = Brief.objects.select_for_update(of=("self",), no_key=True).get(id=publication.brief_id)
    Publication.objects.filter(id=publication.id, verified_at__isnull=True).update(verified_at=timezone.now())
    old = {"published_revision": brief.published_revision_number, "status": brief.status}
    advanced = Brief.objects.filter(
        Q(published_revision_number__isnull=True) | Q(published_revision_number__lt=number), id=brief.id
    ).update(published_revision_number=number)
    if not advanced:
        return
    brief.published_revision_number = number
    do_close_replaced_problems(brief, published_number=number)
    latest = brief.revisions.order_by("-number").values_list("number", flat=True).first()
    if latest == number and brief.status != Brief.Status.PUBLISHED:
        do_change_brief_status(brief, Brief.Status.PUBLISHED)
    record_audit_event(
        acting_user=None,
        event_type="publication.verified",
        subject_type="brief",
        subject_id=brief.public_id,
        old_state=old,
        new_state={"published_revision": number, "status": brief.status, "permalink": publication.permalink},
    )
    do_notify_published(brief, revision_number=number, permalink=publication.permalink)
