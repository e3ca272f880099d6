"""Briefs, their revisions and their publication state."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import OuterRef, Q, Subquery
from django.http import HttpRequest, HttpResponse
from ninja import Field, Path, Query, Router, Schema
from pydantic import StrictBool

from approvals.policies import PolicyProgress, get_policy_progress
from approvals.selectors import Schedule, get_revision_schedule, get_schedule
from publishing.actions.briefs import check_create_brief, check_update_source_material
from publishing.actions.legal import check_flag_legal_review, check_lift_legal_review
from publishing.actions.retractions import check_retract_brief
from publishing.actions.revisions import check_create_revision, check_use_suggestion
from publishing.api.channels import ChannelReceiptOut, receipt_out
from publishing.api.common import (
    CURSOR,
    NO_NUL,
    PROBLEMS,
    TEXT,
    WRITE_PROBLEMS,
    BodyIn,
    decode_cursor,
    encode_cursor,
    idempotency_key_header,
    idempotent_post,
)
from publishing.errors import PermissionRefused
from publishing.models import Brief, BriefStatus, Publication, Revision, SummaryRun
from publishing.roles import can_view
from publishing.selectors.briefs import BRIEF_LIST_ORDER, access_brief
from publishing.selectors.channels import get_channel_receipts, list_brief_channel_slugs
from publishing.selectors.corrections import list_corrections
from publishing.selectors.publications import get_publication_state
from publishing.selectors.retractions import list_channel_retractions
from publishing.selectors.revisions import get_latest_revision, get_revision, list_revisions
from publishing.selectors.summaries import get_pipeline_view
from publishing.story import (
    BYLINE_MAX_CHARS,
    CORRECTION_NOTE_MAX_CHARS,
    SECTION_MAX_CHARS,
    STANDFIRST_MAX_CHARS,
    TAG_MAX_CHARS,
    TAGS_MAX,
    TITLE_MAX_CHARS,
    correction_note,
    story_fields,
)
from publishing.summary_rules import SuggestionTake
from publishing.validation import MAX_DB_INT

router = Router(tags=["briefs"])

# Path parameters as the database can hold them: any other value is a 400 that says so, never a
# query PostgreSQL refuses (a NUL character, a number beyond its integer).
BriefId = Annotated[str, Path(pattern=r"^[^\x00]{1,100}$", description="e.g. brief-042")]
RevisionNumber = Annotated[int, Path(ge=1, le=MAX_DB_INT)]
RunNumber = Annotated[
    int, Path(ge=1, le=MAX_DB_INT, description="A summary run's number, e.g. a brief's suggestion.run_number")
]

MAX_PAGE = 100


class BriefIn(BodyIn):
    title: str = Field(min_length=1, max_length=TITLE_MAX_CHARS, pattern=TEXT)
    source_material: str = Field("", pattern=NO_NUL, description="Up to GALLEY_MAX_BODY_CHARS characters.")
    desk: str | None = Field(
        None,
        max_length=50,
        pattern=NO_NUL,
        description="A desk's slug (its policy says who approves); left out or null: the default desk.",
    )


class BriefOut(Schema):
    id: str
    title: str
    status: BriefStatus
    author: str
    desk: str = Field(description="Its desk's slug: the desk's policy says how many approvals it needs, from whom.")
    legal_review: bool = Field(description="Flagged as needing legal review: its approval also needs Legal's.")
    latest_revision: int | None
    published_revision: int | None
    created_at: datetime
    updated_at: datetime


class SuggestionOut(Schema):
    run_number: int = Field(description="Pass to use-suggestion to make it the next revision.")
    title: str
    standfirst: str = Field(description="Empty when the run has none (runs from before the standfirst step).")
    body: str


class CorrectionReachedOut(Schema):
    channel: str = Field(description="The channel's slug.")
    name: str
    permalink: str
    published_at: datetime | None = Field(description="When the channel applied the correction.")
    verified_at: datetime | None = Field(description="When a read-back showed it there; null until then.")


class CorrectionOut(Schema):
    revision: int = Field(description="The revision that is the correction.")
    note: str = Field(description="Its public correction note.")
    created_at: datetime = Field(description="When it was written.")
    author: str
    channels: list[CorrectionReachedOut] = Field(
        description="The channels it reached (applied there), the primary one first; empty until one did."
    )


class ChannelFiringOut(Schema):
    channel: str
    status: str = Field(description="The channel's publish operation's status (pending until it fires).")
    fired_at: datetime | None = Field(description="When its first attempt started (database clock); null before.")
    lateness_seconds: float | None = Field(description="fired_at minus publish_at; null before it fired.")


class ScheduleOut(Schema):
    """A revision's scheduled publication (docs/schedules.md)."""

    revision: int
    publish_at: datetime = Field(description="T in UTC: no channel receives the revision before it.")
    zone: str = Field(description="The IANA zone T was given in.")
    local_time: str = Field(description="T in that zone, ISO 8601 with its offset.")
    state: str = Field(description="waiting | fired | cancelled | superseded")
    channels: list[ChannelFiringOut]
    cancelled_at: datetime | None
    cancelled_by: str | None
    cancel_reason: str


def schedule_out(schedule: Schedule) -> ScheduleOut:
    return ScheduleOut(
        revision=schedule.revision,
        publish_at=schedule.publish_at,
        zone=schedule.zone,
        local_time=schedule.local.isoformat(),
        state=schedule.state,
        channels=[
            ChannelFiringOut(
                channel=firing.channel,
                status=firing.status,
                fired_at=firing.fired_at,
                lateness_seconds=firing.lateness.total_seconds() if firing.lateness is not None else None,
            )
            for firing in schedule.channels
        ],
        cancelled_at=schedule.cancelled_at,
        cancelled_by=schedule.cancelled_by or None,
        cancel_reason=schedule.cancel_reason,
    )


class BriefDetailOut(BriefOut):
    source_material: str
    source_hash: str
    suggestion: SuggestionOut | None = Field(
        None,
        description="The latest summary run's draft when an editor wrote a revision first, so that it was "
        'offered instead of written (the web UI\'s "AI suggestion").',
    )
    channels: list[str] = Field(description="Where its next approval publishes: the channels' slugs.")
    receipts: list[ChannelReceiptOut] = Field(
        description="The newest revision an approval sent: one receipt per channel it was sent to (its approval "
        "froze that set); empty before any was sent."
    )
    retraction_reason: str = Field(description="Why the last retraction took it down; empty when never retracted.")
    retractions: list[RetractionOut] = Field(
        description="One per channel and revision a retraction took (or is taking) down; empty when never retracted."
    )
    corrections: list[CorrectionOut] = Field(
        description="Its corrections, newest first (docs/editorial.md#corrections), each with the channels it reached."
    )
    schedule: ScheduleOut | None = Field(
        None, description="The newest scheduled revision's schedule; null when every approval published now."
    )


class RetractionOut(Schema):
    channel: str
    revision: int = Field(description="The revision the channel held, taken down with any older one there.")
    status: str = Field(description="The retract operation's status: pending, running, succeeded, conflict…")
    label: str
    due_at: datetime | None = Field(description="When it is due (a scheduled retraction); null: at once.")
    retracted_at: datetime | None = Field(description="When it was observed there; null until then.")


class RetractionIn(BodyIn):
    reason: str = Field(pattern=NO_NUL, max_length=2000, description="Why the brief is taken down; required.")
    confirm: bool = Field(description="Must be true: the retraction takes the brief down on every channel.")
    retract_at: datetime | None = Field(
        None, description="When (ISO 8601 with a zone), on the database clock; absent or null: now."
    )


class RetractionRequestOut(Schema):
    brief_id: str
    status: BriefStatus
    reason: str
    retractions: list[RetractionOut]


class LegalReviewOut(Schema):
    brief_id: str
    legal_review: bool = Field(description="The flag as it is now.")
    changed: bool = Field(description="False when the brief already was as asked: nothing was written.")


class SourceMaterialIn(BodyIn):
    source_material: str = Field(pattern=NO_NUL, description="Up to GALLEY_MAX_BODY_CHARS characters; may be empty.")


class BriefPage(Schema):
    items: list[BriefOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class BriefFilters(Schema):
    status: BriefStatus | None = None
    q: str | None = Field(None, description="Part of the title, or a brief id.", max_length=200, pattern=NO_NUL)
    cursor: str | None = Field(None, pattern=CURSOR, description="A page's `next_cursor`, as given.")
    limit: int = Field(20, ge=1, le=MAX_PAGE)


# A line break inside a one-line field or a comma inside a tag is refused by publishing.story, in words
# ("Byline must be a single line."), where a schema pattern would only quote itself.
Tag = Annotated[str, Field(max_length=TAG_MAX_CHARS, pattern=NO_NUL)]


class RevisionIn(BodyIn):
    """A story (publishing/story.py): the headline and the Markdown body, and optionally the standfirst,
    byline, section and tags. An optional field left out, null or empty is no part of the revision."""

    base_revision: int = Field(ge=0, le=MAX_DB_INT, description="The revision your text starts from (0 for the first).")
    title: str = Field(min_length=1, max_length=TITLE_MAX_CHARS, pattern=TEXT, description="The headline: one line.")
    standfirst: str | None = Field(
        None, max_length=STANDFIRST_MAX_CHARS, pattern=NO_NUL, description="One or two sentences under the headline."
    )
    body: str = Field(
        min_length=1, pattern=TEXT, description="Markdown (raw HTML is shown as text); up to GALLEY_MAX_BODY_CHARS."
    )
    byline: str | None = Field(None, max_length=BYLINE_MAX_CHARS, pattern=NO_NUL, description="One line.")
    section: str | None = Field(None, max_length=SECTION_MAX_CHARS, pattern=NO_NUL, description="One line.")
    tags: list[Tag] | None = Field(
        None, max_length=TAGS_MAX, description="Words without commas; repeats (in any case) are kept once."
    )
    # Strict: "yes" or 1 is no mark, and a 400, as the schema's boolean says.
    correction: StrictBool | None = Field(
        None,
        description="Marks the revision a correction of what the brief's channels hold (a brief published "
        "somewhere only); it then goes to every channel holding an earlier revision. Needs `correction_note`.",
    )
    correction_note: str | None = Field(
        None,
        max_length=CORRECTION_NOTE_MAX_CHARS,
        pattern=NO_NUL,
        description="A correction's public note, part of the published article; only with `correction`.",
    )


class RevisionOut(Schema):
    brief_id: str
    number: int
    title: str = Field(description="The headline.")
    standfirst: str = Field(
        description="Empty when the revision has none, as in every revision before structured stories."
    )
    body: str = Field(description="Markdown.")
    byline: str
    section: str
    tags: list[str]
    is_correction: bool = Field(description="The revision is a correction (its payload's `correction`).")
    correction_note: str = Field(description="A correction's public note; empty for any other revision.")
    payload: dict[str, Any] = Field(description="The revision's story as hashed: empty optional fields left out.")
    payload_hash: str
    author: str
    created_at: datetime


class PolicyOut(Schema):
    desk: str = Field(description="The desk's slug.")
    approvals_required: int = Field(description="Approvals from distinct approvers the revision needs.")
    required_groups: list[str] = Field(
        description="Groups each of which must approve it, by name (Legal when flagged)."
    )
    legal_review: bool = Field(description="The brief is flagged for legal review: Legal must approve.")
    described: str = Field(description='The policy in a sentence, e.g. "2 approvals from distinct approvers".')


class PolicyApprovalOut(Schema):
    approver: str
    decided_at: datetime


class PolicyProgressOut(Schema):
    """Where a revision stands under its approval policy (docs/policies.md)."""

    policy: PolicyOut = Field(
        description="The brief's policy as it stands; once completed, the one recorded with the completing approval."
    )
    approvals: list[PolicyApprovalOut] = Field(description="The approvals given on the revision, oldest first.")
    still_needed: str = Field(description='Who is still needed, in words ("1 more approval"); empty once complete.')
    complete: bool = Field(description="An approval completed the policy: it wrote the publish intents.")
    completed_by: str | None = Field(description="Whose approval completed it; null until one did.")


def policy_progress_fields(progress: PolicyProgress) -> dict[str, Any]:
    """A revision's PolicyProgressOut fields, to add to its representation or a decision's."""
    policy = progress.policy
    completed_by = progress.completed_by
    return PolicyProgressOut(
        policy=PolicyOut(
            desk=policy.desk.slug,
            approvals_required=policy.approvals_required,
            required_groups=list(policy.required_groups),
            legal_review=policy.legal_review,
            described=policy.describe(),
        ),
        approvals=[
            PolicyApprovalOut(approver=a.approver.get_username(), decided_at=a.created_at) for a in progress.approvals
        ],
        still_needed=progress.still_needed(),
        complete=progress.complete,
        completed_by=completed_by.get_username() if completed_by is not None else None,
    ).model_dump()


class RevisionDetailOut(RevisionOut, PolicyProgressOut):
    receipts: list[ChannelReceiptOut] = Field(
        description="One per channel an approval sent this revision to; empty when none did."
    )
    schedule: ScheduleOut | None = Field(
        None, description="When its approval publishes it (docs/schedules.md); null for now or not yet approved."
    )


class RevisionPage(Schema):
    items: list[RevisionOut]
    next_cursor: int | None = Field(description="Pass as `before` for the next page; null on the last page.")


class RevisionFilters(Schema):
    before: int | None = Field(None, ge=1, le=MAX_DB_INT, description="Only revisions with a smaller number.")
    limit: int = Field(20, ge=1, le=MAX_PAGE)


class OperationSummary(Schema):
    id: int
    key: str
    kind: str
    status: str
    attempts: int
    last_error: str


class PublicationOut(Schema):
    external_id: str
    permalink: str
    payload_hash: str
    created_at: datetime
    verified_at: datetime | None


class RevisionPublicationOut(Schema):
    revision: int
    payload_hash: str
    state: str = Field(description="none | publishing | published | failed | superseded | cancelled")
    label: str
    publication: PublicationOut | None
    operations: list[OperationSummary]


class PublicationStateOut(Schema):
    brief_id: str
    status: BriefStatus
    published_revision: int | None
    published: PublicationOut | None
    latest: RevisionPublicationOut | None


def brief_out(
    brief: Brief, *, latest_revision: int | None, detail: bool = False, suggestion: SuggestionOut | None = None
) -> BriefOut:
    out = BriefOut(
        id=brief.public_id,
        title=brief.title,
        status=BriefStatus(brief.status),
        author=brief.author.get_username(),
        desk=brief.desk.slug,
        legal_review=brief.legal_review,
        latest_revision=latest_revision,
        published_revision=brief.published_revision_number,
        created_at=brief.created_at,
        updated_at=brief.updated_at,
    )
    if detail:
        return BriefDetailOut(
            **out.model_dump(),
            source_material=brief.source_material,
            source_hash=brief.source_hash,
            suggestion=suggestion,
            channels=list_brief_channel_slugs(brief),
            receipts=[receipt_out(receipt) for receipt in get_channel_receipts(brief)],
            retraction_reason=brief.retraction_reason,
            retractions=retractions_out(brief),
            corrections=[CorrectionOut.model_validate(correction) for correction in list_corrections(brief)],
            schedule=schedule_out(schedule) if (schedule := get_schedule(brief)) else None,
        )
    return out


def retractions_out(brief: Brief) -> list[RetractionOut]:
    return [
        RetractionOut(
            channel=one.channel,
            revision=one.number,
            status=one.status,
            label=one.label,
            due_at=one.due_at,
            retracted_at=one.retracted_at,
        )
        for one in list_channel_retractions(brief)
    ]


def suggestion_out(brief: Brief) -> SuggestionOut | None:
    """What the brief page offers as "AI suggestion": the latest run's, once it completed."""
    pipeline = get_pipeline_view(brief)
    if pipeline is None or pipeline.run.status != SummaryRun.Status.COMPLETED:
        return None
    suggestion = pipeline.suggestion
    if suggestion is None:
        return None
    return SuggestionOut(
        run_number=pipeline.run.number,
        title=suggestion["title"],
        standfirst=suggestion.get("standfirst", ""),
        body=suggestion["body"],
    )


def revision_out(revision: Revision, *, public_id: str) -> RevisionOut:
    return RevisionOut(
        brief_id=public_id,
        number=revision.number,
        **story_fields(revision.payload),
        is_correction=revision.payload.get("correction") is True,
        correction_note=correction_note(revision.payload),
        payload=revision.payload,
        payload_hash=revision.payload_hash,
        author=revision.author.get_username(),
        created_at=revision.created_at,
    )


def publication_out(publication: Publication | None) -> PublicationOut | None:
    if publication is None:
        return None
    return PublicationOut(
        external_id=publication.external_id,
        permalink=publication.permalink,
        payload_hash=publication.payload_hash,
        created_at=publication.created_at,
        verified_at=publication.verified_at,
    )


def _user(request: HttpRequest) -> User:
    return request.auth  # type: ignore[attr-defined]


@router.post("/briefs", response={201: BriefDetailOut, **WRITE_PROBLEMS}, summary="Create a brief")
def create_brief(request: HttpRequest, data: BriefIn, idempotency_key: str = idempotency_key_header()) -> HttpResponse:
    """Create a brief (Editors); its summary run starts. 201 with the brief."""

    def write(user: User) -> tuple[int, BriefOut]:
        brief = check_create_brief(
            title=data.title, source_material=data.source_material, desk=data.desk, acting_user=user
        )
        return 201, brief_out(brief, latest_revision=None, detail=True)

    return idempotent_post(request, idempotency_key, write)


@router.get("/briefs", response={200: BriefPage, **PROBLEMS}, summary="List briefs")
def list_briefs_page(request: HttpRequest, filters: Query[BriefFilters]) -> BriefPage:
    """Briefs newest first, filtered by status and by a title fragment or brief id, one page per
    cursor: a page never repeats or skips a brief, even while new ones are created."""
    if not can_view(_user(request)):
        raise PermissionRefused("You need the Editors, Approvers or Operators role to see briefs.")
    # The web UI's list (publishing.selectors.briefs.list_briefs) pages by offset; a cursor is a keyset
    # condition on the same order, which the same indexes (migration 0009) serve.
    briefs = Brief.objects.select_related("author", "desk").order_by(*BRIEF_LIST_ORDER)
    if filters.status:
        briefs = briefs.filter(status=filters.status)
    if filters.q:
        briefs = briefs.filter(Q(title__icontains=filters.q) | Q(public_id=filters.q.strip().lower()))
    if filters.cursor:
        created_at, row_id = decode_cursor(filters.cursor)
        briefs = briefs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=row_id))
    latest = Revision.objects.filter(brief=OuterRef("pk")).order_by("-number").values("number")[:1]
    rows = list(briefs.annotate(latest_revision_number=Subquery(latest))[: filters.limit + 1])
    page, more = rows[: filters.limit], len(rows) > filters.limit
    return BriefPage(
        items=[brief_out(brief, latest_revision=brief.latest_revision_number) for brief in page],
        next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
    )


@router.get("/briefs/{brief_id}", response={200: BriefDetailOut, **PROBLEMS}, summary="Get a brief")
def get_brief(request: HttpRequest, brief_id: BriefId) -> BriefOut:
    brief = access_brief(brief_id, acting_user=_user(request))
    latest = get_latest_revision(brief)
    return brief_out(
        brief, latest_revision=latest.number if latest else None, detail=True, suggestion=suggestion_out(brief)
    )


@router.post(
    "/briefs/{brief_id}/source", response={200: BriefDetailOut, **WRITE_PROBLEMS}, summary="Replace the source material"
)
def replace_source_material(
    request: HttpRequest, brief_id: BriefId, data: SourceMaterialIn, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Replace the brief's source material (Editors), as the web UI's "Edit source material": different
    text starts a new summary run and older runs stop at their next step; the same text changes
    nothing. Revisions already written stay as they are. 200 with the brief."""

    def write(user: User) -> tuple[int, BriefOut]:
        brief = check_update_source_material(brief_id, source_material=data.source_material, acting_user=user)
        latest = get_latest_revision(brief)
        return 200, brief_out(
            brief, latest_revision=latest.number if latest else None, detail=True, suggestion=suggestion_out(brief)
        )

    return idempotent_post(request, idempotency_key, write)


@router.post(
    "/briefs/{brief_id}/legal-review",
    response={200: LegalReviewOut, **WRITE_PROBLEMS},
    summary="Flag as needing legal review",
)
def flag_legal_review(
    request: HttpRequest, brief_id: BriefId, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Flag the brief as needing legal review (Editors, Approvers): its approval then also needs one
    from a member of Legal. 200; `changed` false when it was flagged already (nothing written)."""

    def write(user: User) -> tuple[int, LegalReviewOut]:
        changed = check_flag_legal_review(brief_id, acting_user=user)
        return 200, LegalReviewOut(brief_id=brief_id, legal_review=True, changed=changed)

    return idempotent_post(request, idempotency_key, write)


@router.post(
    "/briefs/{brief_id}/retraction",
    response={200: RetractionRequestOut, **WRITE_PROBLEMS},
    summary="Retract a brief on every channel holding it",
)
def retract_brief(
    request: HttpRequest, brief_id: BriefId, data: RetractionIn, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Take the brief down on every channel that holds it (Approvers), now or at `retract_at`, with a
    reason; `confirm` must be true (docs/retractions.md). 200 with each channel's retraction; asked again
    it writes nothing and answers the same."""

    def write(user: User) -> tuple[int, RetractionRequestOut]:
        check_retract_brief(
            brief_id, reason=data.reason, confirm=data.confirm, acting_user=user, retract_at=data.retract_at
        )
        brief = access_brief(brief_id, acting_user=user)
        return 200, RetractionRequestOut(
            brief_id=brief_id,
            status=BriefStatus(brief.status),
            reason=brief.retraction_reason,
            retractions=retractions_out(brief),
        )

    return idempotent_post(request, idempotency_key, write)


@router.delete(
    "/briefs/{brief_id}/legal-review", response={200: LegalReviewOut, **PROBLEMS}, summary="Lift legal review"
)
def lift_legal_review(request: HttpRequest, brief_id: BriefId) -> LegalReviewOut:
    """Lift the brief's legal-review flag (members of Legal only; anyone else 403). 200; `changed`
    false when it was not flagged (nothing written). Idempotent as a DELETE is: no Idempotency-Key."""
    # A write of its own: one transaction holds the brief's lock, the change and its audit record.
    with transaction.atomic(durable=True):
        changed = check_lift_legal_review(brief_id, acting_user=_user(request))
    return LegalReviewOut(brief_id=brief_id, legal_review=False, changed=changed)


@router.post(
    "/briefs/{brief_id}/summary-runs/{run_number}/use-suggestion",
    response={201: RevisionOut, 200: RevisionOut, **WRITE_PROBLEMS},
    summary="Use the AI suggestion",
)
def use_suggestion(
    request: HttpRequest, brief_id: BriefId, run_number: RunNumber, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Make a completed summary run's suggested draft (the brief's `suggestion`) the next revision,
    as yours (Editors), as the web UI's "Use as the next revision". 201 with the revision; 200 with
    the latest revision when it already holds this text; 404 when the run has no suggestion."""

    def write(user: User) -> tuple[int, RevisionOut]:
        # The API's suggestion is offered whole (its title and body), and taken whole.
        revision, created = check_use_suggestion(
            brief_id, run_number=run_number, take=SuggestionTake.BOTH, acting_user=user
        )
        return (201 if created else 200), revision_out(revision, public_id=revision.brief.public_id)

    return idempotent_post(request, idempotency_key, write)


@router.get("/briefs/{brief_id}/revisions", response={200: RevisionPage, **PROBLEMS}, summary="List revisions")
def list_brief_revisions(request: HttpRequest, brief_id: BriefId, filters: Query[RevisionFilters]) -> RevisionPage:
    """The brief's revisions, newest first, a page at a time like every list (each carries its whole
    text, up to GALLEY_MAX_BODY_CHARS characters)."""
    brief = access_brief(brief_id, acting_user=_user(request))
    revisions = list_revisions(brief)
    if filters.before:
        revisions = revisions.filter(number__lt=filters.before)
    rows = list(revisions[: filters.limit + 1])
    page = rows[: filters.limit]
    return RevisionPage(
        items=[revision_out(revision, public_id=brief.public_id) for revision in page],
        next_cursor=page[-1].number if len(rows) > filters.limit else None,
    )


@router.post(
    "/briefs/{brief_id}/revisions",
    response={201: RevisionOut, 200: RevisionOut, **WRITE_PROBLEMS},
    summary="Write a revision",
)
def create_revision(
    request: HttpRequest, brief_id: BriefId, data: RevisionIn, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Write the next revision (Editors), if `base_revision` is still the latest: otherwise 409,
    naming the newer revision (`current_revision`), and nothing is written. The same text as the
    latest revision writes nothing and answers 200 with it."""

    def write(user: User) -> tuple[int, RevisionOut]:
        revision, created = check_create_revision(
            brief_id,
            base_number=data.base_revision,
            title=data.title,
            standfirst=data.standfirst,
            body=data.body,
            byline=data.byline,
            section=data.section,
            tags=data.tags,
            correction=data.correction,
            correction_note=data.correction_note,
            acting_user=user,
        )
        return (201 if created else 200), revision_out(revision, public_id=revision.brief.public_id)

    return idempotent_post(request, idempotency_key, write)


@router.get(
    "/briefs/{brief_id}/revisions/{number}", response={200: RevisionDetailOut, **PROBLEMS}, summary="Get a revision"
)
def get_brief_revision(request: HttpRequest, brief_id: BriefId, number: RevisionNumber) -> RevisionDetailOut:
    """The revision, with where it stands under its approval policy and its receipt on each channel an
    approval sent it to."""
    brief = access_brief(brief_id, acting_user=_user(request))
    revision = get_revision(brief, number)
    receipts = [receipt_out(receipt) for receipt in get_channel_receipts(brief, revision.number)]
    return RevisionDetailOut(
        **revision_out(revision, public_id=brief.public_id).model_dump(),
        **policy_progress_fields(get_policy_progress(revision)),
        receipts=receipts,
        schedule=schedule_out(schedule) if (schedule := get_revision_schedule(revision)) else None,
    )


@router.get(
    "/briefs/{brief_id}/publication", response={200: PublicationStateOut, **PROBLEMS}, summary="Publication state"
)
def get_brief_publication(request: HttpRequest, brief_id: BriefId) -> PublicationStateOut:
    """Which revision is published (verified at the target) and where the latest revision stands."""
    brief = access_brief(brief_id, acting_user=_user(request))
    latest = get_latest_revision(brief)
    published = None
    if brief.published_revision_number is not None:
        published = Publication.objects.filter(brief=brief, revision__number=brief.published_revision_number).first()
    latest_out = None
    if latest is not None:
        state = get_publication_state(latest)
        latest_out = RevisionPublicationOut(
            revision=latest.number,
            payload_hash=latest.payload_hash,
            state=state.state,
            label=state.label,
            publication=publication_out(state.publication),
            operations=[operation_summary(operation) for operation in state.operations],
        )
    return PublicationStateOut(
        brief_id=brief.public_id,
        status=BriefStatus(brief.status),
        published_revision=brief.published_revision_number,
        published=publication_out(published),
        latest=latest_out,
    )


def operation_summary(operation: Any) -> OperationSummary:
    return OperationSummary(
        id=operation.id,
        key=operation.key,
        kind=operation.kind,
        status=operation.status,
        attempts=operation.attempts,
        last_error=operation.last_error_message,
    )
