"""Invariants of briefs and revisions (identities: docs/architecture.md#identities; audit: docs/invariants.md#i13;
edit conflicts: docs/editorial.md#diffs).

A revision is (brief, number), numbered 1, 2, 3… per brief, immutable once written, with
payload_hash = payload_hash(payload). Setup goes through the real actions; refusals are called
the way the views call them, inside `transaction.atomic(durable=True)`, so a refusal rolls back
exactly what the entry point would.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, connection, transaction

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.errors import InvalidInput, PermissionRefused, RevisionConflict
from publishing.hashing import payload_hash
from publishing.models import Brief, Revision
from publishing.roles import Role
from tests.concurrency import run_together
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

BRIEF_ID = re.compile(r"^brief-(\d{3,})$")


def save_revision(brief: Brief, *, base: Any, body: Any, by: Any, title: Any = "Harbour strike"):
    """What the edit view does: one durable transaction around the action."""
    with transaction.atomic(durable=True):
        return check_create_revision(brief.public_id, base_number=base, title=title, body=body, acting_user=by)


def create_brief(*, by: Any, title: Any = "Ferry timetable", source_material: Any = "") -> Brief:
    with transaction.atomic(durable=True):
        return check_create_brief(title=title, source_material=source_material, acting_user=by)


def counts() -> tuple[int, int, int]:
    return Brief.objects.count(), Revision.objects.count(), AuditEvent.objects.count()


# --- payload hash -------------------------------------------------------------------------------


def test_revision_payload_hash__after_reload__equals_recomputed_hash(brief, revise):
    bodies = [
        "Dockers walked out at dawn.",
        "Pelabuhan Tanjung Priok lumpuh — kapal menunggu di luar.",
        "Strajk w porcie: żółw, źdźbło, ćma. 港口罢工 🚢",
        "Line one\nline two\n\n  indented\ttab",
    ]
    written = [revise(brief, body) for body in bodies]

    for revision, body in zip(written, bodies, strict=True):
        stored = Revision.objects.get(pk=revision.pk)
        assert stored.payload == {"title": "Harbour strike", "body": body}
        assert stored.payload_hash == payload_hash(stored.payload)
        assert stored.payload_hash == payload_hash({"body": body, "title": "Harbour strike"})
    assert len({revision.payload_hash for revision in written}) == len(bodies)


def test_revision_payload_hash__stored_text_is_stripped_before_hashing(brief, editor):
    revision, _created = save_revision(brief, base=0, title="  Harbour strike ", body="\n body \n", by=editor)

    stored = Revision.objects.get(pk=revision.pk)
    assert stored.payload == {"title": "Harbour strike", "body": "body"}
    assert stored.payload_hash == payload_hash({"title": "Harbour strike", "body": "body"})


# --- immutability -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (
            "UPDATE publishing_revision SET payload = %s::jsonb WHERE id = %s",
            ['{"title":"T","body":"forged"}'],
        ),
        ("UPDATE publishing_revision SET payload_hash = %s WHERE id = %s", ["0" * 64]),
        ("UPDATE publishing_revision SET number = 7 WHERE id = %s", []),
        ("UPDATE publishing_revision SET created_at = created_at WHERE id = %s", []),
    ],
    ids=["payload", "payload_hash", "number", "no-op"],
)
def test_revision_immutable__raw_sql_update__refused(brief, revise, sql, params):
    revision = revise(brief, "Dockers walked out at dawn.")

    with (
        pytest.raises(IntegrityError, match="publishing_revision rows are immutable: UPDATE refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [*params, revision.pk])

    stored = Revision.objects.get(pk=revision.pk)
    assert (stored.number, stored.payload, stored.payload_hash, stored.created_at) == (
        1,
        {"title": "Harbour strike", "body": "Dockers walked out at dawn."},
        revision.payload_hash,
        revision.created_at,
    )


def test_revision_immutable__raw_sql_delete__refused(brief, revise):
    first = revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers walked out at dawn; ferries stopped.")

    with (
        pytest.raises(IntegrityError, match="publishing_revision rows are immutable: DELETE refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM publishing_revision WHERE brief_id = %s", [brief.pk])

    assert list(brief.revisions.values_list("number", flat=True)) == [1, 2]
    assert Revision.objects.get(pk=first.pk).payload_hash == first.payload_hash


def test_revision_immutable__orm_save__refused(brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    revision.payload = {"title": "Harbour strike", "body": "Quietly rewritten."}
    revision.payload_hash = payload_hash(revision.payload)

    with (
        pytest.raises(IntegrityError, match="publishing_revision rows are immutable: UPDATE refused"),
        transaction.atomic(),
    ):
        revision.save()

    stored = Revision.objects.get(pk=revision.pk)
    assert stored.payload == {"title": "Harbour strike", "body": "Dockers walked out at dawn."}
    assert stored.payload_hash == payload_hash(stored.payload)


def test_revision_immutable__orm_update_and_delete__refused(brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")

    with pytest.raises(IntegrityError, match="UPDATE refused"), transaction.atomic():
        Revision.objects.filter(pk=revision.pk).update(number=2)
    with pytest.raises(IntegrityError, match="DELETE refused"), transaction.atomic():
        Revision.objects.filter(pk=revision.pk).delete()

    assert list(Revision.objects.values_list("pk", "number")) == [(revision.pk, 1)]


# --- optimistic concurrency ---------------------------------------------------------------------


def test_revision_edit_conflict__stale_base__refused_and_nothing_written(brief, editor, make_user, revise):
    bea = make_user("bea", Role.EDITOR)
    revise(brief, "Dockers walked out at dawn.")
    second, created = save_revision(brief, base=1, body="Editor A's version.", by=editor)
    assert (second.number, created) == (2, True)
    before = counts()

    with pytest.raises(RevisionConflict) as conflict:
        save_revision(brief, base=1, body="Editor B's version.", by=bea)

    assert conflict.value.newer is not None
    assert conflict.value.newer.number == 2
    assert conflict.value.newer.pk == second.pk
    assert conflict.value.newer.payload["body"] == "Editor A's version."
    assert conflict.value.base_number == 1
    assert conflict.value.message == (
        "Revision 2 was saved while you were editing revision 1. "
        "Nothing was saved: your text is kept below; review what changed, then overwrite it with "
        "your version or start again from the newer revision."
    )
    assert counts() == before
    assert not Revision.objects.filter(author=bea).exists()
    assert not AuditEvent.objects.filter(actor=bea).exists()
    assert list(brief.revisions.values_list("number", flat=True)) == [1, 2]


def test_revision_edit_conflict__first_revision_from_stale_base__refused(brief, editor, make_user):
    bea = make_user("bea", Role.EDITOR)
    save_revision(brief, base=0, body="Editor A's first draft.", by=editor)
    before = counts()

    with pytest.raises(RevisionConflict) as conflict:
        save_revision(brief, base=0, body="Editor B's first draft.", by=bea)

    assert conflict.value.newer is not None
    assert conflict.value.newer.number == 1
    assert "Revision 1 was saved while you were editing revision 0" in conflict.value.message
    assert counts() == before


def test_revision_edit_conflict__base_that_does_not_exist__refused(brief, editor, revise):
    revise(brief, "Dockers walked out at dawn.")
    before = counts()

    with pytest.raises(RevisionConflict) as conflict:
        save_revision(brief, base=5, body="From the future.", by=editor)

    assert conflict.value.message == "Revision 5 does not exist; the latest revision is 1."
    assert counts() == before


@pytest.mark.django_db(transaction=True)
def test_revision_edit_conflict__concurrent_edits_same_base__one_wins(brief, editor, make_user):
    bea = make_user("bea", Role.EDITOR)
    with transaction.atomic(durable=True):
        check_create_revision(brief.public_id, base_number=0, title="Harbour strike", body="First.", acting_user=editor)
    events_before = AuditEvent.objects.count()

    outcomes = run_together(
        lambda: check_create_revision(
            brief.public_id, base_number=1, title="Harbour strike", body="Eddie's edit.", acting_user=editor
        ),
        lambda: check_create_revision(
            brief.public_id, base_number=1, title="Harbour strike", body="Bea's edit.", acting_user=bea
        ),
    )

    kinds = sorted(kind for kind, _value in outcomes)
    assert kinds == ["error", "ok"], outcomes
    (winner,) = [value for kind, value in outcomes if kind == "ok"]
    (loser,) = [value for kind, value in outcomes if kind == "error"]
    revision, created = winner
    assert (revision.number, created) == (2, True)
    assert isinstance(loser, RevisionConflict), loser
    assert loser.newer is not None
    assert loser.newer.number == 2
    assert loser.newer.pk == revision.pk

    assert list(Revision.objects.filter(brief=brief).values_list("number", flat=True)) == [1, 2]
    assert Revision.objects.get(brief=brief, number=2).payload == revision.payload
    assert AuditEvent.objects.count() == events_before + 1
    assert (
        AuditEvent.objects.filter(event_type="revision.created", subject_id=f"{brief.public_id}/revision-2").count()
        == 1
    )


# --- identities ---------------------------------------------------------------------------------


def test_revision_numbering__per_brief__one_two_three_independent(brief, editor, revise):
    other = create_brief(by=editor, title="Ferry timetable")

    revise(brief, "a1")
    revise(other, "b1")
    revise(brief, "a2")
    revise(brief, "a3")
    revise(other, "b2")

    assert list(brief.revisions.order_by("number").values_list("number", "payload__body")) == [
        (1, "a1"),
        (2, "a2"),
        (3, "a3"),
    ]
    assert list(other.revisions.order_by("number").values_list("number", "payload__body")) == [
        (1, "b1"),
        (2, "b2"),
    ]


def test_brief_public_id__form_and_sequence__unique_and_consecutive(editor):
    briefs = [create_brief(by=editor, title=f"Story {i}") for i in range(3)]

    numbers = []
    for brief in briefs:
        match = BRIEF_ID.fullmatch(brief.public_id)
        assert match, brief.public_id
        numbers.append(int(match.group(1)))
        assert brief.public_id == f"brief-{int(match.group(1)):03d}"  # zero-padded to three digits
        assert Brief.objects.get(pk=brief.pk).public_id == brief.public_id
    assert numbers == [numbers[0], numbers[0] + 1, numbers[0] + 2]
    assert len(set(Brief.objects.values_list("public_id", flat=True))) == Brief.objects.count()


def test_brief_public_id__database__refuses_other_forms(brief):
    with pytest.raises(IntegrityError, match="brief_public_id_form"), transaction.atomic():
        Brief.objects.filter(pk=brief.pk).update(public_id="brief-7")
    assert BRIEF_ID.fullmatch(Brief.objects.get(pk=brief.pk).public_id)


# --- idempotent resubmission --------------------------------------------------------------------


def test_revision_resubmit__same_text_same_base__returns_existing_without_writing(brief, editor):
    first, created = save_revision(brief, base=0, body="Dockers walked out at dawn.", by=editor)
    assert created is True
    before = counts()

    again, created_again = save_revision(brief, base=0, body="Dockers walked out at dawn.", by=editor)

    assert (again.pk, again.number, created_again) == (first.pk, 1, False)
    assert counts() == before

    second, _ = save_revision(brief, base=1, body="Ferries stopped too.", by=editor)
    before = counts()
    replay, replay_created = save_revision(brief, base=1, body="Ferries stopped too.", by=editor)
    assert (replay.pk, replay.number, replay_created) == (second.pk, 2, False)
    # Saving the latest text unchanged on top of itself is no new revision either.
    unchanged, unchanged_created = save_revision(brief, base=2, body="Ferries stopped too.", by=editor)
    assert (unchanged.pk, unchanged_created) == (second.pk, False)
    assert counts() == before


def test_revision_resubmit__older_text_on_current_base__is_a_new_revision(brief, editor, revise):
    first = revise(brief, "Version A.")
    revise(brief, "Version B.")

    reverted, created = save_revision(brief, base=2, body="Version A.", by=editor)

    assert (reverted.number, created) == (3, True)
    assert reverted.payload_hash == first.payload_hash
    assert reverted.pk != first.pk


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("title", "body", "message"),
    [
        ("", "Body.", "Headline is required."),
        ("   \n\t", "Body.", "Headline is required."),
        ("Harbour strike", "  ", "Body is required."),
        ("Harbour\x00strike", "Body.", "Headline contains a NUL character, which cannot be stored."),
        ("Harbour strike", "Body\x00.", "Body contains a NUL character, which cannot be stored."),
        (None, "Body.", "Headline must be text."),
        ("Harbour strike", ["Body."], "Body must be text."),
        ("T" * 201, "Body.", "Headline is 201 characters long; the limit is 200."),
        ("Harbour strike", "lone \ud800 surrogate", "The payload contains text that is not valid UTF-8"),
    ],
    ids=[
        "empty-title",
        "blank-title",
        "blank-body",
        "nul-title",
        "nul-body",
        "title-none",
        "body-list",
        "long-title",
        "lone-surrogate",
    ],
)
def test_revision_input__invalid__refused_and_nothing_written(brief, editor, revise, title, body, message):
    revise(brief, "Dockers walked out at dawn.")
    before = counts()

    with pytest.raises(InvalidInput) as refused:
        save_revision(brief, base=1, title=title, body=body, by=editor)

    assert refused.value.message.startswith(message)
    assert counts() == before
    assert Brief.objects.get(pk=brief.pk).status == Brief.Status.IN_REVIEW


def test_revision_input__body_over_limit__refused_and_nothing_written(brief, editor, settings):
    settings.GALLEY_MAX_BODY_CHARS = 10
    before = counts()

    with pytest.raises(InvalidInput) as refused:
        save_revision(brief, base=0, body="x" * 11, by=editor)

    assert refused.value.message == "Body is 11 characters long; the limit is 10."
    assert counts() == before

    revision, created = save_revision(brief, base=0, body="x" * 10, by=editor)  # the limit itself is fine
    assert (revision.number, created) == (1, True)


def test_revision_input__base_not_a_number__refused(brief, editor):
    before = counts()
    for base in (None, "", "two", -1):
        with pytest.raises(InvalidInput, match="The revision you edited is missing or not a valid number"):
            save_revision(brief, base=base, body="Text.", by=editor)
    assert counts() == before


@pytest.mark.parametrize(
    ("title", "source_material", "message"),
    [
        ("", "", "Title is required."),
        ("  ", "", "Title is required."),
        ("Harbour\x00strike", "", "Title contains a NUL character, which cannot be stored."),
        ("Harbour strike", "dawn\x00", "Source material contains a NUL character, which cannot be stored."),
        ("Harbour strike", "x" * 11, "Source material is 11 characters long; the limit is 10."),
    ],
    ids=["empty-title", "blank-title", "nul-title", "nul-source", "long-source"],
)
def test_brief_input__invalid__refused_and_nothing_written(editor, settings, title, source_material, message):
    settings.GALLEY_MAX_BODY_CHARS = 10
    before = counts()

    with pytest.raises(InvalidInput) as refused:
        create_brief(by=editor, title=title, source_material=source_material)

    assert refused.value.message == message
    assert counts() == before


# --- permissions --------------------------------------------------------------------------------


@pytest.fixture(params=["approver", "operator", "no-group", "anonymous", "inactive-editor"])
def non_editor(request, make_user):
    match request.param:
        case "approver":
            return make_user("ava", Role.APPROVER)
        case "operator":
            return make_user("otto", Role.OPERATOR)
        case "no-group":
            return make_user("nobody")
        case "anonymous":
            return AnonymousUser()
        case _:
            user = make_user("ex-editor", Role.EDITOR)
            user.is_active = False
            user.save(update_fields=["is_active"])
            return user


def test_brief_create__not_an_editor__refused(non_editor):
    before = counts()

    with pytest.raises(PermissionRefused) as refused:
        create_brief(by=non_editor, title="Sneaky brief")

    assert refused.value.message == "Only members of Editors can create briefs."
    assert counts() == before


def test_revision_create__not_an_editor__refused(brief, revise, non_editor):
    revise(brief, "Dockers walked out at dawn.")
    before = counts()

    for base in (0, 1):
        with pytest.raises(PermissionRefused) as refused:
            save_revision(brief, base=base, body="Sneaky edit.", by=non_editor)
        assert refused.value.message == "Only members of Editors can edit briefs."

    assert counts() == before
    assert list(brief.revisions.values_list("number", flat=True)) == [1]


# --- audit --------------------------------------------------------------------------------------


def test_audit__brief_created__event_with_actor_and_state(editor):
    brief = create_brief(by=editor, title="Ferry timetable", source_material="Notes.")

    created, started = AuditEvent.objects.filter(subject_type="brief", subject_id=brief.public_id).order_by("id")
    assert created.event_type == "brief.created"
    assert created.actor == editor
    assert created.old_state is None
    assert created.new_state == {
        "title": "Ferry timetable",
        "status": "drafting",
        "channels": ["web"],
        "desk": "general",
    }
    # The summary pipeline's first step is written in the same transaction (docs/invariants.md#i5).
    assert (started.event_type, started.actor, started.new_state["run"]) == ("summary.started", None, 1)


def test_audit__revision_created__event_with_actor_subject_and_old_new_state(brief, editor, make_user):
    bea = make_user("bea", Role.EDITOR)

    first, _ = save_revision(brief, base=0, body="Dockers walked out at dawn.", by=editor)
    second, _ = save_revision(brief, base=1, body="Ferries stopped too.", by=bea)

    events = list(AuditEvent.objects.filter(event_type="revision.created").order_by("id"))
    assert [(e.actor, e.subject_type, e.subject_id) for e in events] == [
        (editor, "revision", f"{brief.public_id}/revision-1"),
        (bea, "revision", f"{brief.public_id}/revision-2"),
    ]
    assert re.fullmatch(r"brief-\d{3,}/revision-1", events[0].subject_id)
    assert events[0].old_state == {"status": "drafting", "latest_revision": 0}
    assert events[0].new_state == {
        "status": "in_review",
        "latest_revision": 1,
        "payload_hash": first.payload_hash,
    }
    assert events[1].old_state == {"status": "in_review", "latest_revision": 1}
    assert events[1].new_state == {
        "status": "in_review",
        "latest_revision": 2,
        "payload_hash": second.payload_hash,
    }
    assert Brief.objects.get(pk=brief.pk).status == Brief.Status.IN_REVIEW


def test_audit__every_write_has_exactly_one_event(editor):
    brief = create_brief(by=editor)
    for base, body in enumerate(["one", "two", "three"]):
        save_revision(brief, base=base, body=body, by=editor)

    assert Revision.objects.filter(brief=brief).count() == 3
    assert sorted(
        AuditEvent.objects.filter(subject_id__startswith=brief.public_id).values_list("event_type", "subject_id")
    ) == [
        ("brief.created", brief.public_id),
        ("revision.created", f"{brief.public_id}/revision-1"),
        ("revision.created", f"{brief.public_id}/revision-2"),
        ("revision.created", f"{brief.public_id}/revision-3"),
    ]


# --- docs/invariants.md#i4: the database keeps the published revision from going back ---------------
# Every product path advances it with a guarded update first, so only a write that goes around the
# application reaches the trigger: raw SQL and the ORM's update().


def _set_published(brief: Brief, number: int | None, *, via: str) -> None:
    if via == "sql":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE publishing_brief SET published_revision_number = %s WHERE id = %s", [number, brief.id]
            )
    else:
        Brief.objects.filter(id=brief.id).update(published_revision_number=number)


@pytest.mark.parametrize("via", ["sql", "orm"])
@pytest.mark.parametrize("backwards", [1, None], ids=["lower", "null"])
def test_no_regression__published_revision_going_back__refused_by_the_database(brief, via, backwards):
    _set_published(brief, 2, via=via)
    with pytest.raises(IntegrityError, match="published revision cannot go back from 2"), transaction.atomic():
        _set_published(brief, backwards, via=via)
    brief.refresh_from_db()
    assert brief.published_revision_number == 2


@pytest.mark.parametrize("via", ["sql", "orm"])
def test_no_regression__published_revision_same_or_higher__allowed(brief, via):
    for number in (2, 2, 3):
        _set_published(brief, number, via=via)
    brief.refresh_from_db()
    assert brief.published_revision_number == 3
