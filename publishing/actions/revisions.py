"""Immutable revisions and the brief's status moves."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from publishing.announcements import announce_revision_submitted
from publishing.errors import InvalidInput, NotFound, RevisionConflict
from publishing.hashing import PayloadError, payload_hash
from publishing.identities import revision_subject_id
from publishing.models import Brief, Revision, SummaryRun
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.corrections import has_publication
from publishing.selectors.revisions import get_latest_revision, get_revision
from publishing.selectors.summaries import get_canonical_artifacts
from publishing.story import clean_correction, clean_story
from publishing.summary_rules import SuggestionTake, apply_suggestion
from publishing.validation import clean_number
from workers.audit import record_audit_event

_S = Brief.Status
# Every status move a brief may make, in one place; do_change_brief_status enforces it for all
# of them. Another approver's later decision on the same revision may follow a request for
# changes; publishing follows an approval.
# A brief that holds a publication somewhere can be retracted whatever its newer revision is doing; a
# retracted one goes on with a newer revision (review, approval), and is published again only when a
# newer revision is verified (docs/retractions.md).
BRIEF_TRANSITIONS: dict[str, set[str]] = {
    _S.DRAFTING: {_S.IN_REVIEW},
    _S.IN_REVIEW: {_S.IN_REVIEW, _S.APPROVED, _S.CHANGES_REQUESTED, _S.RETRACTED},
    _S.CHANGES_REQUESTED: {_S.IN_REVIEW, _S.APPROVED, _S.CHANGES_REQUESTED, _S.RETRACTED},
    # approved → changes requested: its scheduled publication was cancelled (approvals.schedules, docs/schedules.md).
    _S.APPROVED: {_S.IN_REVIEW, _S.APPROVED, _S.PUBLISHED, _S.CHANGES_REQUESTED, _S.RETRACTED},
    _S.PUBLISHED: {_S.IN_REVIEW, _S.RETRACTED},
    _S.RETRACTED: {_S.IN_REVIEW, _S.APPROVED, _S.CHANGES_REQUESTED, _S.PUBLISHED},
}


def check_brief_transition(public_id: str, old: str, new: str) -> None:
    """Raises InvalidInput unless a brief may go from `old` to `new`."""
    if new not in BRIEF_TRANSITIONS[old]:
        raise InvalidInput(f"{public_id} cannot go from {old} to {new}.")


def do_change_brief_status(brief: Brief, status: str) -> str:
    """Move the brief (whose row the caller has locked) to `status`; returns the old status."""
    old = brief.status
    check_brief_transition(brief.public_id, old, status)
    brief.status = status
    brief.updated_at = timezone.now()
    brief.save(update_fields=["status", "updated_at"])
    return old


def check_create_revision(
    public_id: str,
    *,
    base_number: Any,
    title: Any,
    body: Any,
    acting_user: AnyUser,
    standfirst: Any = "",
    byline: Any = "",
    section: Any = "",
    tags: Any = None,
    correction: Any = False,
    correction_note: Any = "",
) -> tuple[Revision, bool]:
    """Write the editor's story as the next revision of the brief, if nobody wrote one meanwhile.

    The story's fields are checked by publishing.story.clean_story; the optional ones may be left out.
    `correction` (with its public `correction_note`) marks it a correction of what the brief's channels
    hold (publishing.story.clean_correction); refused (InvalidInput, nothing written) on a brief that
    nothing was published from yet.

    `base_number` is the revision the editor started from (0 for the first). Returns the
    revision and whether it was created. Raises RevisionConflict (nothing written) when a
    newer revision exists. Locks the brief's row first (docs/architecture.md#lock-order).
    """
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    base = clean_number(
        base_number, minimum=0, message="The revision you edited is missing or not a valid number; reload the page."
    )
    payload = clean_story(
        {"title": title, "standfirst": standfirst, "body": body, "byline": byline, "section": section, "tags": tags}
    ) | clean_correction(correction, correction_note)
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    if payload.get("correction"):
        check_may_correct(brief)
    return do_create_revision(brief, base_number=base, payload=payload, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_create_revision(
    brief: Brief,
    *,
    base_number: int,
    payload: dict[str, Any],
    acting_user: User,
    restores: int | None = None,
    same_content: bool = False,
) -> tuple[Revision, bool]:
    """Caller holds the brief's row lock, which serialises revision numbering per brief.

    Idempotent for a repeated submission: the same text on the same base returns the revision
    it already created, and text equal to the latest revision writes nothing — unless
    `same_content`, where the caller means a new number for the same content (its own
    idempotency is the caller's). `restores` names the revision whose content this is, in the
    audit record (a revision's payload holds only what is published, and its hash must stay that
    content's hash).
    """
    try:
        digest = payload_hash(payload)
    except PayloadError as exc:
        raise InvalidInput(str(exc)) from None
    latest = get_latest_revision(brief)
    latest_number = latest.number if latest is not None else 0
    if (
        not same_content
        and latest is not None
        and latest.payload_hash == digest
        and base_number in (latest_number, latest_number - 1)
    ):
        return latest, False
    if base_number != latest_number:
        raise RevisionConflict(newer=latest, base_number=base_number)

    revision = Revision.objects.create(
        brief=brief, number=latest_number + 1, payload=payload, payload_hash=digest, author=acting_user
    )
    old_status = do_change_brief_status(brief, Brief.Status.IN_REVIEW)
    record_audit_event(
        acting_user=acting_user,
        event_type="revision.created",
        subject_type="revision",
        subject_id=revision_subject_id(brief.public_id, revision.number),
        old_state={"status": old_status, "latest_revision": latest_number},
        new_state={
            "status": brief.status,
            "latest_revision": revision.number,
            "payload_hash": digest,
            **({"correction": True} if payload.get("correction") else {}),
            **({"restores_revision": restores} if restores is not None else {}),
        },
    )
    announce_revision_submitted(revision, acting_user=acting_user)
    return revision, True


def check_may_correct(brief: Brief) -> None:
    """Raises InvalidInput unless some channel holds the brief: a correction corrects what was published."""
    if not has_publication(brief):
        raise InvalidInput(
            f"{brief.public_id} has not been published anywhere yet, so there is nothing to correct: submit it as "
            "an ordinary revision, not marked as a correction."
        )


def check_use_suggestion(public_id: str, *, run_number: Any, take: Any, acting_user: AnyUser) -> tuple[Revision, bool]:
    """Write the brief's next revision, as the editor's own, from what they take of a completed
    run's suggestion (`take`, a SuggestionTake): the headline as the title, the draft as the
    Markdown body, or both (with the run's standfirst, when it has one); the rest stays as in the
    latest revision, and the story is checked by publishing.story.clean_story.

    The headline of any completed run may be taken; the draft only from a run that found an
    editor's revision and so suggested its draft instead of writing it. Locks the brief's row.
    """
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    if take not in SuggestionTake.values:
        raise InvalidInput(
            "Choose what to use from the suggestion: the headline as the title, the draft as the body, or both."
        )
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    runs = brief.summary_runs.filter(number=run_number, status=SummaryRun.Status.COMPLETED)
    if take != SuggestionTake.HEADLINE:
        runs = runs.filter(suggestion=True)
    run = runs.first()
    if run is None:
        raise NotFound(f"{public_id} has no completed suggestion from summary run {run_number}.")
    latest = get_latest_revision(brief)
    # A completed run always leaves a revision (its own or the editor's it found); the brief's
    # title stands in only to keep this total.
    current = latest.payload if latest is not None else {"title": brief.title, "body": ""}
    payload = clean_story(apply_suggestion(current, get_canonical_artifacts(run), take=take))
    return do_create_revision(
        brief, base_number=latest.number if latest else 0, payload=payload, acting_user=acting_user
    )


def check_restore_revision(
    public_id: str, *, number: int, base_number: Any, acting_user: AnyUser
) -> tuple[Revision, bool]:
    """Write revision `number`'s content again as the brief's next revision, through the same path
    as an edit: based on `base_number` (the latest revision the editor saw), so a revision written
    meanwhile raises RevisionConflict and nothing is written; a repeated submission returns the
    revision it already created. The new revision needs approval like any other.
    """
    acting_user = require_role(acting_user, Role.EDITOR, to="restore revisions")
    base = clean_number(
        base_number,
        minimum=1,
        message="The current revision you saw is missing or not a valid number; reload the page.",
    )
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    restored = get_revision(brief, number)
    return do_create_revision(
        brief, base_number=base, payload=dict(restored.payload), acting_user=acting_user, restores=restored.number
    )
