"""Live status regions (publishing.live): each page's partial, as htmx polls it — roles, content,
286 (stop polling) once nothing is in progress, and the stale decision form's notice."""

from __future__ import annotations

import pytest
from django.urls import reverse
from pytest_django.asserts import assertContains, assertNotContains, assertRedirects

from approvals.models import Approval
from publishing import selectors
from publishing.actions.briefs import check_create_brief
from publishing.roles import Role
from tests.approvals.test_approvals import decide
from tests.publishing.test_diff_views import publish
from tests.web import client_for

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
STOP_POLLING = 286


def brief_live_url(brief) -> str:
    return reverse("publishing:brief_live", args=[brief.public_id])


def revision_live_url(revision) -> str:
    return reverse("publishing:revision_live", args=[revision.brief.public_id, revision.number])


# --- Pages: complete without JavaScript, no full-page refresh ---------------------------------------


def test_pages__no_meta_refresh__polling_region_with_static_htmx(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    client.force_login(approver)

    for url, partial in [
        (brief.get_absolute_url(), brief_live_url(brief)),
        (revision.get_absolute_url(), revision_live_url(revision)),
        ("/", reverse("publishing:dashboard_live")),
    ]:
        response = client.get(url)
        assertNotContains(response, "http-equiv")
        assertContains(response, '<script src="/static/publishing/htmx.min.js" defer></script>')
        assertContains(response, '<script src="/static/publishing/live.js" defer></script>')
        assertContains(response, f'hx-get="{partial}')
    page = client.get(revision.get_absolute_url())
    assertContains(page, 'id="publication" data-state="none"')  # complete on first render
    assertContains(page, 'hx-include="#decision-form [name=revision_number], #decision-closed [name=decision_closed]"')


def test_revision_page__no_decision_form__poll_sends_nothing_of_a_form(client, editor, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    client.force_login(editor)  # the author: an editor, not an approver, so no decision form

    response = client.get(revision.get_absolute_url())

    assertContains(response, f'hx-get="{revision_live_url(revision)}"')
    assertNotContains(response, "hx-include")
    assertNotContains(response, 'id="decision-form"')


def test_revision_page__published__does_not_poll(client, editor, approver, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    publish(revision, by=approver)
    client.force_login(editor)
    response = client.get(revision.get_absolute_url())
    assertContains(response, 'data-state="published"')
    assertNotContains(response, "hx-get=")


# --- Partials: roles -----------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["editor", "approver", "operator"])
def test_partials__every_role_that_sees_briefs__200(users, brief, revise, role):
    revision = revise(brief, "Dockers walked out.")
    client = client_for(users[role])

    for url in [brief_live_url(brief), revision_live_url(revision), reverse("publishing:dashboard_live")]:
        assert client.get(url, **HTMX).status_code == 200, url


def test_partials__no_role__403(users, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    client = client_for(users["no_group"])

    for url in [brief_live_url(brief), revision_live_url(revision), reverse("publishing:dashboard_live")]:
        assert client.get(url, **HTMX).status_code == 403, url


def test_partials__signed_out__stop_polling_and_swap_nothing(brief, revise):
    revision = revise(brief, "Dockers walked out.")
    client = client_for(None)

    for url in [brief_live_url(brief), revision_live_url(revision), reverse("publishing:dashboard_live"), "/ops/live/"]:
        response = client.get(url, **HTMX)
        assert response.status_code == STOP_POLLING, url
        assert response["HX-Reswap"] == "none"
        assert response.content == b""


def test_partials__opened_without_htmx__sent_to_the_full_page(client, editor, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    client.force_login(editor)

    assertRedirects(client.get(brief_live_url(brief)), brief.get_absolute_url())
    assertRedirects(client.get(revision_live_url(revision)), revision.get_absolute_url())
    assertRedirects(client.get(reverse("publishing:dashboard_live") + "?q=harbour"), "/")


def test_partials__post__405(client, editor, brief):
    client.force_login(editor)
    assert client.post(brief_live_url(brief), **HTMX).status_code == 405


# --- Partials: content and when polling stops ------------------------------------------------------


def test_brief_partial__in_review__status_pipeline_and_timeline_then_keeps_polling(client, approver, brief, revise):
    revise(brief, "Dockers walked out.")
    client.force_login(approver)

    response = client.get(brief_live_url(brief), **HTMX)

    assert response.status_code == 200
    assertContains(response, '<p id="brief-status" aria-live="polite" hx-swap-oob="true">')
    assertContains(response, "In review")
    assertContains(response, 'id="pipeline"')
    assertContains(response, 'data-testid="timeline"')
    assertNotContains(response, "<form")  # the assign and compare forms stay out of the swapped region
    assertNotContains(response, "<html")


def test_brief_partial__nothing_in_progress__286(client, editor, approver, revise):
    brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    revision = revise(brief, "Dockers walked out.")
    decide(revision, decision=Approval.Decision.CHANGES_REQUESTED, by=approver, comment="Which port?")
    client.force_login(editor)

    response = client.get(brief_live_url(brief), **HTMX)

    assert response.status_code == STOP_POLLING
    assertContains(response, "Changes requested", status_code=STOP_POLLING)
    assertNotContains(client.get(brief.get_absolute_url()), "hx-get=")


def test_revision_partial__awaiting_a_decision__200_with_every_region(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    client.force_login(approver)

    response = client.get(revision_live_url(revision), {"revision_number": revision.number}, **HTMX)

    assert response.status_code == 200
    assertContains(response, 'id="publication" data-state="none"')
    assertContains(response, '<div id="revision-notice" hx-swap-oob="true">')
    assertContains(response, '<div id="decisions" hx-swap-oob="true">')
    assertNotContains(response, "decision-closed")  # the form still applies: left alone
    assertNotContains(response, "<form")


def test_revision_partial__computes_no_diff__the_page_does(client, approver, brief, revise, monkeypatch):
    revise(brief, "Dockers walked out.")
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)
    diffed: list[int] = []
    real_diff = selectors.diff_revisions

    def counting_diff(old, new):
        diffed.append(new.number)
        return real_diff(old, new)

    monkeypatch.setattr(selectors, "diff_revisions", counting_diff)

    assert client.get(revision_live_url(revision), **HTMX).status_code == 200
    assert diffed == []  # a poll every 2 s never diffs the texts again
    assert client.get(revision.get_absolute_url()).status_code == 200
    assert diffed == [2]


def test_revision_partial__approved_by_another__form_replaced_by_notice(client, approver, make_user, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    decide(revision, decision=Approval.Decision.APPROVED, by=make_user("abe", Role.APPROVER))
    client.force_login(approver)

    response = client.get(revision_live_url(revision), {"revision_number": revision.number}, **HTMX)

    assert response.status_code == 200  # publishing: more to come
    assertContains(response, 'id="publication" data-state="publishing"')
    assertContains(response, 'hx-swap-oob="outerHTML:#decision-form"')
    assertContains(response, "was approved by abe meanwhile and is being published")
    assertContains(response, '<textarea id="kept-comment" rows="4" readonly data-keeps="comment"></textarea>')
    assertContains(response, "Approved for this exact hash by abe.")
    # A page without the form (the poll sends no form number) gets no notice to place.
    assertNotContains(client.get(revision_live_url(revision), **HTMX), "decision-closed")


def test_revision_partial__newer_revision__notice_and_286(client, approver, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)

    response = client.get(revision_live_url(revision), {"revision_number": revision.number}, **HTMX)

    assert response.status_code == STOP_POLLING
    assertContains(response, "Revision 1 is no longer current: revision 2 was saved meanwhile.", status_code=286)
    assertContains(response, f'href="/briefs/{brief.public_id}/revisions/2/">Review revision 2</a>', status_code=286)
    assertContains(response, "This revision is not current", status_code=286)


def test_revision_partial__published__published_status_and_286(client, approver, make_user, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    publish(revision, by=make_user("abe", Role.APPROVER))
    client.force_login(approver)

    response = client.get(revision_live_url(revision), {"revision_number": revision.number}, **HTMX)

    assert response.status_code == STOP_POLLING
    assertContains(response, 'data-state="published"', status_code=286)
    assertContains(response, 'data-testid="permalink"', status_code=286)
    assertContains(response, "was published meanwhile", status_code=286)


def test_stale_form_submitted__still_the_clear_refusal(client, approver, make_user, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(approver)

    response = client.post(
        reverse("approvals:decide", args=[brief.public_id, 1]),
        {
            "revision_number": 1,
            "payload_hash": revision.payload_hash,
            "decision": "changes_requested",
            "comment": "Keep me",
        },
    )

    assertContains(response, "Revision 1 is no longer current: revision 2 is.", status_code=409)
    assertContains(response, "Keep me", status_code=409)


def test_dashboard_partial__rows_for_the_same_filters(client, editor, revise):
    for title in ("Harbour strike", "Budget vote"):
        revise(check_create_brief(title=title, source_material="", acting_user=editor), "Text.", title=title)
    client.force_login(editor)

    response = client.get(reverse("publishing:dashboard_live"), {"q": "harbour"}, **HTMX)

    assert response.status_code == 200  # in review: a decision may come any moment
    assertContains(response, "Harbour strike")
    assertNotContains(response, "Budget vote")
    assertContains(response, "In review")
    assertNotContains(response, "<table")


def test_dashboard_partial__nothing_can_move__286(client, editor, approver, revise):
    brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    decide(revise(brief, "Text."), decision=Approval.Decision.CHANGES_REQUESTED, by=approver)
    client.force_login(editor)

    assert client.get(reverse("publishing:dashboard_live"), **HTMX).status_code == STOP_POLLING
