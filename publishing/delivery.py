"""Publishing's operation handlers: `publish` and `verify`, run by workers after the intent committed.

A handler makes its network calls with no database transaction open, maps every target
response to a failure kind (workers.policy decides what happens next), and hands the
domain's writes to the machinery as `Done.commit`, which runs in the fenced finalize
transaction: the publication and its verification intent commit together with the
publish operation's success, or not at all (invariant 5).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.selectors import get_valid_approval
from publishing import target_client
from publishing.models import Brief, Publication, Revision
from publishing.target_client import Receipt
from workers.actions import enqueue_operation, renew_lease
from workers.audit import record_audit_event
from workers.crashpoints import crash_point
from workers.errors import FailureKind, OperationFailed, Superseded
from workers.models import Dependency, Operation
from workers.registry import Done, Job

logger = logging.getLogger(__name__)

PUBLISH = "publish"
VERIFY = "verify"

T = TypeVar("T")


def publish_key(public_id: str, number: int) -> str:
    return f"publish:{public_id}:revision-{number}"


def verify_key(public_id: str, number: int) -> str:
    return f"verify:{public_id}:revision-{number}"


def call_target(call: Callable[[], T]) -> T:
    """Run one target call, turning the client's exceptions into failure kinds (invariant 9)."""
    try:
        return call()
    except target_client.TargetTimeout as exc:
        raise OperationFailed(FailureKind.TIMEOUT, str(exc), http_status=exc.status) from exc
    except target_client.TargetAmbiguous as exc:
        raise OperationFailed(FailureKind.CONNECTION, str(exc), http_status=exc.status) from exc
    except target_client.TargetThrottled as exc:
        raise OperationFailed(
            FailureKind.THROTTLED, str(exc), retry_after=exc.retry_after, http_status=exc.status
        ) from exc
    except target_client.TargetInProgress as exc:
        raise OperationFailed(FailureKind.IN_PROGRESS, str(exc), http_status=exc.status) from exc
    except (target_client.TargetRejected, target_client.TargetNotFound) as exc:
        raise OperationFailed(FailureKind.INVALID, str(exc), http_status=exc.status) from exc
    except target_client.TargetAuthError as exc:
        raise OperationFailed(FailureKind.AUTH, str(exc), http_status=exc.status) from exc
    except target_client.TargetKeyMismatch as exc:
        raise OperationFailed(FailureKind.KEY_CONFLICT, str(exc), http_status=exc.status) from exc
    except target_client.TargetStaleRevision as exc:
        raise Superseded(f"the target already holds revision {exc.current_revision} of this brief") from exc
    except (target_client.TargetServerError, target_client.TargetInvalidResponse) as exc:
        raise OperationFailed(FailureKind.SERVER_ERROR, str(exc), http_status=exc.status) from exc


def _check_receipt(job: Job, receipt: Receipt) -> Receipt:
    if receipt.payload_hash != job.payload_hash:
        raise OperationFailed(
            FailureKind.KEY_CONFLICT,
            f"the target holds {job.key} with payload {receipt.payload_hash[:12]}…, "
            f"not the approved {job.payload_hash[:12]}…",
            conflicting_payload_hash=receipt.payload_hash,
        )
    return receipt


def handle_publish(job: Job) -> Done:
    """Send revision N with an approval of exactly N and its hash; never after a newer one was published.

    An ambiguous attempt (the previous one may have reached the target) looks the key up
    first and adopts what the target holds instead of sending again.
    """
    number = int(job.arguments["revision"])
    revision = Revision.objects.select_related("brief").get(brief__public_id=job.subject_id, number=number)
    if revision.payload_hash != job.payload_hash:
        raise OperationFailed(
            FailureKind.INVALID,
            f"{job.key} carries hash {job.payload_hash[:12]}…, revision {number} has another",
        )
    if get_valid_approval(revision) is None:
        raise OperationFailed(
            FailureKind.INVALID,
            f"no approval of revision {number} with hash {revision.payload_hash[:12]}… exists; refusing to publish",
        )
    client = target_client.shared_from_settings()
    if job.ambiguous:
        found = call_target(lambda: client.lookup(job.key))
        if found is not None:
            logger.info("adopting the target's existing publication", extra=job.log_extra())
            return _publication_done(job, revision, _check_receipt(job, found), applied=False)
    newer = (
        Publication.objects.filter(brief=revision.brief, revision__number__gt=number)
        .values_list("revision__number", flat=True)
        .first()
    )
    if newer is not None:
        raise Superseded(f"revision {newer} of {job.subject_id} is already published")
    # Never send revision N once a newer revision's publish may have reached the target (it has
    # made an attempt): in the normal order the newer one waits for this one, so this only
    # stops an older intent revived late, e.g. by an operator.
    attempted = (
        Operation.objects.filter(
            kind=PUBLISH,
            subject_type="brief",
            subject_id=job.subject_id,
            arguments__revision__gt=number,
            attempts__gt=0,
        )
        .values_list("arguments__revision", flat=True)
        .first()
    )
    if attempted is not None:
        raise Superseded(f"revision {attempted} of {job.subject_id} may already be at the target")
    # Fence check immediately before the side effect: a worker that lost its lease stops here.
    renew_lease(job)
    try:
        receipt, applied = call_target(
            lambda: client.publish(
                operation_key=job.key,
                brief_id=job.subject_id,
                revision=number,
                payload_hash=revision.payload_hash,
                payload=revision.payload,
            )
        )
    except OperationFailed as failure:
        if failure.kind != FailureKind.KEY_CONFLICT:
            raise
        # Record what the target holds under our key, for the operator who resolves it.
        held = call_target(lambda: client.lookup(job.key))
        raise OperationFailed(
            FailureKind.KEY_CONFLICT,
            failure.message,
            http_status=failure.http_status,
            conflicting_payload_hash=held.payload_hash if held is not None else "",
        ) from failure
    crash_point("after_target_response", kind=PUBLISH)
    return _publication_done(job, revision, _check_receipt(job, receipt), applied=applied)


def _publication_done(job: Job, revision: Revision, receipt: Receipt, *, applied: bool) -> Done:
    def commit() -> None:
        record_publication(job, revision, receipt)

    return Done(
        result={"external_id": receipt.id, "permalink": receipt.permalink, "first_application": applied},
        commit=commit,
    )


@transaction.atomic(savepoint=False)
def record_publication(job: Job, revision: Revision, receipt: Receipt) -> Publication:
    """The publication and its verification intent, in the publish operation's finalize transaction."""
    publication, created = Publication.objects.get_or_create(
        operation_key=job.key,
        defaults={
            "brief": revision.brief,
            "revision": revision,
            "payload_hash": revision.payload_hash,
            "external_id": receipt.id,
            "permalink": receipt.permalink,
        },
    )
    publish_operation = Operation.objects.get(id=job.operation_id)
    enqueue_operation(
        key=verify_key(job.subject_id, revision.number),
        kind=VERIFY,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=job.subject_id,
        arguments={"revision": revision.number, "publish_key": job.key},
        after=[(publish_operation, Dependency.Requires.SUCCESS)],
    )
    if created:
        record_audit_event(
            acting_user=None,
            event_type="publication.recorded",
            subject_type="revision",
            subject_id=f"{job.subject_id}/revision-{revision.number}",
            old_state=None,
            new_state={
                "external_id": receipt.id,
                "permalink": receipt.permalink,
                "payload_hash": receipt.payload_hash,
            },
        )
    return publication


def handle_verify(job: Job) -> Done:
    """Done means observed (invariant 10): the read-back and the permalink both show the approved hash."""
    publication = Publication.objects.select_related("revision", "brief").get(
        operation_key=job.arguments["publish_key"]
    )
    client = target_client.shared_from_settings()
    receipt = call_target(lambda: client.read_back(publication.external_id))
    if receipt.payload_hash != job.payload_hash:
        raise OperationFailed(
            FailureKind.INVALID,
            f"read-back of {publication.external_id} shows payload {receipt.payload_hash[:12]}…, "
            f"not the approved {job.payload_hash[:12]}…",
        )
    page_hash = call_target(lambda: client.fetch_permalink(receipt.permalink))
    if page_hash != job.payload_hash:
        raise OperationFailed(
            FailureKind.SERVER_ERROR,
            f"the permalink {receipt.permalink} shows payload {page_hash[:12]}…, not {job.payload_hash[:12]}… yet",
        )

    def commit() -> None:
        mark_verified(publication)

    return Done(result={"permalink": receipt.permalink, "verified_hash": page_hash}, commit=commit)


@transaction.atomic(savepoint=False)
def mark_verified(publication: Publication) -> None:
    """Record the observation and advance the brief's published revision, never backwards."""
    from publishing.actions import set_brief_status  # actions import this module's keys

    number = publication.revision.number
    brief = Brief.objects.select_for_update(of=("self",)).get(id=publication.brief_id)
    Publication.objects.filter(id=publication.id, verified_at__isnull=True).update(verified_at=timezone.now())
    old = {"published_revision": brief.published_revision_number, "status": brief.status}
    advanced = Brief.objects.filter(
        Q(published_revision_number__isnull=True) | Q(published_revision_number__lt=number), id=brief.id
    ).update(published_revision_number=number)
    if not advanced:
        return
    brief.published_revision_number = number
    latest = brief.revisions.order_by("-number").values_list("number", flat=True).first()
    if latest == number and brief.status != Brief.Status.PUBLISHED:
        set_brief_status(brief, Brief.Status.PUBLISHED)
    record_audit_event(
        acting_user=None,
        event_type="publication.verified",
        subject_type="brief",
        subject_id=brief.public_id,
        old_state=old,
        new_state={"published_revision": number, "status": brief.status, "permalink": publication.permalink},
    )
