"""Live status regions (publishing.live): each page's partial, as htmx polls it — roles, content,
286 (stop polling) once nothing is in progress, and the stale decision form's notice."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from django.urls import reverse
from pytest_django.asserts import assertContains, assertNotContains, assertRedirects

from approvals.models import Approval
from publishing.actions.briefs import check_create_brief
from publishing.actions.resolutions import check_cancel_publication
from publishing.identities import publish_key
from publishing.roles import Role
from publishing.selectors import review
from tests.approvals.test_approvals import decide
from tests.publishing.handlers.test_publications import approve, run_worker
from tests.publishing.test_diff_views import publish
from tests.web import client_for
from workers.models import Operation

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
STOP_POLLING = 286


def _region(html: str, tag: str, ident: str) -> str:
    """The inside of the one element `<tag id="ident"…>` of a page or a poll's answer (which has it
    exactly once: in place, or out of band)."""
    found = re.findall(rf'<{tag}[^>]* id="{ident}"[^>]*>(.*?)</{tag}>', html, re.S)
    assert len(found) == 1, f"{len(found)} elements #{ident}"
    return found[0]


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


def test_revision_page__published_and_current__keeps_polling_for_a_newer_revision(
    client, editor, approver, brief, revise
):
    revision = revise(brief, "Dockers walked out.")
    publish(revision, by=approver)
    client.force_login(editor)
    response = client.get(revision.get_absolute_url())
    assertContains(response, 'data-state="published"')
    assertContains(response, f'hx-get="{revision_live_url(revision)}"')


def test_revision_page__not_current_and_nothing_under_way__does_not_poll(client, editor, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(editor)
    assertNotContains(client.get(revision.get_absolute_url()), "hx-get=")


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


def test_brief_partial__changes_requested__keeps_polling_for_the_next_revision(client, editor, approver, revise):
    brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    revision = revise(brief, "Dockers walked out.")
    decide(revision, decision=Approval.Decision.CHANGES_REQUESTED, by=approver, comment="Which port?")
    client.force_login(editor)

    response = client.get(brief_live_url(brief), **HTMX)

    assert response.status_code == 200  # an editor may write the next revision any moment
    assertContains(response, "Changes requested")
    assertContains(client.get(brief.get_absolute_url()), f'hx-get="{brief_live_url(brief)}"')


def test_brief_partial__revision_1_arrives__revision_links_and_the_editors_button_follow(client, editor, revise):
    """Issue 18: after revision 1 arrived live the page still said "Revisions none yet" and offered
    "Write the first revision" (now "Write the story"): both are regions of the poll now, drawn from
    the same state."""
    brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    client.force_login(editor)
    before = client.get(brief_live_url(brief), **HTMX).content.decode()
    assert '<span class="muted">none yet</span>' in _region(before, "nav", "revision-links")
    assert "Write the story" in _region(before, "div", "brief-actions")

    revise(brief, "Dockers walked out.")
    after = client.get(brief_live_url(brief), **HTMX).content.decode()

    links = _region(after, "nav", "revision-links")
    assert f'<a href="/briefs/{brief.public_id}/revisions/1/">1</a> <span class="muted">(current)</span>' in links
    assert "none yet" not in links
    actions = _region(after, "div", "brief-actions")
    assert "Edit draft" in actions and "Write the story" not in actions
    assert "In review" in _region(after, "p", "brief-status")


def test_brief_partial__published__keeps_polling_and_a_new_revision_shows(client, editor, approver, brief, revise):
    """Issue 18: a published brief's open page stopped polling, so a new revision never showed."""
    publish(revise(brief, "Dockers walked out."), by=approver)
    client.force_login(editor)
    published = client.get(brief_live_url(brief), **HTMX)
    assert published.status_code == 200
    assertContains(published, "Published")

    revise(brief, "Dockers walked out at dawn.")
    response = client.get(brief_live_url(brief), **HTMX)

    assert response.status_code == 200
    assert "In review" in _region(response.content.decode(), "p", "brief-status")
    assert f'href="/briefs/{brief.public_id}/revisions/2/">2</a>' in _region(
        response.content.decode(), "nav", "revision-links"
    )


@pytest.mark.django_db(transaction=True)
def test_brief_badge__operator_cancelled_the_publish__no_longer_says_approved(
    client, target, settings, editor, approver, operator, revise
):
    """Issue 18: after an operator cancelled a publish the badge still said "Approved"."""
    brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    revision = revise(brief, "Dockers walked out.")
    settings.GALLEY_TARGET_TOKEN = "revoked-token"  # the target refuses: a dead letter for an operator
    approve(revision, by=approver)
    assert run_worker() == {"dead": 1}
    with transaction.atomic(durable=True):
        outcome = check_cancel_publication(
            Operation.objects.get(key=publish_key(brief.public_id, 1)), reason="wrong desk", acting_user=operator
        )
    assert outcome.changed
    client.force_login(editor)

    for html in (
        client.get(brief.get_absolute_url()).content.decode(),
        client.get(brief_live_url(brief), **HTMX).content.decode(),
    ):
        status = _region(html, "p", "brief-status")
        assert '<span class="status status-cancelled">Approved, not published</span>' in status
        assert "Not published: cancelled by an operator: wrong desk" in status
        assert ">Approved</span>" not in status
    # The dashboard's row, and its poll, by the same rule.
    for html in (
        client.get("/").content.decode(),
        client.get(reverse("publishing:dashboard_live"), **HTMX).content.decode(),
    ):
        assert '<span class="status status-cancelled">Approved, not published</span>' in html
        assert "Not published: cancelled by an operator: wrong desk" in html


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
    real_diff = review.diff_revisions

    def counting_diff(old, new):
        diffed.append(new.number)
        return real_diff(old, new)

    monkeypatch.setattr(review, "diff_revisions", counting_diff)

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
    assertContains(response, "Approved by abe for exactly this text.")
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


def test_revision_partial__published__published_status_and_keeps_polling(client, approver, make_user, brief, revise):
    revision = revise(brief, "Dockers walked out.")
    publish(revision, by=make_user("abe", Role.APPROVER))
    client.force_login(approver)

    response = client.get(revision_live_url(revision), {"revision_number": revision.number}, **HTMX)

    assert response.status_code == 200  # still current: a newer revision may come any moment
    assertContains(response, 'data-state="published"')
    assertContains(response, 'data-testid="permalink"')
    assertContains(response, "was published meanwhile")


def test_revision_partial__newer_revision__the_current_mark_goes_with_the_notice(client, editor, brief, revise):
    """Issue 18: "Revision 5 (current)" stood above "This revision is not current: revision 6 is"."""
    revision = revise(brief, "Dockers walked out.")
    client.force_login(editor)
    assert "(current)" in _region(
        client.get(revision_live_url(revision), **HTMX).content.decode(), "span", "revision-current"
    )

    revise(brief, "Dockers walked out at dawn.")
    response = client.get(revision_live_url(revision), **HTMX)

    html = response.content.decode()
    assert "(current)" not in _region(html, "span", "revision-current")
    assert "This revision is not current" in _region(html, "div", "revision-notice")


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


def test_dashboard_partial__changes_requested__keeps_polling_for_the_next_revision(client, editor, approver, revise):
    brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    decide(revise(brief, "Text."), decision=Approval.Decision.CHANGES_REQUESTED, by=approver)
    client.force_login(editor)

    assert client.get(reverse("publishing:dashboard_live"), **HTMX).status_code == 200
    assertContains(client.get("/"), 'hx-get="/live/briefs/"')
