"""Corrections (docs/editorial.md#corrections): a new revision of a published brief marked a correction
with a public note, both in its payload and hash; a revision that is none keeps its payload and hash as
ever. Refusals say why and write nothing; a draft keeps the editor's text."""

from __future__ import annotations

import hashlib

import pytest
from django.db import transaction

from publishing.actions.drafts import check_save_draft, check_submit_draft
from publishing.actions.revisions import check_create_revision
from publishing.errors import InvalidInput
from publishing.hashing import payload_hash
from publishing.models import Brief, Draft, Revision
from publishing.selectors.corrections import list_corrections, list_holding_channels
from publishing.story import CORRECTION_NOTE_MAX_CHARS, clean_correction, clean_story
from tests.publishing.handlers.test_channels import approve, run_worker
from tests.publishing.handlers.test_corrections import correct
from workers.models import AuditEvent

NOTE = "An earlier version said the strike began on Monday; it began on Tuesday."

# Written by hand, not produced by the code under test: a title-and-body story's canonical bytes, and a
# correction's (its keys in sorted order among the story's).
PLAIN_BYTES = b'{"body":"x","title":"T"}'
CORRECTION_BYTES = b'{"body":"x","correction":true,"correction_note":"Fixed.","title":"T"}'


def test_hash_stability__no_correction__payload_and_hash_exactly_as_before_corrections():
    payload = clean_story({"title": "T", "body": "x"}) | clean_correction(False, "")
    assert payload == {"title": "T", "body": "x"}
    assert payload_hash(payload) == hashlib.sha256(PLAIN_BYTES).hexdigest()
    # The form's unticked box and the API's null mean the same: no correction, no key.
    assert clean_correction("", None) == clean_correction(None, "") == {}


def test_hash_stability__correction__mark_and_note_are_part_of_payload_and_hash():
    payload = clean_story({"title": "T", "body": "x"}) | clean_correction(True, " Fixed.\r\n")
    assert payload == {"title": "T", "body": "x", "correction": True, "correction_note": "Fixed."}
    assert payload_hash(payload) == hashlib.sha256(CORRECTION_BYTES).hexdigest()
    assert payload_hash(payload) != payload_hash(clean_story({"title": "T", "body": "x"}))
    assert payload_hash(payload) != payload_hash({**payload, "correction_note": "Fixed!"})


@pytest.mark.django_db
def test_hash_stability__revision_without_correction__stored_payload_and_hash_unchanged(brief, editor):
    with transaction.atomic():
        revision, _created = check_create_revision(
            brief.public_id, base_number=0, title="T", body="x", correction="", correction_note="", acting_user=editor
        )
    revision.refresh_from_db()
    assert revision.payload == {"title": "T", "body": "x"}
    assert revision.payload_hash == hashlib.sha256(PLAIN_BYTES).hexdigest()


@pytest.mark.parametrize(
    ("mark", "note", "message"),
    [
        (True, "", "needs its public correction note"),
        (True, "   \n ", "needs its public correction note"),
        (True, "x" * (CORRECTION_NOTE_MAX_CHARS + 1), f"the limit is {CORRECTION_NOTE_MAX_CHARS:,}"),
        (False, "Fixed.", "the revision is not marked as a correction"),
        ("yes", "Fixed.", "not one this form makes"),
        (True, "Fixed\x00", "NUL"),
    ],
    ids=["no-note", "blank-note", "oversized-note", "note-without-mark", "forged-mark", "nul"],
)
def test_correction_input__invalid__refused_with_a_message(mark, note, message):
    with pytest.raises(InvalidInput, match=message):
        clean_correction(mark, note)


def _publish(revision: Revision, approver, *, channels: list[str] | None = None) -> None:
    approve(revision, by=approver, channels=channels)
    run_worker()


@pytest.mark.django_db
def test_correction_refused__brief_with_nothing_published__nothing_written(brief, editor, revise):
    revise(brief, "Dockers walked out on Monday.")
    refusal = "has not been published anywhere yet, so there is nothing to correct"
    with pytest.raises(InvalidInput, match=refusal), transaction.atomic():
        check_create_revision(
            brief.public_id,
            base_number=1,
            title="Harbour strike",
            body="Dockers walked out on Tuesday.",
            correction=True,
            correction_note=NOTE,
            acting_user=editor,
        )
    assert list(brief.revisions.values_list("number", flat=True)) == [1]
    assert not AuditEvent.objects.filter(event_type="revision.created", new_state__latest_revision=2).exists()


@pytest.mark.django_db
def test_correction_refused__draft_of_an_unpublished_brief__forged_mark_not_saved__text_kept_in_the_form(brief, editor):
    story = {"title": "Harbour strike", "body": "Dockers walked out.", "correction": "1", "correction_note": NOTE}
    with pytest.raises(InvalidInput, match="nothing to correct"), transaction.atomic():
        check_save_draft(brief.public_id, version=0, base_number=0, story=story, acting_user=editor)
    assert not Draft.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fast_retries")
def test_correction__draft_of_a_published_brief__submitted__revision_marked_with_its_note__draft_keeps_the_mark(
    target, brief, editor, approver, revise
):
    _publish(revise(brief, "Dockers walked out on Monday."), approver)
    story = {"title": "Harbour strike", "body": "Dockers walked out on Tuesday.", "correction": "1"}
    with transaction.atomic(durable=True):
        draft = check_save_draft(brief.public_id, version=0, base_number=1, story=story, acting_user=editor)
    assert draft.story["correction"] is True and draft.story["correction_note"] == ""  # unfinished: kept

    with pytest.raises(InvalidInput, match="needs its public correction note"), transaction.atomic(durable=True):
        check_submit_draft(brief.public_id, version=draft.version, base_number=1, story=story, acting_user=editor)
    draft.refresh_from_db()
    assert draft.story["body"] == "Dockers walked out on Tuesday."  # the editor's text is kept
    assert brief.revisions.count() == 1

    story["correction_note"] = NOTE
    with transaction.atomic(durable=True):
        revision, created = check_submit_draft(
            brief.public_id, version=draft.version, base_number=1, story=story, acting_user=editor
        )
    assert created
    assert revision.payload == {
        "title": "Harbour strike",
        "body": "Dockers walked out on Tuesday.",
        "correction": True,
        "correction_note": NOTE,
    }
    created_event = AuditEvent.objects.get(event_type="revision.created", new_state__latest_revision=2)
    assert created_event.new_state["correction"] is True
    # The draft starts again from the correction: still marked, with its note, until the editor unticks it.
    draft.refresh_from_db()
    assert (draft.story["correction"], draft.story["correction_note"]) == (True, NOTE)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fast_retries")
def test_corrections__listed_with_the_channels_they_reached__holders_named_with_what_they_hold(
    target, add_channel, brief, editor, approver, revise
):
    add_channel("partner-feed")
    _publish(revise(brief, "Dockers walked out on Monday."), approver, channels=["partner-feed"])
    assert list_corrections(brief) == []
    revision = correct(brief, "Dockers walked out on Tuesday.", by=editor, note=NOTE)
    assert [(h.channel.slug, h.revision) for h in list_holding_channels(brief, before=2)] == [("partner-feed", 1)]
    (pending,) = list_corrections(brief)
    assert (pending.revision, pending.note, pending.channels) == (2, NOTE, [])

    _publish(revision, approver)
    (done,) = list_corrections(brief)
    assert [(r.channel, r.verified_at is not None) for r in done.channels] == [("partner-feed", True)]
    assert done.author == editor.username
    assert [(h.channel.slug, h.revision) for h in list_holding_channels(brief, before=3)] == [("partner-feed", 2)]
    assert Brief.objects.get(pk=brief.pk).published_revision_number == 2
