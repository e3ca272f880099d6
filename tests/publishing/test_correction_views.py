"""Corrections in the web UI (docs/editorial.md#corrections): the edit page offers the mark and the public
note only for a brief some channel holds, refuses a forged or incomplete one keeping the editor's text,
needs its CSRF token; the revision page shows the mark, the note and the channels it will reach, those
locked in on the decision form; the brief page lists corrections, and its timeline says so."""

from __future__ import annotations

import pytest
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from approvals.models import Approval
from publishing.models import Revision
from tests.publishing.handlers.test_channels import approve, run_worker
from tests.publishing.handlers.test_corrections import correct
from tests.web import client_for, db_counts, form_values

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

NOTE = "An earlier version said <b>Monday</b>; the strike began on Tuesday."


def edit_path(brief) -> str:
    return f"/briefs/{brief.public_id}/edit/"


def submission(page, **fields: str) -> dict[str, str]:
    """The edit form as the page drew it, with `fields` typed in, sent with "Submit for review"."""
    values = form_values(page, containing="base_number")
    values.pop("correction", None)  # an unticked box sends nothing
    return {**values, **fields, "action": "submit"}


@pytest.fixture
def published(target, add_channel, brief, revise, approver):
    """Revision 1 published on web and partner-feed; app configured, never sent anything."""
    add_channel("partner-feed")
    add_channel("app")
    approve(revise(brief, "Dockers walked out on Monday."), by=approver, channels=["web", "partner-feed"])
    run_worker()
    return brief


def test_edit_page__unpublished_brief__no_correction_field__forged_mark_refused_text_kept(brief, revise, editor):
    revise(brief, "Dockers walked out on Monday.")
    client = client_for(editor)
    page = client.get(edit_path(brief))
    assertNotContains(page, 'name="correction"')
    before = db_counts()

    forged = submission(page, body="Dockers walked out on Tuesday.", correction="1", correction_note="Fixed.")
    response = client.post(edit_path(brief), forged)

    assertContains(response, "nothing to correct", status_code=400)
    assertContains(response, "Dockers walked out on Tuesday.", status_code=400)  # the editor's text is kept
    assert db_counts() == before


def test_edit_page__published_brief__correction_submitted__revision_marked__page_shows_note_and_holders(
    published, editor, approver
):
    client = client_for(editor)
    page = client.get(edit_path(published))
    assertContains(page, "This is a correction")
    assertContains(page, 'name="correction_note"')

    sent = submission(page, body="Dockers walked out on Tuesday.", correction="1", correction_note=NOTE)
    response = client.post(edit_path(published), sent)

    assert response.status_code == 302, response.content.decode()[:2000]
    revision = Revision.objects.get(brief=published, number=2)
    assert revision.payload["correction"] is True and revision.payload["correction_note"] == NOTE

    page = client_for(approver).get(f"/briefs/{published.public_id}/revisions/2/")
    assertContains(page, "Revision 2 is a correction")
    assertContains(page, "An earlier version said &lt;b&gt;Monday&lt;/b&gt;")  # escaped, never markup
    assertContains(page, "holds revision 1", count=2)  # web and partner-feed, not app
    # The decision form sends the holders by hidden fields (locked in), the others as optional boxes.
    assertContains(page, '<input type="hidden" name="channels" value="web">')
    assertContains(page, '<input type="hidden" name="channels" value="partner-feed">')
    assertContains(page, '<input type="checkbox" name="channels" value="app">')

    brief_page = client.get(published.get_absolute_url())
    assertContains(brief_page, 'id="corrections"')
    assertContains(brief_page, "Not on any channel yet.")
    assertContains(brief_page, "Wrote revision 2, a correction")


def test_edit_page__correction_without_note__refused_text_kept__nothing_written(published, editor):
    client = client_for(editor)
    page = client.get(edit_path(published))
    before = db_counts()

    response = client.post(
        edit_path(published), submission(page, body="Dockers walked out on Tuesday.", correction="1")
    )

    assertContains(response, "needs its public correction note", status_code=400)
    assertContains(response, "Dockers walked out on Tuesday.", status_code=400)
    assert db_counts() == before


@pytest.mark.parametrize("forged", ["yes", "on", "0"])
def test_edit_page__forged_correction_mark__refused_nothing_written(published, editor, forged):
    client = client_for(editor)
    page = client.get(edit_path(published))
    before = db_counts()

    response = client.post(edit_path(published), submission(page, correction=forged, correction_note="Fixed."))

    assertContains(response, "not one this form makes", status_code=400)
    assert db_counts() == before


def test_edit_page__without_csrf_token__403_nothing_written(published, editor):
    client = Client(enforce_csrf_checks=True)
    client.force_login(editor)
    page = client.get(edit_path(published))
    before = db_counts()

    sent = submission(page, correction="1", correction_note="Fixed.")
    sent.pop("csrfmiddlewaretoken")
    response = client.post(edit_path(published), sent)

    assert response.status_code == 403
    assert db_counts() == before


def test_decision_form__forged_channels_leaving_out_a_holder__refused_nothing_written(published, editor, approver):
    revision = correct(published, "Dockers walked out on Tuesday.", by=editor)
    client = client_for(approver)
    path = f"/briefs/{published.public_id}/revisions/2/"
    values = form_values(client.get(path), containing="payload_hash")
    before = db_counts()

    forged = {**values, "channels_offered": "1", "channels": ["web"], "decision": "approved"}
    response = client.post(f"{path}decision/", forged)

    assertContains(response, "your choice leaves out Partner Feed (partner-feed) holds revision 1", status_code=400)
    assert db_counts() == before
    assert not Approval.objects.filter(revision=revision).exists()

    response = client.post(
        f"{path}decision/",
        {**values, "decision": "approved", "channels_offered": "1", "channels": ["web", "partner-feed"]},
    )
    assert response.status_code == 302
    run_worker()
    brief_page = client_for(editor).get(published.get_absolute_url())
    assertContains(brief_page, "Correction (revision 2) published, read back and verified", count=2)
    assertContains(brief_page, 'class="reached" data-channel="partner-feed"')


def test_autosave__correction_mark_and_note__saved_with_the_draft__answered_as_the_form_holds_them(published, editor):
    client = client_for(editor)
    values = form_values(client.get(edit_path(published)), containing="base_number")
    values.pop("correction", None)

    saved = client.post(
        f"/briefs/{published.public_id}/draft/", {**values, "correction": "1", "correction_note": "Half typed"}
    )

    assert saved.status_code == 200, saved.content
    story = saved.json()["saved"]["story"]
    assert (story["correction"], story["correction_note"]) == ("1", "Half typed")
    assert "Correction: Half typed" in saved.json()["saved"]["preview"]
    page = client.get(edit_path(published))
    assertContains(page, '<input type="checkbox" name="correction" value="1" data-draft="correction"', count=1)
    assertContains(page, 'id="id_correction" checked>')
