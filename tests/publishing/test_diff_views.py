"""Diffs in the web UI: the revision page against the previous and the published revision, and the
compare page for any two revisions; bad parameters, roles and pinned query counts."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from publishing.actions.briefs import check_create_brief
from publishing.actions.publications import do_record_publication, do_record_verification
from publishing.actions.revisions import check_create_revision
from publishing.identities import publish_key
from publishing.models import Revision
from tests.publishing.handlers.test_publications import approve
from tests.web import client_for, db_counts
from workers.models import Operation

pytestmark = pytest.mark.django_db


def publish(revision: Revision, *, by) -> None:
    """Approve, then what the worker's publish and verify finalizes record (no target is called here)."""
    approve(revision, by=by)
    operation = Operation.objects.get(key=publish_key(revision.brief.public_id, revision.number))
    with transaction.atomic(durable=True):
        publication = do_record_publication(
            revision,
            channel="web",
            publish_operation_id=operation.id,
            external_id="article-1",
            permalink="https://target.example/articles/1",
        )
        do_record_verification(publication)


def _diff_section(html: str, heading_id: str) -> str:
    """The HTML from the heading with this id to the next <h2>."""
    start = html.index(f'id="{heading_id}"')
    end = html.find("<h2", start + 1)
    return html[start : end if end != -1 else len(html)]


# --- the revision page ---------------------------------------------------------------------------


def test_revision_page__previous_revision__word_changes_marked(client, editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers returned at noon.", title="Harbour strike ends")
    client.force_login(editor)

    html = client.get(f"/briefs/{brief.public_id}/revisions/2/").content.decode()

    section = _diff_section(html, "changes-previous")
    assert "Changes against revision 1" in section
    assert "Dockers <del>walked out</del><ins>returned</ins> at <del>dawn</del><ins>noon</ins>." in section
    assert "Harbour strike<ins> ends</ins>" in section
    assert 'id="changes-published"' not in html


def test_revision_page__first_revision__all_of_it_new(client, editor, brief, revise):
    revise(brief, "Dockers walked out.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/revisions/1/")

    assertContains(response, "Revision 1: all of it is new")
    assertContains(response, "<ins>Dockers walked out.</ins>")


def test_revision_page__published_revision__changes_against_it_shown_too(client, editor, approver, brief, revise):
    first = revise(brief, "Dockers walked out at dawn.")
    publish(first, by=approver)
    revise(brief, "Dockers walked out at dawn. Talks resume.")
    revise(brief, "Dockers returned at noon. Talks resume.")
    client.force_login(editor)

    html = client.get(f"/briefs/{brief.public_id}/revisions/3/").content.decode()

    published = _diff_section(html, "changes-published")
    assert "Changes against the published revision 1" in published
    changed = "Dockers <del>walked out</del><ins>returned</ins> at <del>dawn</del><ins>noon. Talks resume</ins>."
    assert changed in published
    previous = _diff_section(html, "changes-previous")
    assert "Changes against revision 2" in previous
    assert "<ins> Talks resume.</ins>" not in previous


def test_revision_page__previous_is_the_published_one__one_diff_labelled_published(
    client, editor, approver, brief, revise
):
    publish(revise(brief, "Dockers walked out."), by=approver)
    revise(brief, "Dockers returned.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/revisions/2/")

    assertContains(response, "Changes against revision 1 (published)")
    assertNotContains(response, 'id="changes-published"')


def test_revision_page__markup_in_text__escaped_inside_the_diff(client, editor, brief, revise):
    revise(brief, "Plain text.")
    revise(brief, "Plain <script>alert(1)</script> text.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/revisions/2/")

    assertContains(response, "Plain <ins>&lt;script&gt;alert(1)&lt;/script&gt; </ins>text.")
    assertNotContains(response, "<script>alert(1)")


def test_revision_and_brief_pages__compare_form_with_two_selects(client, editor, brief, revise):
    for body in ("One.", "Two.", "Three."):
        revise(brief, body)
    client.force_login(editor)

    for path, selected in (
        (f"/briefs/{brief.public_id}/", ("2", "3")),
        (f"/briefs/{brief.public_id}/revisions/2/", ("1", "2")),
    ):
        html = client.get(path).content.decode()
        form = html[html.index('class="card row compare-form"') :]
        form = form[: form.index("</form>")]
        assert f'action="/briefs/{brief.public_id}/compare/"' in html
        assert 'name="from"' in form and 'name="to"' in form
        assert f'<option value="{selected[0]}" selected>' in form.split('name="to"')[0]
        assert f'<option value="{selected[1]}" selected>' in form.split('name="to"')[1]


# --- the compare page ----------------------------------------------------------------------------


def test_compare__any_two_revisions__word_level_title_and_body_separately(client, editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers walked out at dawn; the port is closed.")
    revise(brief, "Dockers returned at noon; the port is closed.", title="Harbour strike ends")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/compare/?from=1&to=3")

    assertContains(response, "Revision 1 → revision 3")
    html = response.content.decode()
    title = html[html.index('data-field="title"') : html.index('data-field="body"')]
    body = html[html.index('data-field="body"') :]
    assert "Harbour strike<ins> ends</ins>" in title
    assert (
        "Dockers <del>walked out</del><ins>returned</ins> at <del>dawn</del><ins>noon; the port is closed</ins>."
        in body
    )


def test_compare__every_story_field__each_in_story_order_with_its_label(client, editor, brief):
    with transaction.atomic():
        check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=editor
        )
        check_create_revision(
            brief.public_id,
            base_number=1,
            title="Harbour strike ends",
            standfirst="Talks through the night.",
            body="Dockers returned.",
            byline="Ana Lima",
            section="Business",
            tags="port, unions",
            acting_user=editor,
        )
    client.force_login(editor)

    html = client.get(f"/briefs/{brief.public_id}/compare/?from=1&to=2").content.decode()

    names = ["title", "standfirst", "body", "byline", "section", "tags"]
    positions = [html.index(f'data-field="{name}"') for name in names]
    assert positions == sorted(positions)
    labels = [html[position:].split("<h3>")[1].split("</h3>")[0] for position in positions]
    assert labels == ["Headline", "Standfirst", "Body", "Byline", "Section", "Tags"]
    assert "<ins>Talks through the night.</ins>" in html
    assert "<ins>port, unions</ins>" in html


def test_compare__backwards__newer_text_deleted(client, editor, brief, revise):
    revise(brief, "Dockers walked out.")
    revise(brief, "Dockers returned.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/compare/?from=2&to=1")

    assertContains(response, "Dockers <del>returned</del><ins>walked out</ins>.")


def test_compare__no_parameters__latest_against_the_one_before(client, editor, brief, revise):
    for body in ("One.", "Two.", "Three."):
        revise(brief, body)
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/compare/")

    assertContains(response, "Revision 2 → revision 3")
    assertContains(response, "<del>Two</del><ins>Three</ins>.")


def test_compare__one_revision__nothing_to_compare_yet(client, editor, brief, revise):
    revise(brief, "One.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/compare/")

    assertContains(response, f"{brief.public_id} has only one revision: there is nothing to compare.")


def test_compare__same_text__says_no_differences(client, editor, brief, revise):
    revise(brief, "Same.")
    revise(brief, "Other.")
    revise(brief, "Same.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/compare/?from=1&to=3")

    assertContains(response, "No differences.")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("from=abc&to=2", "From revision must be a revision number (1, 2, 3…); “abc” is not one."),
        ("from=1&to=2.5", "To revision must be a revision number (1, 2, 3…); “2.5” is not one."),
        ("from=-1&to=2", "From revision must be a revision number (1, 2, 3…); “-1” is not one."),
        ("from=0&to=2", "From revision must be a revision number (1, 2, 3…); “0” is not one."),
        ("from=1&to=99999999999999999999", "To revision must be a revision number (1, 2, 3…); “99999999999999999999”"),
        ("from=1&to=%D9%A3", "To revision must be a revision number (1, 2, 3…); “٣” is not one."),
        ("from=2&to=2", "Both sides are revision 2: pick two different revisions to compare."),
        ("from=1&to=9", "{brief} has no revision 9: its revisions are 1 to 2."),
        ("to=1", "{brief} has no revision 0: its revisions are 1 to 2."),
    ],
)
def test_compare__bad_parameters__400_with_a_clear_message_and_the_form(client, editor, brief, revise, query, message):
    revise(brief, "One.")
    revise(brief, "Two.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/compare/?{query}")

    assertContains(response, message.format(brief=brief.public_id), status_code=400)
    assertContains(response, 'name="from"', status_code=400)


def test_compare__revision_of_another_brief__400_names_this_brief(client, editor, brief, revise):
    revise(brief, "One.")
    revise(brief, "Two.")
    other = check_create_brief(title="Ferry timetable", source_material="", acting_user=editor)
    for body in ("Winter.", "Spring.", "Summer."):
        revise(other, body)
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/compare/?from=1&to=3")

    assertContains(response, f"{brief.public_id} has no revision 3: its revisions are 1 to 2.", status_code=400)


def test_compare__unknown_brief__404_with_message(client, editor):
    client.force_login(editor)

    response = client.get("/briefs/brief-404/compare/?from=1&to=2")

    assertContains(response, "There is no brief brief-404.", status_code=404)


@pytest.mark.parametrize("role", ["editor", "approver", "operator"])
def test_compare__every_role_that_sees_briefs__200(users, brief, revise, role):
    revise(brief, "One.")
    revise(brief, "Two.")

    response = client_for(users[role]).get(f"/briefs/{brief.public_id}/compare/?from=1&to=2")

    assertContains(response, "<del>One</del><ins>Two</ins>.")


def test_compare__no_role__403_and_anonymous_to_login(users, brief, revise):
    revise(brief, "One.")
    revise(brief, "Two.")
    path = f"/briefs/{brief.public_id}/compare/?from=1&to=2"

    refused = client_for(users["no_group"]).get(path)
    anonymous = Client().get(path)

    assertContains(refused, "You need the Editors, Approvers or Operators role to see briefs.", status_code=403)
    assert (anonymous.status_code, anonymous["Location"]) == (
        302,
        f"/login/?next=/briefs/{brief.public_id}/compare/%3Ffrom%3D1%26to%3D2",
    )


def test_compare__post__405_and_nothing_written(client, editor, brief, revise):
    revise(brief, "One.")
    client.force_login(editor)
    before = db_counts()

    response = client.post(f"/briefs/{brief.public_id}/compare/", {"from": "1", "to": "2"})

    assert response.status_code == 405
    assert db_counts() == before


# --- query counts: constant in the number of revisions -------------------------------------------------


# The revision page: session, user, roles, the brief, the revision, the latest revision, the
# previous and published revisions (one query), decisions, the restore note, the valid approval,
# the publication state (operations with their attempts, publication), the receipts per channel
# (the revision's publish and verify operations), the unread-notification count and the comment threads;
# the approval policy card's completion, desk groups and count; the schedule card's look for a schedule.
REVISION_PAGE_QUERIES = 19
# The compare page: session, user, roles, the brief, the latest number, both revisions (one query),
# the unread-notification count.
COMPARE_PAGE_QUERIES = 7


@pytest.mark.parametrize("revisions", [4, 12])
def test_query_count__revision_and_compare_pages__pinned_whatever_the_number_of_revisions(
    editor, approver, brief, revise, django_assert_num_queries, revisions
):
    publish(revise(brief, "Revision 1 of the strike."), by=approver)
    for number in range(2, revisions + 1):
        revise(brief, f"Revision {number}: the strike goes on.")
    client = client_for(editor)

    with django_assert_num_queries(REVISION_PAGE_QUERIES):
        page = client.get(f"/briefs/{brief.public_id}/revisions/{revisions - 1}/")
    with django_assert_num_queries(COMPARE_PAGE_QUERIES):
        compare = client.get(f"/briefs/{brief.public_id}/compare/?from=1&to={revisions}")

    assertContains(page, "Changes against the published revision 1")
    assertContains(page, "Restore this revision")
    assertContains(compare, f"Revision 1 → revision {revisions}")
