"""The `publish` and `verify` handlers, run by workers after the intent committed.

Each makes its network calls with no database transaction open and maps every target answer to a
failure kind (handlers.failures); the domain's writes go to publishing.actions.publications as
the Success's finalize, which runs in the fenced finalize transaction: the publication and its
verification — observed in the publish's own attempt, or else the intent of a verify operation —
commit together with the publish operation's success, or not at all (docs/invariants.md#i5).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from django.conf import settings

from publishing.actions.drift import do_record_republication
from publishing.actions.publications import do_record_publication, do_record_verification
from publishing.clients import target
from publishing.clients.channels import client_for
from publishing.handlers.failures import call_service
from publishing.identities import PUBLISH, publish_key, revision_number
from publishing.models import Brief, Publication, Revision
from publishing.selectors.publications import get_publication, list_newer_sent_revisions
from publishing.selectors.publish_checks import PublishChecks, get_publish_checks
from publishing.story import body_text, render_story
from publishing.verification import shows_body, shows_title
from workers.actions.claims import renew_lease
from workers.actions.gates import reserve_send
from workers.crashpoints import crash_point
from workers.errors import FailureKind, OperationFailed, Superseded
from workers.registry import ClaimedOperation, Success

logger = logging.getLogger(__name__)


def _target_state(receipt: target.Receipt | None) -> dict[str, Any] | None:
    return dataclasses.asdict(receipt) if receipt is not None else None


def _check_receipt(claimed: ClaimedOperation, receipt: target.Receipt) -> target.Receipt:
    if receipt.payload_hash != claimed.payload_hash:
        raise OperationFailed(
            FailureKind.KEY_CONFLICT,
            f"the target holds {claimed.key} with payload {receipt.payload_hash[:12]}…, "
            f"not the approved {claimed.payload_hash[:12]}…",
            conflicting_payload_hash=receipt.payload_hash,
            target_state=_target_state(receipt),
        )
    return receipt


def _account_for_newer(checks: PublishChecks) -> None:
    """Stop (superseded) when Galley itself published, or may have sent, a newer revision."""
    public_id = checks.revision.brief.public_id
    if checks.newer_published is not None:
        raise Superseded(f"revision {checks.newer_published} of {public_id} is already published")
    # Never send revision N once a newer revision's publish may have reached the target (it has
    # made an attempt): in the normal order the newer one waits for this one, so this only
    # stops an older intent revived late, e.g. by an operator.
    if checks.newer_attempted is not None:
        raise Superseded(f"revision {checks.newer_attempted} of {public_id} may already be at the target")


def _refuse_retracted(claimed: ClaimedOperation, number: int) -> None:
    """Galley's own fence (docs/retractions.md): a retracted revision, or an older one, is never sent again,
    whatever intent was left for it; only a newer revision publishes the brief again."""
    if Brief.objects.filter(public_id=claimed.subject_id, retracted_revision_number__gte=number).exists():
        raise Superseded(f"{claimed.subject_id} is retracted up to revision {number} or later")


def _approved_revision(claimed: ClaimedOperation, checks: PublishChecks) -> Revision:
    """The revision to send, if its hash is the operation's and an approval of exactly it exists
    (docs/invariants.md#i3); otherwise a dead letter with the reason."""
    revision = checks.revision
    if revision.payload_hash != claimed.payload_hash:
        raise OperationFailed(
            FailureKind.INVALID,
            f"{claimed.key} carries hash {claimed.payload_hash[:12]}…, revision {revision.number} has another",
        )
    if not checks.approved:
        raise OperationFailed(
            FailureKind.INVALID,
            f"no approval of revision {revision.number} with hash {revision.payload_hash[:12]}… exists; "
            "refusing to publish",
        )
    return revision


def _send(
    client: target.TargetClient, claimed: ClaimedOperation, revision: Revision, *, republish: bool = False
) -> tuple[target.Receipt, bool]:
    """The side effect: revision's payload to the target under the operation's key (no transaction open)."""
    reserve_send(claimed)
    return call_service(
        lambda: client.publish(
            operation_key=claimed.key,
            brief_id=claimed.subject_id,
            revision=revision.number,
            payload_hash=revision.payload_hash,
            payload=revision.payload,
            rendered=render_story(revision.payload),
            republish=republish,
        )
    )


def handle_publish(claimed: ClaimedOperation) -> Success:
    """Send revision N with an approval of exactly N and its hash; never after a newer one was published.

    An ambiguous attempt (the previous one may have reached the target) looks the key up
    first and adopts what the target holds instead of sending again.
    """
    started = time.monotonic()
    number = revision_number(claimed)
    _refuse_retracted(claimed, number)
    checks = get_publish_checks(claimed.subject_id, number, channel=claimed.channel)
    revision = _approved_revision(claimed, checks)
    client = client_for(claimed.channel)
    if claimed.ambiguous:
        found = call_service(lambda: client.lookup(claimed.key))
        if found is not None:
            logger.info("adopting the target's existing publication", extra=claimed.log_extra())
            return _published(client, claimed, revision, _check_receipt(claimed, found), applied=False, started=started)
        # The lookup took a network round trip: what Galley itself did meanwhile is read again.
        checks = get_publish_checks(claimed.subject_id, number, channel=claimed.channel)
    _account_for_newer(checks)
    # Fence check immediately before the side effect: a worker that lost its lease stops here.
    renew_lease(claimed)
    try:
        receipt, applied = _send(client, claimed, revision)
    except OperationFailed as failure:
        if failure.kind == FailureKind.KEY_CONFLICT:
            # Record what the target holds under our key, for the operator who resolves it.
            held = call_service(lambda: client.lookup(claimed.key))
        elif failure.kind == FailureKind.STALE_REVISION:
            # The target's fence refused this revision: fine when Galley's own newer revision is
            # there (a race with it); otherwise the target holds something Galley cannot account
            # for, and an operator decides. What it holds under Galley's key for that revision,
            # if anything, is recorded for the comparison.
            _account_for_newer(get_publish_checks(claimed.subject_id, number, channel=claimed.channel))
            current = int((failure.target_state or {})["revision"])
            held = call_service(lambda: client.lookup(publish_key(claimed.subject_id, current, claimed.channel)))
        else:
            raise
        raise OperationFailed(
            failure.kind,
            failure.message,
            http_status=failure.http_status,
            conflicting_payload_hash=held.payload_hash if held is not None else "",
            target_state=_target_state(held) or failure.target_state,
        ) from failure
    crash_point("after_target_response", kind=PUBLISH)
    return _published(client, claimed, revision, _check_receipt(claimed, receipt), applied=applied, started=started)


def _record_shows(claimed: ClaimedOperation, receipt: target.Receipt) -> bool:
    """Whether a read-back shows the approved revision: its record holds the approved hash and its live
    content (where the target reports it) shows exactly that, and it is not retracted."""
    live = receipt.live
    return (
        not receipt.retracted
        and receipt.payload_hash == claimed.payload_hash
        and (live is None or live.shows(claimed.payload_hash))
    )


def _page_shows(page_text: str, payload: dict[str, Any]) -> bool:
    """Whether the permalink's page shows the approved title and the body's text (docs/invariants.md#i10)."""
    return shows_title(page_text, str(payload["title"])) and shows_body(
        page_text, rendered=body_text(payload), source=str(payload["body"])
    )


def _observed_at_once(
    client: target.TargetClient,
    claimed: ClaimedOperation,
    revision: Revision,
    receipt: target.Receipt,
    *,
    started: float,
) -> target.Receipt | None:
    """The verification in the publish's own attempt, once the target answered (no transaction open):
    the read-back by id and the permalink's page, exactly what a verify operation observes
    (docs/invariants.md#i10). Returns the read-back when both show the approved revision; None when
    either is not there yet or shows something else (a CMS's cache, a slow page, a failed call): then
    a durable verify operation observes it, with its own retries, and tells a mismatch, a drift or a
    newer revision shown apart.

    The lease covers an attempt's first two calls (settings: lease > 2.5 x the target's timeout); these
    two more renew it first when what is left of it might not cover them (slow calls before)."""
    if settings.GALLEY_LEASE_SECONDS - (time.monotonic() - started) < 2.5 * client.timeout:
        renew_lease(claimed)
    try:
        read = call_service(lambda: client.read_back(receipt.id))
        if _record_shows(claimed, read):
            page_text = call_service(lambda: client.fetch_permalink(read.permalink))
            if _page_shows(page_text, revision.payload):
                return read
    except OperationFailed as failure:
        logger.info(
            "not observed in the publish's attempt (%s: %s); a verify operation follows",
            failure.kind,
            failure.message,
            extra=claimed.log_extra(),
        )
        return None
    logger.info("not observed in the publish's attempt yet; a verify operation follows", extra=claimed.log_extra())
    return None


def _published(
    client: target.TargetClient,
    claimed: ClaimedOperation,
    revision: Revision,
    receipt: target.Receipt,
    *,
    applied: bool,
    started: float,
) -> Success:
    observed = _observed_at_once(client, claimed, revision, receipt, started=started)
    result: dict[str, Any] = {
        "external_id": receipt.id,
        "permalink": receipt.permalink,
        "first_application": applied,
        "verified_inline": observed is not None,
    }
    if observed is not None:
        result["live_hash"] = observed.live.hash if observed.live is not None else None
    return Success(
        result=result,
        finalize=lambda: do_record_publication(
            revision,
            channel=claimed.channel,
            publish_operation_id=claimed.operation_id,
            external_id=receipt.id,
            permalink=receipt.permalink,
            observed=observed is not None,
        ),
    )


def _superseded_if_newer_shown(
    claimed: ClaimedOperation,
    publication: Publication,
    *,
    shown_hash: str = "",
    shown_revision: int = 0,
    page_text: str | None = None,
) -> None:
    """Raise Superseded when what the target shows for this publication is a newer revision of the same
    brief that Galley published or sent (its finalize may not have recorded it yet): a target that
    keeps one record or page per brief (WordPress: one post, one permalink) shows that one now, and it
    is verified on its own. Shown means its payload hash, a revision number at least its own, or (on
    the permalink page) its title."""
    for newer in list_newer_sent_revisions(publication, public_id=claimed.subject_id, channel=claimed.channel):
        if (
            newer.payload_hash == shown_hash
            or shown_revision >= newer.number
            or (page_text is not None and shows_title(page_text, newer.title))
        ):
            raise Superseded(
                f"the target shows revision {newer.number} of {claimed.subject_id}, published since; "
                "that revision is verified on its own"
            )


def _superseded_if_retracted(claimed: ClaimedOperation, receipt: target.Receipt) -> None:
    """A publication the target reports retracted shows nothing by design (docs/retractions.md): a
    verification or drift check of it that was already under way when it was taken down is over."""
    if receipt.retracted:
        raise Superseded(f"{claimed.subject_id} was retracted at the target ({receipt.retracted_at})")


def _observe(
    claimed: ClaimedOperation, publication: Publication, receipt: target.Receipt, *, accepted_hash: str = ""
) -> None:
    """Raise unless the target's read-back shows the approved revision: its record holds the approved
    hash, and its live content (when the target reports it) is exactly that revision, published, or
    what an operator accepted it showing (`accepted_hash`). What is a newer revision Galley published is
    superseded; a record with another hash is a verification mismatch; a live content that differs
    from the record is drift (an edit at the target)."""
    if receipt.payload_hash != claimed.payload_hash:
        _superseded_if_newer_shown(
            claimed, publication, shown_hash=receipt.payload_hash, shown_revision=receipt.revision
        )
        raise OperationFailed(
            FailureKind.VERIFICATION_MISMATCH,
            f"read-back of {publication.external_id} shows payload {receipt.payload_hash[:12]}…, "
            f"not the approved {claimed.payload_hash[:12]}…",
            conflicting_payload_hash=receipt.payload_hash,
            target_state=_target_state(receipt),
        )
    live = receipt.live
    if live is None or live.shows(claimed.payload_hash) or (accepted_hash and live.shows(accepted_hash)):
        return
    _superseded_if_newer_shown(claimed, publication, shown_hash=live.hash, shown_revision=live.revision)
    raise OperationFailed(
        FailureKind.DRIFT,
        f"the target holds revision {publication.revision.number} as published, but its post now shows other "
        f"content (live hash {live.hash[:12]}…, status {live.status}): it was edited at the target",
        conflicting_payload_hash=live.hash,
        target_state=_target_state(receipt),
    )


def handle_verify(claimed: ClaimedOperation) -> Success:
    """Done means observed (docs/invariants.md#i10): the target's read-back holds the approved payload hash
    (and, where the target reports what it shows now, shows exactly it: no drift), and the permalink
    answers with a page that shows the approved title and the body's text. Only what the protocol
    defines (docs/target-protocol.md) is used: no extra markup on the page. What the target shows of a
    newer revision Galley published ends the verification as superseded, never as a failure."""
    publication = get_publication(claimed.arguments["publish_key"])
    client = client_for(claimed.channel)
    receipt = call_service(lambda: client.read_back(publication.external_id))
    _superseded_if_retracted(claimed, receipt)
    _observe(claimed, publication, receipt)
    page_text = call_service(lambda: client.fetch_permalink(receipt.permalink))
    if not _page_shows(page_text, publication.revision.payload):
        _superseded_if_newer_shown(claimed, publication, page_text=page_text)
        raise OperationFailed(
            FailureKind.SERVER_ERROR,
            f"the permalink {receipt.permalink} does not show the approved title and body yet",
        )
    return Success(
        result={
            "permalink": receipt.permalink,
            "verified_hash": receipt.payload_hash,
            "title_shown": True,
            "body_shown": True,
            "live_hash": receipt.live.hash if receipt.live is not None else None,
        },
        finalize=lambda: do_record_verification(publication),
    )


def handle_drift_check(claimed: ClaimedOperation) -> Success:
    """The periodic check of a published revision (publishing.tasks.check_drift): does the target
    still show it? A drift ends the operation in conflict, recorded with what the target shows, for an
    operator (docs/wordpress.md#drift). Over (superseded) once a newer revision is published."""
    number = revision_number(claimed)
    _account_for_newer(get_publish_checks(claimed.subject_id, number, channel=claimed.channel))
    publication = get_publication(publish_key(claimed.subject_id, number, claimed.channel))
    client = client_for(claimed.channel)
    receipt = call_service(lambda: client.read_back(publication.external_id))
    _superseded_if_retracted(claimed, receipt)
    _observe(claimed, publication, receipt, accepted_hash=str(claimed.arguments.get("accepted_hash", "")))
    return Success(result={"live_hash": receipt.live.hash if receipt.live is not None else None, "drift": False})


def handle_republish(claimed: ClaimedOperation) -> Success:
    """Write the published revision N over a drift again (an operator's choice), under the republish's
    own key; the target accepts it only for its current revision with N's hash. The same checks as a
    publish: an approval of exactly N and its hash, nothing newer published or sent. An ambiguous
    attempt looks its key up first. Its verification then observes the post showing N again."""
    number = revision_number(claimed)
    _refuse_retracted(claimed, number)
    checks = get_publish_checks(claimed.subject_id, number, channel=claimed.channel)
    revision = _approved_revision(claimed, checks)
    client = client_for(claimed.channel)
    receipt = call_service(lambda: client.lookup(claimed.key)) if claimed.ambiguous else None
    if receipt is None:
        if claimed.ambiguous:
            checks = get_publish_checks(claimed.subject_id, number, channel=claimed.channel)
        _account_for_newer(checks)
        renew_lease(claimed)
        receipt, _applied = _send(client, claimed, revision, republish=True)
    receipt = _check_receipt(claimed, receipt)
    return Success(
        result={"external_id": receipt.id, "permalink": receipt.permalink},
        finalize=lambda: do_record_republication(
            revision,
            channel=claimed.channel,
            republish_operation_id=claimed.operation_id,
            republish_key=claimed.key,
            conflict_id=int(claimed.arguments["conflict"]),
            external_id=receipt.id,
        ),
    )
