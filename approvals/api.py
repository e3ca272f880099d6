"""The JSON API's decisions: approve or request changes on exactly one revision and payload hash."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema

from approvals.actions import COMMENT_MAX_CHARS, check_also_publish, check_decide_revision
from approvals.models import Decision
from approvals.policies import get_policy_progress
from publishing.api.briefs import BriefId, PolicyProgressOut, RevisionNumber, policy_progress_fields
from publishing.api.common import (
    NO_NUL,
    PAYLOAD_HASH,
    WRITE_PROBLEMS,
    BodyIn,
    idempotency_key_header,
    idempotent_post,
)

router = Router(tags=["decisions"])


CHANNEL_SLUG = r"^[a-z0-9][a-z0-9-]*$"


class DecisionIn(BodyIn):
    decision: Decision
    payload_hash: str = Field(description="The payload hash of the revision you reviewed.", pattern=PAYLOAD_HASH)
    comment: str = Field("", max_length=COMMENT_MAX_CHARS, pattern=NO_NUL)
    channels: list[Annotated[str, Field(max_length=50, pattern=CHANNEL_SLUG)]] | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="An approval's channel slugs (GET /channels); omitted: the brief's channels. The approval "
        "freezes them: a channel added later receives this revision only through POST …/channels.",
    )


class ChannelIn(BodyIn):
    channel: str = Field(
        description="The slug of the channel to publish to as well.", max_length=50, pattern=CHANNEL_SLUG
    )


class DecisionOut(PolicyProgressOut):
    brief_id: str
    revision: int
    payload_hash: str
    decision: Decision
    approver: str
    comment: str
    created_at: datetime
    channels: list[str] = Field(description="The channels the approval publishes to (empty for a request for changes).")


class ChannelAddedOut(Schema):
    brief_id: str
    revision: int
    channel: str
    added: bool = Field(description="False when the channel already had the revision: nothing was written.")


@router.post(
    "/briefs/{brief_id}/revisions/{number}/decisions",
    response={201: DecisionOut, 200: DecisionOut, **WRITE_PROBLEMS},
    summary="Approve or request changes",
)
def decide_revision(
    request: HttpRequest,
    brief_id: BriefId,
    number: RevisionNumber,
    data: DecisionIn,
    idempotency_key: str = idempotency_key_header(),
) -> HttpResponse:
    """Record your decision (Approvers) on revision `number` as reviewed with `payload_hash`.

    201 with the decision and where the revision now stands under its approval policy; the same
    decision again answers 200 with the first. The approval that completes the policy writes the
    publish intents in the same transaction; one that does not says who is still needed. 409
    (naming `current_revision` and `current_payload_hash`) when the revision is no longer current or
    the hash is not its own; 403 for your own revision.
    """

    def write(user: User) -> tuple[int, DecisionOut]:
        approval, created = check_decide_revision(
            brief_id,
            revision_number=number,
            payload_hash=data.payload_hash,
            decision=data.decision,
            comment=data.comment,
            channels=data.channels,
            acting_user=user,
        )
        out = DecisionOut(
            brief_id=approval.revision.brief.public_id,
            revision=approval.revision.number,
            payload_hash=approval.payload_hash,
            decision=Decision(approval.decision),
            approver=approval.approver.get_username(),
            comment=approval.comment,
            created_at=approval.created_at,
            channels=list(approval.channel_rows.values_list("channel__slug", flat=True)),
            **policy_progress_fields(get_policy_progress(approval.revision)),
        )
        return (201 if created else 200), out

    return idempotent_post(request, idempotency_key, write)


@router.post(
    "/briefs/{brief_id}/revisions/{number}/channels",
    response={201: ChannelAddedOut, 200: ChannelAddedOut, **WRITE_PROBLEMS},
    summary="Also publish an approved revision to a channel",
)
def also_publish(
    request: HttpRequest,
    brief_id: BriefId,
    number: RevisionNumber,
    data: ChannelIn,
    idempotency_key: str = idempotency_key_header(),
) -> HttpResponse:
    """Send approved revision `number` to `channel` too (Approvers): a channel its approval did not name,
    added or enabled since. Audited; the channel gets exactly one publication of it. 201 when added,
    200 when the channel already had it; 400 for an unknown or disabled channel or an unapproved
    revision; 403 for your own revision; 409 when a newer revision is on its way to that channel."""

    def write(user: User) -> tuple[int, ChannelAddedOut]:
        added = check_also_publish(brief_id, revision_number=number, channel=data.channel, acting_user=user)
        out = ChannelAddedOut(brief_id=brief_id, revision=number, channel=data.channel, added=added)
        return (201 if added else 200), out

    return idempotent_post(request, idempotency_key, write)
