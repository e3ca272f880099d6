"""The `retract` handler (docs/retractions.md), run by a worker after the retraction request committed.

Like the publish handler it makes its network calls with no transaction open and maps every target
answer to a failure kind (handlers.failures). Done means observed (docs/invariants.md#i10, #i16): the
read-back says retracted and the permalink answers 410 Gone (or 404); only then does the finalize
record the retraction, in the fenced finalize transaction with the operation's success.
"""

from __future__ import annotations

import dataclasses
import logging

from publishing.actions.retractions import do_record_retraction
from publishing.clients import target
from publishing.clients.channels import client_for
from publishing.handlers.failures import call_service
from publishing.identities import RETRACT, publish_key, revision_number
from publishing.models import Publication
from publishing.selectors.publications import get_publication
from workers.actions.claims import renew_lease
from workers.actions.gates import reserve_send
from workers.crashpoints import crash_point
from workers.errors import FailureKind, OperationFailed
from workers.registry import ClaimedOperation, Success

logger = logging.getLogger(__name__)


def _send(client: target.TargetClient, claimed: ClaimedOperation, publication: Publication) -> str:
    """The side effect: the retraction under the operation's key; returns the target's retracted_at. A
    target holding a newer revision than the one retracted is a conflict for an operator
    (docs/retractions.md#race), recorded with what the target holds."""
    reserve_send(claimed)
    number = revision_number(claimed)
    try:
        receipt = call_service(
            lambda: client.retract(
                publication_id=publication.external_id,
                operation_key=claimed.key,
                brief_id=claimed.subject_id,
                revision=number,
                reason=str(claimed.arguments["reason"]),
            )
        )
    except OperationFailed as failure:
        if failure.kind != FailureKind.STALE_REVISION:
            raise
        current = int((failure.target_state or {})["revision"])
        held = call_service(lambda: client.lookup(publish_key(claimed.subject_id, current, claimed.channel)))
        raise OperationFailed(
            FailureKind.STALE_REVISION,
            f"the target holds revision {current} of {claimed.subject_id}, newer than the retracted revision "
            f"{number}: it was published after the retraction was decided; an operator decides whether it "
            "stays (cancel this retraction) or goes too (retract the brief again)",
            http_status=failure.http_status,
            conflicting_payload_hash=held.payload_hash if held is not None else "",
            target_state=dataclasses.asdict(held) if held is not None else failure.target_state,
        ) from failure
    return receipt.retracted_at


def _permalink_status(client: target.TargetClient, url: str) -> int:
    """410 or 404 when nothing is published at `url` any more; raises while it still shows a page."""
    try:
        call_service(lambda: client.fetch_permalink(url))
    except OperationFailed as failure:
        if failure.http_status in (404, 410):
            return failure.http_status
        raise
    raise OperationFailed(FailureKind.SERVER_ERROR, f"the permalink {url} still shows the article")


def handle_retract(claimed: ClaimedOperation) -> Success:
    """Take revision N's publication on the channel down under the retraction key, then observe it. An
    ambiguous attempt (the previous one may have reached the target) reads the publication back first
    and adopts a retraction the target already holds instead of sending again."""
    publication = get_publication(str(claimed.arguments["publish_key"]))
    client = client_for(claimed.channel)
    back = call_service(lambda: client.read_back(publication.external_id)) if claimed.ambiguous else None
    if back is not None and back.retracted:
        logger.info("adopting the target's existing retraction", extra=claimed.log_extra())
        retracted_at = back.retracted_at
    else:
        # Fence check immediately before the side effect: a worker that lost its lease stops here.
        renew_lease(claimed)
        retracted_at = _send(client, claimed, publication)
        crash_point("after_target_response", kind=RETRACT)
        back = call_service(lambda: client.read_back(publication.external_id))
    if not back.retracted:
        raise OperationFailed(
            FailureKind.SERVER_ERROR, f"the read-back of {publication.external_id} does not say retracted yet"
        )
    gone = _permalink_status(client, publication.permalink)
    reason = str(claimed.arguments["reason"])
    return Success(
        result={"external_id": publication.external_id, "retracted_at": retracted_at, "permalink_status": gone},
        finalize=lambda: do_record_retraction(
            publication, channel=claimed.channel, reason=reason, target_retracted_at=retracted_at
        ),
    )
