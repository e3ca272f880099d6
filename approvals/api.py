"""The JSON API's decisions: approve or request changes on exactly one revision and payload hash."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema

from approvals.actions import COMMENT_MAX_CHARS, check_also_publish, check_decide_revision
from approvals.models import Decision
from approvals.policies import get_policy_progress
from approvals.schedules import CANCEL_REASON_MAX_CHARS, check_cancel_schedule, check_reschedule_publication
from approvals.selectors import get_revision_schedule, get_schedule_of
from publishing.api.briefs import (
    BriefId,
    PolicyProgressOut,
    RevisionNumber,
    ScheduleOut,
    policy_progress_fields,
    schedule_out,
)
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


PUBLISH_AT = Field(
    None,
    max_length=64,
    pattern=NO_NUL,
    description="When to publish (docs/schedules.md): ISO 8601 with an offset (2027-03-28T10:00+02:00), or a "
    "local date and time read in `zone` (2027-03-28T10:00). Omitted: now. A time that the zone skips or shows "
    "twice is refused (give the offset); one up to GALLEY_SCHEDULE_PAST_GRACE_SECONDS ago publishes now.",
)
ZONE = Field(
    None,
    max_length=64,
    pattern=NO_NUL,
    description="The IANA zone `publish_at` is given in and shown in (Europe/Amsterdam); omitted: the site's.",
)


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
    publish_at: str | None = PUBLISH_AT
    zone: str | None = ZONE


class RescheduleIn(BodyIn):
    publish_at: str = Field(max_length=64, pattern=NO_NUL, description="The new time; as the decision's publish_at.")
    zone: str | None = ZONE


class CancelScheduleIn(BodyIn):
    reason: str = Field(
        min_length=1, max_length=CANCEL_REASON_MAX_CHARS, pattern=NO_NUL, description="Why: kept in the audit log."
    )


class ScheduleChangeOut(Schema):
    changed: bool = Field(description="False when it was so already: nothing was written.")
    schedule: ScheduleOut


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
    schedule: ScheduleOut | None = Field(
        description="When the revision publishes, as its completing approval decided; null for now."
    )


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
            publish_at=data.publish_at,
            zone=data.zone,
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
            schedule=schedule_out(schedule) if (schedule := get_revision_schedule(approval.revision)) else None,
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


@router.post(
    "/briefs/{brief_id}/revisions/{number}/schedule",
    response={200: ScheduleChangeOut, **WRITE_PROBLEMS},
    summary="Reschedule a scheduled publication",
)
def reschedule_publication(
    request: HttpRequest,
    brief_id: BriefId,
    number: RevisionNumber,
    data: RescheduleIn,
    idempotency_key: str = idempotency_key_header(),
) -> HttpResponse:
    """Move scheduled revision `number` to a new time on every channel of its approval (Approvers, not the
    revision's author), audited. 200 with the schedule; 400 for a bad time or zone, or a revision approved
    for now; 409 once a worker claimed any channel's publish ("already fired on web at …"), or when it was
    cancelled or superseded."""

    def write(user: User) -> tuple[int, ScheduleChangeOut]:
        schedule, changed = check_reschedule_publication(
            brief_id, revision_number=number, publish_at=data.publish_at, zone=data.zone, acting_user=user
        )
        return 200, ScheduleChangeOut(changed=changed, schedule=schedule_out(get_schedule_of(schedule)))

    return idempotent_post(request, idempotency_key, write)


@router.delete(
    "/briefs/{brief_id}/revisions/{number}/schedule",
    response={200: ScheduleChangeOut, **WRITE_PROBLEMS},
    summary="Cancel a scheduled publication",
)
def cancel_schedule(
    request: HttpRequest, brief_id: BriefId, number: RevisionNumber, data: CancelScheduleIn
) -> ScheduleChangeOut:
    """Cancel scheduled revision `number` on every channel, with a `reason` (Approvers), audited: it will not
    be published (a new revision, approved, publishes the story). 200; `changed` false when it was cancelled
    already. 409 once a worker claimed any channel's publish. Idempotent as a DELETE is: no Idempotency-Key."""
    user = request.auth  # type: ignore[attr-defined]
    # A write of its own: one transaction holds the locks, the cancellation and its audit record.
    with transaction.atomic(durable=True):
        schedule, changed = check_cancel_schedule(
            brief_id, revision_number=number, reason=data.reason, acting_user=user
        )
    return ScheduleChangeOut(changed=changed, schedule=schedule_out(get_schedule_of(schedule)))
