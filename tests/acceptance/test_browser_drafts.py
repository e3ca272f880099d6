"""The working draft in a real browser (Debian's Chromium through Playwright) against a real HTTP
server: autosave survives a killed browser, text the server never got survives a reload, two
editors see each other, a conflict between two tabs shows at once, and taking over is explicit."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from approvals.models import Notification
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.models import Brief, Draft
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in
from workers.models import AuditEvent

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

# Resolves after the page's next heartbeat has been answered (draft.js posts to …/draft/presence/).
SETTLED_HEARTBEAT = """() => new Promise(resolve => {
  const seen = new PerformanceObserver(list => {
    if (list.getEntries().some(entry => entry.name.endsWith("/draft/presence/"))) { seen.disconnect(); resolve(); }
  });
  seen.observe({ type: "resource" });
})"""
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def brief_with_a_revision(editor) -> Brief:
    with transaction.atomic(durable=True):  # as a request would: the action locks the brief's row
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
        check_create_revision(
            brief.public_id, base_number=0, title="Harbour strike", body="Dockers walked out.", acting_user=editor
        )
    return brief


def open_editor(browser, live_server, username: str, brief: Brief, *, body: str = "Dockers walked out.") -> Page:
    """A fresh browser context signed in as `username`, on the brief's edit page showing `body`."""
    page = sign_in(browser, live_server, username)
    page.set_viewport_size(DESKTOP)
    page.goto(f"{live_server.url}/briefs/{brief.public_id}/edit/")
    expect(page.get_by_label("Body")).to_have_value(body)
    return page


def draft_body(brief: Brief) -> str:
    draft = Draft.objects.filter(brief=brief).first()
    return draft.story["body"] if draft else ""


def test_browser__autosave_survives_a_killed_browser_context(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("ava", Role.APPROVER, password=PASSWORD)
    brief = brief_with_a_revision(eddie)
    Notification.objects.all().delete()
    typed = "Dockers walked out at dawn.\n\nThe port is closed; ships wait offshore."
    page = open_editor(browser, live_server, "eddie", brief)
    console_errors: list[str] = []
    page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)

    page.get_by_label("Body").press_sequentially("Typed. ")
    page.get_by_label("Body").fill(typed)
    page.get_by_label("Standfirst").fill("Two days of strike.")
    expect(page.locator("#draft-status")).to_have_attribute("data-state", "saved")
    screenshot(page, "draft-autosaved-desktop")
    assert console_errors == [], console_errors
    page.context.close()  # no unload, no goodbye: as a crashed or killed browser

    again = open_editor(browser, live_server, "eddie", brief, body=typed)
    expect(again.get_by_label("Standfirst")).to_have_value("Two days of strike.")
    again.set_viewport_size(PHONE)
    screenshot(again, "draft-after-kill-phone")
    # An autosave is no revision, and tells no approver.
    assert list(brief.revisions.values_list("number", flat=True)) == [1]
    assert not Notification.objects.exists()

    again.get_by_role("button", name="Submit for review").click()
    expect(again.get_by_text("Revision 2 submitted for review.")).to_be_visible()
    assert brief.revisions.get(number=2).body == typed
    assert Notification.objects.filter(event=Notification.Event.SUBMITTED, revision_number=2).count() == 1


def test_browser__server_unreachable__typed_text_kept_in_the_browser_and_restored_on_reload(
    browser, live_server, make_user
):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    brief = brief_with_a_revision(eddie)
    page = open_editor(browser, live_server, "eddie", brief)
    page.route("**/draft/", lambda route: route.abort())  # the autosave never reaches the server

    page.get_by_label("Body").fill("Typed while the network was down.")
    expect(page.locator("#draft-status")).to_have_attribute("data-state", "error")
    expect(page.locator("#draft-status")).to_contain_text("Your text is kept in this browser")
    assert draft_body(brief) == ""
    page.unroute("**/draft/")
    page.reload()

    expect(page.get_by_label("Body")).to_have_value("Typed while the network was down.")
    expect(page.locator("#draft-restored")).to_contain_text("Restored your unsaved text from this browser")
    expect(page.locator("#draft-status")).to_have_attribute("data-state", "saved")
    assert draft_body(brief) == "Typed while the network was down."
    screenshot(page, "draft-restored")


def test_browser__two_editors_see_each_other__on_the_edit_and_brief_pages(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("ana", Role.EDITOR, password=PASSWORD)
    brief = brief_with_a_revision(eddie)
    mine = open_editor(browser, live_server, "eddie", brief)
    brief_page = mine.context.new_page()
    brief_page.goto(f"{live_server.url}{brief.get_absolute_url()}")
    expect(brief_page.locator("#brief-presence li")).to_have_count(0)

    theirs = open_editor(browser, live_server, "ana", brief)
    expect(mine.locator("#draft-presence")).to_contain_text("ana has the draft open")
    expect(theirs.locator("#draft-presence")).to_contain_text("eddie has the draft open")
    theirs.get_by_label("Byline").press_sequentially("Ana Costa")

    expect(mine.locator("#draft-presence")).to_contain_text("ana is editing")
    expect(brief_page.locator("#brief-presence")).to_contain_text("ana is editing")
    screenshot(brief_page, "presence-brief-page")
    screenshot(mine, "presence-edit-page")

    theirs.goto(f"{live_server.url}{brief.get_absolute_url()}")  # Ana leaves the edit page
    expect(brief_page.locator("#brief-presence li")).to_have_count(0)


def test_browser__conflict_between_two_tabs__shown_at_once__keep_mine_or_take_theirs(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    brief = brief_with_a_revision(eddie)
    tab_a = open_editor(browser, live_server, "eddie", brief)
    tab_b = open_editor(browser, live_server, "eddie", brief)

    tab_a.get_by_label("Body").fill("Tab A's text.")
    expect(tab_a.locator("#draft-status")).to_have_attribute("data-state", "saved")
    tab_b.get_by_label("Body").fill("Tab B's text.")

    # B learns at its first save, long before any submission; its text stays where it is.
    conflict = tab_b.locator("#draft-conflict")
    expect(conflict).to_be_visible()
    expect(conflict.locator("tr[data-field=body]")).to_contain_text("Tab A's text.")
    expect(conflict.locator("tr[data-field=body]")).to_contain_text("Tab B's text.")
    expect(tab_b.get_by_label("Body")).to_have_value("Tab B's text.")
    expect(tab_b.locator("#draft-status")).to_have_attribute("data-state", "conflict")
    assert draft_body(brief) == "Tab A's text."
    screenshot(tab_b, "draft-conflict")

    tab_b.get_by_role("button", name="Keep mine (save over theirs)").click()
    expect(tab_b.locator("#draft-status")).to_have_attribute("data-state", "saved")
    assert draft_body(brief) == "Tab B's text."

    tab_a.get_by_label("Body").fill("Tab A's text, later.")
    expect(tab_a.locator("#draft-conflict")).to_be_visible()
    tab_a.get_by_role("button", name="Take theirs").click()
    expect(tab_a.get_by_label("Body")).to_have_value("Tab B's text.")
    expect(tab_a.locator("#draft-conflict")).to_be_hidden()
    assert draft_body(brief) == "Tab B's text."
    assert list(brief.revisions.values_list("number", flat=True)) == [1]


def test_browser__take_over__explicit_audited__the_other_page_stops_saving(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    ana = make_user("ana", Role.EDITOR, password=PASSWORD)
    brief = brief_with_a_revision(eddie)
    hers = open_editor(browser, live_server, "ana", brief)
    hers.get_by_label("Body").fill("Ana's text.")
    expect(hers.locator("#draft-status")).to_have_attribute("data-state", "saved")

    mine = open_editor(browser, live_server, "eddie", brief, body="Ana's text.")
    holder = mine.locator("#draft-holder")
    expect(holder).to_contain_text("ana is editing this draft: your changes are not saved until you take over.")
    mine.get_by_label("Body").fill("Eddie's text.")
    expect(mine.locator("#draft-status")).to_have_attribute("data-state", "held")
    assert draft_body(brief) == "Ana's text."
    screenshot(mine, "draft-held")

    mine.get_by_role("button", name="Take over editing").click()
    expect(holder).to_be_hidden()
    expect(mine.locator("#draft-status")).to_have_attribute("data-state", "saved")
    assert draft_body(brief) == "Eddie's text."
    event = AuditEvent.objects.get(event_type="draft.taken_over")
    assert (event.actor_id, event.old_state["holder"], event.new_state["holder"]) == (eddie.pk, "ana", "eddie")

    # Ana's page hears it at its next heartbeat, and saves nothing more until she takes over back.
    expect(hers.locator("#draft-holder")).to_contain_text("eddie took over editing.")
    hers.get_by_label("Body").fill("Ana's text, after the take-over.")
    expect(hers.locator("#draft-status")).to_have_attribute("data-state", "held")
    hers.evaluate(SETTLED_HEARTBEAT)
    expect(hers.locator("#draft-holder")).to_contain_text("eddie took over editing.")  # said until she takes over
    assert draft_body(brief) == "Eddie's text."
    screenshot(hers, "draft-taken-over")

    hers.get_by_role("button", name="Take over editing").click()
    # Eddie saved after her page did: his text is shown beside hers, to choose.
    expect(hers.locator("#draft-conflict tr[data-field=body]")).to_contain_text("Eddie's text.")
    hers.get_by_role("button", name="Keep mine (save over theirs)").click()
    expect(hers.locator("#draft-status")).to_have_attribute("data-state", "saved")
    assert draft_body(brief) == "Ana's text, after the take-over."
    assert AuditEvent.objects.filter(event_type="draft.taken_over", actor=ana).count() == 1
