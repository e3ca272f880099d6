"""Reconciling a channel with Galley's records after a failover (docs/operations.md#failover).

A failover to a replica that had not received every commit (asynchronous replication) loses the
newest transactions: an approval with its publish intent, or the finalize that recorded a send. The
target still holds what was sent. Per brief, the target is asked what it holds (the look-up by brief,
docs/target-protocol.md#look-up-by-brief); when Galley has not recorded that revision, each revision down
to the newest one Galley has recorded is looked up by its publish key. Each application found is:

- in flight, when Galley still has its publish operation unfinished: that operation's own attempt
  finds it by key and adopts it (publishing.handlers.publications), so nothing is done here;
- adopted (publishing.actions.adoption), when Galley has the revision with the hash the target holds:
  a Publication, never a second post; with no approval of it left in Galley, a lost approval too, told to
  the operators (an audit record and a warning) to be approved again;
- unaccounted, when Galley has no such revision or another hash under that key: for an operator.

Walking down stops at the newest revision Galley recorded: WAL replays in commit order, so a replica
that holds the record of revision N's send holds everything committed before it, older sends included.
Network calls are made with no transaction open; each adoption is a transaction of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction

from publishing.actions.adoption import do_adopt_application
from publishing.clients.channels import client_for
from publishing.identities import publish_key
from publishing.models import Brief, Publication, Revision
from publishing.selectors.publish_checks import get_publish_checks
from workers.models import UNFINISHED_STATUSES, Operation

logger = logging.getLogger(__name__)


@dataclass
class ChannelReconciliation:
    """What one channel's reconciliation found, counted per application (a brief and revision held)."""

    channel: str
    briefs: int = 0  # briefs asked about
    held: int = 0  # briefs the target holds a revision of
    recorded: int = 0  # briefs whose newest revision held Galley had recorded already
    adopted: int = 0  # applications recorded by this run, lost approvals included
    in_flight: int = 0  # applications whose publish operation Galley still has unfinished
    lost_approvals: list[str] = field(default_factory=list)  # publish keys held with no approval left in Galley
    unaccounted: list[str] = field(default_factory=list)  # publish keys held that Galley has no revision for

    def __str__(self) -> str:
        return (
            f"{self.channel}: briefs={self.briefs} held={self.held} recorded={self.recorded} "
            f"adopted={self.adopted} lost_approvals={len(self.lost_approvals)} in_flight={self.in_flight} "
            f"unaccounted={len(self.unaccounted)}"
        )


def reconcile_channel(slug: str, *, brief_ids: list[str] | None = None) -> ChannelReconciliation:
    """Compare what channel `slug`'s target holds of each brief (or of `brief_ids`) with Galley's records,
    adopting what Galley lost. Idempotent: a second run adopts nothing more. Raises TargetError when the
    target cannot answer (nothing is left half-done: every adoption committed on its own)."""
    client = client_for(slug)
    found = ChannelReconciliation(channel=slug)
    briefs = Brief.objects.order_by("id")
    if brief_ids is not None:
        briefs = briefs.filter(public_id__in=brief_ids)
    for public_id in briefs.values_list("public_id", flat=True).iterator():
        found.briefs += 1
        held = client.held_of_brief(public_id)
        if held is None:
            continue
        found.held += 1
        for number in range(held.revision, 0, -1):
            key = publish_key(public_id, number, slug)
            if Publication.objects.filter(operation_key=key).exists():
                if number == held.revision:
                    found.recorded += 1
                break
            receipt = client.lookup(key)
            if receipt is None:
                continue  # never sent: an older revision nobody approved, or one superseded unsent
            _account(
                found,
                public_id=public_id,
                number=number,
                key=key,
                payload_hash=receipt.payload_hash,
                external_id=receipt.id,
                permalink=receipt.permalink,
            )
    return found


def _account(
    found: ChannelReconciliation,
    *,
    public_id: str,
    number: int,
    key: str,
    payload_hash: str,
    external_id: str,
    permalink: str,
) -> None:
    log = {"brief": public_id, "revision": number, "channel": found.channel, "operation_key": key}
    operation = Operation.objects.filter(key=key).only("status").first()
    if operation is not None and operation.status in UNFINISHED_STATUSES:
        found.in_flight += 1
        return
    try:
        checks = get_publish_checks(public_id, number, channel=found.channel)
    except Revision.DoesNotExist:
        checks = None
    if checks is None or checks.revision.payload_hash != payload_hash:
        logger.warning("the target holds an application Galley has no revision for", extra=log)
        found.unaccounted.append(key)
        return
    # Lost with the old primary when neither the approval nor the intent it wrote survived; an
    # operation that ended without its publication (cancelled, dead) had its approval.
    approval_lost = operation is None and not checks.approved
    with transaction.atomic(durable=True):
        adopted = do_adopt_application(
            checks.revision,
            channel=found.channel,
            external_id=external_id,
            permalink=permalink,
            approval_lost=approval_lost,
        )
    if not adopted:
        return
    found.adopted += 1
    logger.info("adopted the target's application", extra=log)
    if approval_lost:
        logger.warning("approval lost: the target holds the revision, Galley no approval of it", extra=log)
        found.lost_approvals.append(key)
