"""A brief's working draft: autosave writes no revision and tells nobody, a stale save gets the
other text (409), submitting makes exactly the next revision, and who else is editing is shown."""

from __future__ import annotations

import datetime
import json

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from pytest_django.asserts import assertContains

from approvals.models import Notification
from publishing.actions.drafts import check_record_presence, check_save_draft, check_take_over_draft
from publishing.errors import DraftConflict
from publishing.hashing import payload_hash
from publishing.models import Draft, EditorPresence
from publishing.roles import Role
from publishing.selectors.drafts import PRESENCE_SECONDS
from tests.concurrency import run_together
from tests.publishing.api.support import ApiClient, token_for
from tests.web import client_for, db_counts, form_values
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

STORY = {
    "title": "Harbour strike ends",
    "standfirst": "Dockers return after two days.",
    "body": "The port reopens at noon.\n\nShips wait offshore.",
    "byline": "Ana Costa",
    "section": "City",
    "tags": "strike, port",
}


def save_url(brief) -> str:
    return reverse("publishing:draft_save", args=[brief.public_id])


def edit_url(brief) -> str:
    return reverse("publishing:revision_edit", args=[brief.public_id])


def presence_url(brief) -> str:
    return reverse("publishing:draft_presence", args=[brief.public_id])


def autosave(client, brief, *, version: int, base: int, **fields):
    return client.post(save_url(brief), {"draft_version": version, "base_number": base, **STORY, **fields})


def test_autosave__writes_the_draft__no_revision_no_notification_no_operation(editor, approver, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    Notification.objects.all().delete()
    client = client_for(editor)
    before = db_counts()

    first = autosave(client, brief, version=0, base=1)
    second = autosave(client, brief, version=first.json()["saved"]["version"], base=1, body="The port reopens.")

    assert first.status_code == second.status_code == 200
    assert second.json()["saved"]["version"] == 2
    assert db_counts() == before  # no revision, audit record or operation (emails go out as operations)
    assert not Notification.objects.exists()
    draft = Draft.objects.get(brief=brief)
    assert draft.story["body"] == "The port reopens."
    assert draft.story["tags"] == ["strike", "port"]
    assert (draft.version, draft.base_number, draft.updated_by) == (2, 1, editor)


def test_autosave__same_text_again__version_unchanged(editor, brief):
    client = client_for(editor)
    assert autosave(client, brief, version=0, base=0).status_code == 200

    again = autosave(client, brief, version=1, base=0)

    assert again.json()["saved"]["version"] == 1


def test_autosave__stale_version__409_with_their_text_and_nothing_lost(editor, make_user, brief):
    edna = make_user("edna", Role.EDITOR)
    mine, theirs = client_for(editor), client_for(edna)
    assert autosave(mine, brief, version=0, base=0, body="Eddie's first line.").status_code == 200
    assert autosave(theirs, brief, version=1, base=0, body="Edna's line.").status_code == 200

    stale = autosave(mine, brief, version=1, base=0, body="Eddie's second line.")

    assert stale.status_code == 409
    answer = stale.json()
    assert answer["theirs"]["story"]["body"] == "Edna's line."
    assert answer["theirs"]["version"] == 2
    assert answer["theirs"]["updated_by"] == "edna"
    assert "saved meanwhile by edna" in answer["message"]
    assert Draft.objects.get(brief=brief).story["body"] == "Edna's line."

    # Keep mine: a save naming their version, said so in so many words by the page.
    kept = autosave(mine, brief, version=answer["theirs"]["version"], base=0, body="Eddie's second line.")

    assert kept.status_code == 200
    assert Draft.objects.get(brief=brief).story["body"] == "Eddie's second line."


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"title": "x" * 201}, "Headline is 201 characters long; the limit is 200."),
        ({"tags": "a, " + ", ".join(f"t{n}" for n in range(20))}, "A story has 21 tags; the limit is 20."),
        ({"draft_version": "seven"}, "The draft version you edited is missing or not a valid number; reload the page."),
        ({"draft_version": str(2**40)}, "The draft version you edited is missing or not a valid number"),
        ({"base_number": "-1"}, "The revision you edited is missing or not a valid number; reload the page."),
    ],
)
def test_autosave__bad_input__400_with_message_and_nothing_written(editor, brief, fields, message):
    client = client_for(editor)

    response = client.post(save_url(brief), {"draft_version": 0, "base_number": 0, **STORY, **fields})

    assert response.status_code == 400
    assert message in response.json()["message"]
    assert not Draft.objects.exists()


def test_autosave__nul_character__400_names_the_field(editor, brief):
    response = autosave(client_for(editor), brief, version=0, base=0, standfirst="dawn\x00")

    assert response.status_code == 400
    assert response.json()["message"] == "Standfirst contains a NUL character, which cannot be stored."
    assert not Draft.objects.exists()


def test_autosave__not_an_editor__403_and_nothing_written(approver, brief):
    response = autosave(client_for(approver), brief, version=0, base=0)

    assert response.status_code == 403
    assert response.json()["message"] == "Only members of Editors can edit briefs."
    assert not Draft.objects.exists()


def test_draft__unfinished_story_saved__submit_says_what_it_lacks(editor, brief):
    client = client_for(editor)
    assert autosave(client, brief, version=0, base=0, title="", body="").status_code == 200
    form = form_values(client.get(edit_url(brief)), containing="draft_version")
    assert form["draft_version"] == "1"
    before = db_counts()

    response = client.post(edit_url(brief), {**form, "action": "submit"})

    assertContains(response, "Headline is required.", status_code=400)
    assert db_counts() == before
    assert Draft.objects.get(brief=brief).version == 1


def test_edit_page__shows_the_draft_every_field_labelled_with_help(editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client = client_for(editor)
    assert autosave(client, brief, version=0, base=1).status_code == 200

    response = client.get(edit_url(brief))

    form = form_values(response, containing="draft_version")
    assert {name: form[name] for name in STORY} == STORY
    assert (form["base_number"], form["draft_version"]) == ("1", "1")
    content = response.content.decode()
    for label in ("Headline", "Standfirst", "Body", "Byline", "Section", "Tags"):
        assert f">{label}</label>" in content
    assert "the website shows it as the excerpt." in content
    assert 'aria-describedby="id_standfirst_helptext"' in content


def test_autosave__answers_the_drafts_preview_rendered_by_the_server(editor, brief):
    response = autosave(client_for(editor), brief, version=0, base=0, body="Dockers return **today**.\n\n<b>x</b>")

    preview = response.json()["saved"]["preview"]
    assert 'data-testid="story-preview"' in preview
    assert "<strong>today</strong>" in preview
    assert "&lt;b&gt;x&lt;/b&gt;" in preview  # raw HTML typed in the body stays text
    assert '<h3 class="story-headline">Harbour strike ends</h3>' in preview
    assert "Dockers return after two days." in preview  # the standfirst


def test_autosave__unfinished_draft__previews_what_it_has(editor, brief):
    response = autosave(client_for(editor), brief, version=0, base=0, title="", standfirst="", body="", tags="")

    assert response.status_code == 200
    preview = response.json()["saved"]["preview"]
    assert "No headline yet" in preview
    assert '<div class="story-body" data-testid="story-body"></div>' in preview


def test_autosave__conflict__their_draft_comes_with_its_preview(editor, make_user, brief):
    edna = make_user("edna", Role.EDITOR)
    assert autosave(client_for(edna), brief, version=0, base=0, body="Edna's *line*.").status_code == 200

    stale = autosave(client_for(editor), brief, version=0, base=0, body="Mine.")

    assert stale.status_code == 409
    assert "<em>line</em>" in stale.json()["theirs"]["preview"]


def test_edit_page__previews_the_last_saved_draft_beside_the_form(editor, brief, revise):
    revise(brief, "Dockers walked out **at dawn**.")
    client = client_for(editor)
    page = client.get(edit_url(brief)).content.decode()
    preview = page.split('id="draft-preview"')[1]
    assert "<strong>at dawn</strong>" in preview  # no draft yet: the latest revision

    assert autosave(client, brief, version=0, base=1, body="The port *reopens*.").status_code == 200
    page = client.get(edit_url(brief)).content.decode()

    preview = page.split('id="draft-preview"')[1]
    assert "<em>reopens</em>" in preview and "at dawn" not in preview
    assert "The draft as last saved" in page
    assert page.count('data-testid="story-preview"') == 1


def test_edit_page__draft_without_headline__previews_it_and_says_so(editor, brief):
    client = client_for(editor)
    assert autosave(client, brief, version=0, base=0, title="", body="Only a body.").status_code == 200

    response = client.get(edit_url(brief))

    assertContains(response, "No headline yet")
    assertContains(response, "<p>Only a body.</p>")


def test_edit_page__plain_post_save__saves_the_draft_not_a_revision(editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client = client_for(editor)
    form = form_values(client.get(edit_url(brief)), containing="draft_version")
    before = db_counts()

    response = client.post(edit_url(brief), {**form, **STORY, "action": "save"})

    assert response["Location"] == edit_url(brief)
    assert db_counts() == before
    assert Draft.objects.get(brief=brief).story["title"] == STORY["title"]
    assertContains(client.get(edit_url(brief)), "Draft saved. It is not a revision yet")


def test_submit__creates_exactly_the_next_revision_with_its_hash__one_notification_per_approver(
    editor, approver, make_user, brief, revise
):
    make_user("abe", Role.APPROVER)
    revise(brief, "Dockers walked out at dawn.")
    Notification.objects.all().delete()
    client = client_for(editor)
    for line in ("The port", "The port reopens", "The port reopens at noon."):
        version = Draft.objects.get(brief=brief).version if Draft.objects.exists() else 0
        assert autosave(client, brief, version=version, base=1, body=line).status_code == 200
    assert not Notification.objects.exists()
    form = form_values(client.get(edit_url(brief)), containing="draft_version")

    response = client.post(edit_url(brief), {**form, "action": "submit"})

    assert response["Location"] == f"/briefs/{brief.public_id}/revisions/2/"
    assert list(brief.revisions.values_list("number", flat=True)) == [1, 2]
    revision = brief.revisions.get(number=2)
    expected = {**STORY, "body": "The port reopens at noon.", "tags": ["strike", "port"]}
    assert revision.payload == expected
    assert revision.payload_hash == payload_hash(expected)
    notified = Notification.objects.filter(event=Notification.Event.SUBMITTED)
    assert sorted(notified.values_list("recipient__username", flat=True)) == ["abe", "ava"]
    assert set(notified.values_list("revision_number", flat=True)) == {2}
    # The draft starts again from the new revision.
    draft = Draft.objects.get(brief=brief)
    assert (draft.base_number, draft.version) == (2, 4)
    assert draft.story["body"] == "The port reopens at noon."


def test_submitted_revision_never_changes__later_autosaves_and_submissions_write_new_rows(editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client = client_for(editor)
    assert autosave(client, brief, version=0, base=1, body="The port reopens.").status_code == 200
    form = form_values(client.get(edit_url(brief)), containing="draft_version")
    assert client.post(edit_url(brief), {**form, "action": "submit"}).status_code == 302
    submitted = brief.revisions.get(number=2)
    frozen = (submitted.payload, submitted.payload_hash, submitted.created_at)

    version = Draft.objects.get(brief=brief).version
    assert autosave(client, brief, version=version, base=2, body="The port reopens at noon.").status_code == 200
    form = form_values(client.get(edit_url(brief)), containing="draft_version")
    assert client.post(edit_url(brief), {**form, "action": "submit"}).status_code == 302

    submitted.refresh_from_db()
    assert (submitted.payload, submitted.payload_hash, submitted.created_at) == frozen
    assert submitted.payload_hash == payload_hash(submitted.payload)
    assert brief.revisions.get(number=3).payload["body"] == "The port reopens at noon."


def test_submit__revision_submitted_meanwhile__conflict_page_and_the_draft_kept(editor, make_user, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client = client_for(editor)
    assert autosave(client, brief, version=0, base=1, body="Mine, autosaved.").status_code == 200
    form = form_values(client.get(edit_url(brief)), containing="draft_version")
    revise(brief, "Theirs, through the API.", by=make_user("edna", Role.EDITOR))
    before = db_counts()
    draft_before = Draft.objects.values().get(brief=brief)

    response = client.post(edit_url(brief), {**form, "action": "submit"})

    assertContains(response, "Revision 2 was saved while you were editing revision 1.", status_code=409)
    assert form_values(response, containing="draft_version")["body"] == "Mine, autosaved."
    assert db_counts() == before
    assert Draft.objects.values().get(brief=brief) == draft_before


def test_submit__draft_saved_meanwhile_in_another_tab__409_shows_both_and_writes_nothing(editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    tab_a, tab_b = client_for(editor), client_for(editor)
    form = form_values(tab_a.get(edit_url(brief)), containing="draft_version")
    assert autosave(tab_b, brief, version=0, base=1, body="Tab B's text.").status_code == 200
    before = db_counts()

    response = tab_a.post(edit_url(brief), {**form, "body": "Tab A's text.", "action": "submit"})

    assertContains(response, "The draft was saved meanwhile by eddie (version 1).", status_code=409)
    table = response.content.decode().split('id="draft-conflict-table"')[1].split("</table>")[0]
    assert "Tab B&#x27;s text." in table and "Tab A&#x27;s text." in table
    kept = form_values(response, containing="draft_version")
    assert (kept["body"], kept["draft_version"]) == ("Tab A's text.", "1")
    assert db_counts() == before

    # Sent again, the form names the version it was shown: submitting it is the explicit "keep mine".
    again = tab_a.post(edit_url(brief), {**kept, "action": "submit"})

    assert again["Location"] == f"/briefs/{brief.public_id}/revisions/2/"
    assert brief.revisions.get(number=2).body == "Tab A's text."


def test_presence__shown_on_the_brief_page_and_the_edit_page__expired_after_a_minute(editor, make_user, brief):
    ana = make_user("ana", Role.EDITOR)
    with transaction.atomic():
        check_record_presence(brief.public_id, typing=True, acting_user=ana)
    client = client_for(editor)

    page = client.get(brief.get_absolute_url())
    beat = client.post(presence_url(brief), {"typing": "0"})
    live = client.get(reverse("publishing:brief_live", args=[brief.public_id]), HTTP_HX_REQUEST="true")

    assertContains(page, "<strong>ana</strong> is editing, 0 s ago")
    assert "<strong>ana</strong> is editing" in beat.json()["html"]
    assert "eddie" not in beat.json()["html"]  # the viewer is not "someone else"
    assertContains(live, "<strong>ana</strong> is editing")
    assertContains(client.get(edit_url(brief)), "<strong>ana</strong> is editing")

    long_ago = timezone.now() - datetime.timedelta(seconds=PRESENCE_SECONDS + 1)
    EditorPresence.objects.filter(user=ana).update(last_seen_at=long_ago, typing_at=long_ago)

    assert "ana" not in client.post(presence_url(brief), {"typing": "0"}).json()["html"]
    assert "<strong>ana</strong>" not in client.get(brief.get_absolute_url()).content.decode()


def test_presence__open_but_not_typing__has_the_draft_open(editor, make_user, brief):
    ana = make_user("ana", Role.EDITOR)
    with transaction.atomic():
        check_record_presence(brief.public_id, typing=False, acting_user=ana)

    assertContains(client_for(editor).get(brief.get_absolute_url()), "<strong>ana</strong> has the draft open")


def test_take_over__holder_present__saves_refused_until_taken_over_and_audited(editor, make_user, brief):
    ana = make_user("ana", Role.EDITOR)
    with transaction.atomic():
        check_record_presence(brief.public_id, typing=True, acting_user=ana)
        check_save_draft(brief.public_id, version=0, base_number=0, story=STORY, acting_user=ana)
    client = client_for(editor)
    assertContains(
        client.get(edit_url(brief)), "ana is editing this draft: your changes are not saved until you take over."
    )
    before = db_counts()

    held = autosave(client, brief, version=1, base=0, body="Eddie's text.")

    assert held.status_code == 423
    assert held.json()["holder"] == "ana"
    assert db_counts() == before
    assert Draft.objects.get(brief=brief).story["body"] == STORY["body"]

    taken = client.post(reverse("publishing:draft_take_over", args=[brief.public_id]), HTTP_ACCEPT="application/json")

    assert taken.json()["version"] == 1
    event = AuditEvent.objects.get(event_type="draft.taken_over")
    assert (event.actor, event.subject_id) == (editor, brief.public_id)
    assert (event.old_state["holder"], event.new_state["holder"]) == ("ana", "eddie")
    assert autosave(client, brief, version=1, base=0, body="Eddie's text.").status_code == 200
    # Ana's page learns it at its next heartbeat; her saves are refused until she takes over back.
    ana_client = client_for(ana)
    with transaction.atomic():
        check_record_presence(brief.public_id, typing=True, acting_user=editor)
    assert ana_client.post(presence_url(brief), {"typing": "0"}).json()["held_by"] == "eddie"
    assert autosave(ana_client, brief, version=2, base=0, body="Ana's text.").status_code == 423


def test_take_over__holder_gone__saves_go_through_without_taking_over(editor, make_user, brief):
    ana = make_user("ana", Role.EDITOR)
    with transaction.atomic():
        check_save_draft(brief.public_id, version=0, base_number=0, story=STORY, acting_user=ana)
    # Ana's page sent no heartbeat within a minute: a closed tab holds nothing.

    response = autosave(client_for(editor), brief, version=1, base=0, body="Eddie's text.")

    assert response.status_code == 200
    assert Draft.objects.get(brief=brief).holder == editor
    assert not AuditEvent.objects.filter(event_type="draft.taken_over").exists()


def test_take_over__already_holding__writes_nothing(editor, brief):
    with transaction.atomic():
        check_save_draft(brief.public_id, version=0, base_number=0, story=STORY, acting_user=editor)
        check_take_over_draft(brief.public_id, acting_user=editor)

    assert not AuditEvent.objects.filter(event_type="draft.taken_over").exists()


def test_api__a_draft_is_not_a_revision__neither_listed_nor_in_the_brief(editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    assert autosave(client_for(editor), brief, version=0, base=1, body="Draft only.").status_code == 200
    api = ApiClient(token_for(editor))

    listed = api.get(f"/briefs/{brief.public_id}/revisions")
    shown = api.get(f"/briefs/{brief.public_id}")

    assert listed.status_code == shown.status_code == 200
    assert [item["number"] for item in json.loads(listed.content)["items"]] == [1]
    assert b"Draft only." not in listed.content + shown.content
    assert api.get(f"/briefs/{brief.public_id}/revisions/2").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_autosave__two_first_saves_at_once__one_wins_the_other_gets_409(editor, make_user, brief):
    edna = make_user("edna", Role.EDITOR)

    def first_save(user, body: str):
        return lambda: check_save_draft(
            brief.public_id, version=0, base_number=0, story={**STORY, "body": body}, acting_user=user
        )

    outcomes = run_together(first_save(editor, "Eddie's."), first_save(edna, "Edna's."))

    assert sorted(kind for kind, _value in outcomes) == ["error", "ok"], outcomes
    (winner,) = [value for kind, value in outcomes if kind == "ok"]
    (loser,) = [value for kind, value in outcomes if kind == "error"]
    assert isinstance(loser, DraftConflict), loser
    assert loser.draft.story["body"] == winner.story["body"]
    assert Draft.objects.get(brief=brief).version == 1


def test_admin__drafts_and_presences__listed_read_only(users, brief):
    with transaction.atomic():
        check_save_draft(brief.public_id, version=0, base_number=0, story=STORY, acting_user=users["editor"])
        check_record_presence(brief.public_id, typing=True, acting_user=users["editor"])
    client = client_for(users["operator"])

    for path in ("/admin/publishing/draft/", "/admin/publishing/editorpresence/"):
        listed = client.get(path)
        assertContains(listed, brief.public_id)
        assert client.get(f"{path}add/").status_code == 403
    draft = Draft.objects.get(brief=brief)
    change = client.post(f"/admin/publishing/draft/{draft.pk}/change/", {"version": "9"})
    assert change.status_code in (200, 403)
    assert Draft.objects.get(brief=brief).version == 1
