"""The JSON API's decisions: approve or request changes on exactly one revision and payload hash."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema

from approvals.actions import COMMENT_MAX_CHARS, check_decide_revision
from approvals.models import Decision
from publishing.api.briefs import BriefId, RevisionNumber
from publishing.api.common import (
    NO_NUL,
    PAYLOAD_HASH,
    WRITE_PROBLEMS,
    BodyIn,
    idempotency_key_header,
    idempotent_post,
)

router = Router(tags=["decisions"])


class DecisionIn(BodyIn):
    decision: Decision
    payload_hash: str = Field(description="The payload hash of the revision you reviewed.", pattern=PAYLOAD_HASH)
    comment: str = Field("", max_length=COMMENT_MAX_CHARS, pattern=NO_NUL)


class DecisionOut(Schema):
    brief_id: str
    revision: int
    payload_hash: str
    decision: Decision
    approver: str
    comment: str
    created_at: datetime


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

    201 with the decision; the same decision again answers 200 with the first. An approval writes
    the publish intent in the same transaction. 409 (naming `current_revision` and
    `current_payload_hash`) when the revision is no longer current or the hash is not its own;
    403 for your own revision.
    """

    def write(user: User) -> tuple[int, DecisionOut]:
        approval, created = check_decide_revision(
            brief_id,
            revision_number=number,
            payload_hash=data.payload_hash,
            decision=data.decision,
            comment=data.comment,
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
        )
        return (201 if created else 200), out

    return idempotent_post(request, idempotency_key, write)
