"""A brief's working draft: autosaved as editors type, submitted for review as the next revision.

A draft save writes no revision, no audit record and no notification: a draft is working text,
written over every few seconds and not kept. What is kept is the revision a submission writes,
through publishing.actions.revisions like every other (hash, audit, approvers announced). Taking
over the draft from another editor is audited: it decides whose text goes on.

Lock order: the brief's row, then the draft's (docs/architecture.md#lock-order); a save of an
existing draft locks only the draft's row, so autosaves never wait on a publish holding the brief.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from publishing.actions.revisions import check_create_revision, check_may_correct
from publishing.errors import DraftConflict, DraftHeld, InvalidInput
from publishing.models import Brief, Draft, EditorPresence, Revision
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.drafts import get_draft, get_draft_state, is_present
from publishing.story import TEXT_FIELDS, clean_correction_note, clean_tags, correction_mark, draft_fields, max_chars
from publishing.validation import clean_number, clean_text
from workers.audit import record_audit_event


def _number(value: Any, *, what: str) -> int:
    return clean_number(
        value, minimum=0, message=f"The {what} you edited is missing or not a valid number; reload the page."
    )


def clean_draft_story(values: Mapping[str, Any]) -> dict[str, Any]:
    """An unfinished story as typed: each field must be storable text within its limit, but may be
    empty (a headline not yet written); line ends are stored as LF, spaces as typed.
    InvalidInput names the field to fix. clean_story checks it fully at submission.

    The correction mark and note (docs/editorial.md#corrections) are kept as typed too: a note without
    the mark, or the mark without a note yet, is refused only at submission (clean_correction)."""
    story: dict[str, Any] = {}
    for field in TEXT_FIELDS:
        value = values.get(field.name, "")
        clean_text(value, field=field.label, max_chars=max_chars(field), required=False)
        story[field.name] = str(value).replace("\r\n", "\n").replace("\r", "\n")
    story["tags"] = clean_tags(values.get("tags"))
    story["correction"] = correction_mark(values.get("correction"))
    story["correction_note"] = clean_correction_note(values.get("correction_note"), required=False)
    return story


def _refuse_if_held(draft: Draft | None, acting_user: User) -> None:
    if (
        draft is not None
        and draft.holder is not None
        and draft.holder != acting_user
        and is_present(draft.brief, draft.holder)
    ):
        raise DraftHeld(draft.holder)


def check_save_draft(
    public_id: str, *, version: Any, base_number: Any, story: Mapping[str, Any], acting_user: AnyUser
) -> Draft:
    """Save the editor's text as the brief's draft, if the draft is still at `version` (0: none yet).

    Raises DraftConflict (nothing written) when the draft was saved meanwhile — "keep mine" is a
    save naming the version that conflict reported — and DraftHeld while another editor holds it.
    The same text again writes nothing. Locks the draft's row (the brief's first, to make one).
    """
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    expected = _number(version, what="draft version")
    base = _number(base_number, what="revision")
    cleaned = clean_draft_story(story)
    brief = access_brief(public_id, acting_user=acting_user)
    if cleaned["correction"]:
        # The edit page offers the mark only for a published brief: one sent for another is forged.
        check_may_correct(brief)
    draft = get_draft(brief, lock=True)
    if draft is None:
        brief = access_brief(public_id, acting_user=acting_user, lock=True)
        draft = get_draft(brief, lock=True)
    return do_save_draft(brief, draft, expected=expected, base_number=base, story=cleaned, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_save_draft(
    brief: Brief,
    draft: Draft | None,
    *,
    expected: int,
    base_number: int,
    story: dict[str, Any],
    acting_user: User,
) -> Draft:
    """Caller holds the draft's row lock (the brief's when there is no draft yet)."""
    _refuse_if_held(draft, acting_user)
    if draft is None:
        if expected != 0:
            raise InvalidInput("This draft no longer exists; reload the page (your text is kept in this browser).")
        return _write_draft(
            brief, None, story=story, base_number=base_number, acting_user=acting_user, holder=acting_user
        )
    if draft.version != expected:
        raise DraftConflict(draft)
    if draft.story == story and draft.base_number == base_number and draft.holder == acting_user:
        return draft
    return _write_draft(brief, draft, story=story, base_number=base_number, acting_user=acting_user, holder=acting_user)


def _write_draft(
    brief: Brief,
    draft: Draft | None,
    *,
    story: dict[str, Any],
    base_number: int,
    acting_user: User,
    holder: User | None,
) -> Draft:
    """The draft holds `story` from `acting_user`, held by `holder`; a new version, or the first."""
    if draft is None:
        return Draft.objects.create(
            brief=brief, story=story, base_number=base_number, holder=holder, updated_by=acting_user
        )
    draft.story = story
    draft.base_number = base_number
    draft.version += 1
    draft.holder = holder
    draft.updated_by = acting_user
    draft.updated_at = timezone.now()
    draft.save(update_fields=["story", "base_number", "version", "holder", "updated_by", "updated_at"])
    return draft


def check_submit_draft(
    public_id: str, *, version: Any, base_number: Any, story: Mapping[str, Any], acting_user: AnyUser
) -> tuple[Revision, bool]:
    """Submit the editor's text for review: the next immutable revision (check_create_revision, which
    checks the story and announces it to the approvers), based on `base_number`; then the draft
    starts again from that revision.

    Raises DraftConflict when the draft was saved meanwhile past `version` (nothing written),
    DraftHeld while another editor holds it, RevisionConflict when a revision was submitted since
    `base_number` (nothing written: the draft stays as it was). Locks the brief's row, then the draft's.
    """
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    expected = _number(version, what="draft version")
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    draft = get_draft(brief, lock=True)
    _refuse_if_held(draft, acting_user)
    # A draft started again from a revision submitted since the editor's base is not their draft's
    # conflict but their revision's: check_create_revision says what was submitted meanwhile.
    if draft is not None and draft.version != expected and draft.base_number == _number(base_number, what="revision"):
        raise DraftConflict(draft)
    revision, created = check_create_revision(
        public_id,
        base_number=base_number,
        title=story.get("title", ""),
        standfirst=story.get("standfirst", ""),
        body=story.get("body", ""),
        byline=story.get("byline", ""),
        section=story.get("section", ""),
        tags=story.get("tags"),
        correction=story.get("correction"),
        correction_note=story.get("correction_note"),
        acting_user=acting_user,
    )
    do_reset_draft(brief, draft, revision=revision, acting_user=acting_user)
    return revision, created


@transaction.atomic(savepoint=False)
def do_reset_draft(brief: Brief, draft: Draft | None, *, revision: Revision, acting_user: User) -> Draft:
    """The draft starts again from `revision`, held by nobody (the submitter is done with it), its
    version grown so every page still saving the old text is told (DraftConflict). Caller holds the
    brief's and the draft's row locks."""
    story = draft_fields(revision.payload)
    return _write_draft(brief, draft, story=story, base_number=revision.number, acting_user=acting_user, holder=None)


def check_take_over_draft(public_id: str, *, acting_user: AnyUser) -> Draft:
    """Make the acting editor the draft's holder, so their saves go through and the other editor's
    page stops saving. Audited; taking over a draft one holds already writes nothing. Locks the
    brief's row, then the draft's."""
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    draft = get_draft(brief, lock=True)
    if draft is None:
        # Held from now on, before any save: the story is the one the edit page starts from.
        state = get_draft_state(brief)
        draft = Draft.objects.create(
            brief=brief, story=state.story, base_number=state.base_number, holder=None, updated_by=acting_user
        )
    return do_take_over_draft(draft, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_take_over_draft(draft: Draft, *, acting_user: User) -> Draft:
    """Caller holds the draft's row lock."""
    if draft.holder == acting_user:
        return draft
    old_holder = draft.holder
    draft.holder = acting_user
    draft.save(update_fields=["holder"])
    record_audit_event(
        acting_user=acting_user,
        event_type="draft.taken_over",
        subject_type="draft",
        subject_id=draft.brief.public_id,
        old_state={"holder": old_holder.username if old_holder is not None else None, "version": draft.version},
        new_state={"holder": acting_user.username, "version": draft.version},
    )
    return draft


def check_record_presence(
    public_id: str, *, typing: bool, acting_user: AnyUser, leaving: bool = False
) -> EditorPresence | None:
    """The heartbeat of the acting editor's edit page: they have the draft open (and are typing);
    `leaving`, the page is closing or going elsewhere, and they are no longer shown."""
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    brief = access_brief(public_id, acting_user=acting_user)
    if leaving:
        do_end_presence(brief, acting_user=acting_user)
        return None
    return do_record_presence(brief, typing=typing, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_end_presence(brief: Brief, *, acting_user: User) -> None:
    """Not audited, as presence is not (do_record_presence)."""
    EditorPresence.objects.filter(brief=brief, user=acting_user).delete()


@transaction.atomic(savepoint=False)
def do_record_presence(brief: Brief, *, typing: bool, acting_user: User) -> EditorPresence:
    """One statement (INSERT … ON CONFLICT UPDATE): heartbeats of two tabs never collide. Not
    audited: presence is a passing state, shown for a minute and then ignored."""
    now = timezone.now()
    update_fields = ["last_seen_at", *(["typing_at"] if typing else [])]
    (presence,) = EditorPresence.objects.bulk_create(
        [EditorPresence(brief=brief, user=acting_user, last_seen_at=now, typing_at=now if typing else None)],
        update_conflicts=True,
        unique_fields=["brief", "user"],
        update_fields=update_fields,
    )
    return presence
