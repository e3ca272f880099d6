"""The web UI in a real browser (Debian's Chromium through Playwright) against a real HTTP server."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import expect

from approvals.models import Approval
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.models import Brief
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_browser__editor_writes_and_approver_approves(browser, live_server, make_user):
    make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("ava", Role.APPROVER, password=PASSWORD)

    editor = sign_in(browser, live_server, "eddie")
    editor.get_by_role("link", name="New brief").click()
    editor.get_by_label("Title").fill("Harbour strike")
    editor.get_by_label("Source material").fill("Dockers walked out at dawn.")
    editor.get_by_role("button", name="Create brief").click()
    # The click returns before the server has answered: look the brief up once its page is shown.
    editor.wait_for_url("**/briefs/brief-*/")
    brief = Brief.objects.get()
    expect(editor).to_have_url(f"{live_server.url}{brief.get_absolute_url()}")
    expect(editor.get_by_text(f"{brief.public_id} created.")).to_be_visible()
    editor.get_by_role("link", name="Write the story").click()
    expect(editor.get_by_label("Headline")).to_have_value("Harbour strike")
    editor.get_by_label("Body").fill("Dockers walked out at dawn.\nThe port is closed.")
    editor.get_by_role("button", name="Submit for review").click()
    expect(editor.get_by_text("Revision 1 submitted for review.")).to_be_visible()
    screenshot(editor, "a1-editor-revision")
    revision = brief.revisions.get(number=1)

    approver = sign_in(browser, live_server, "ava")
    approver.get_by_role("link", name=brief.public_id).click()
    approver.get_by_role("link", name="1", exact=True).click()
    expect(approver).to_have_url(f"{live_server.url}{revision.get_absolute_url()}")
    expect(approver.get_by_test_id("payload-hash")).to_have_text(revision.payload_hash)
    approver.get_by_label("Comment").fill("Solid, ship it.")
    screenshot(approver, "a2-approver-before")
    approver.get_by_role("button", name="Approve revision 1").click()

    expect(approver).to_have_url(f"{live_server.url}{revision.get_absolute_url()}")
    expect(approver.get_by_text("Approved: revision 1.")).to_be_visible()
    expect(approver.get_by_text("Approved by ava for exactly this text.")).to_be_visible()
    expect(approver.get_by_text("Solid, ship it.")).to_be_visible()
    expect(approver.get_by_role("button", name="Approve revision 1")).to_have_count(0)
    screenshot(approver, "a3-approver-after")
    approver.get_by_role("link", name=f"{brief.public_id} Harbour strike").click()
    expect(approver.locator("h1 + .card .status")).to_have_text("Approved")
    screenshot(approver, "a4-brief-approved")
    approval = Approval.objects.get()
    assert (approval.revision_id, approval.payload_hash, approval.decision) == (
        revision.pk,
        revision.payload_hash,
        Approval.Decision.APPROVED,
    )


def test_browser__edit_conflict__second_editor_keeps_text(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    make_user("edna", Role.EDITOR, password=PASSWORD)
    with transaction.atomic(durable=True):  # as a request would: the action locks the brief's row
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=eddie)
        check_create_revision(
            brief.public_id,
            base_number=0,
            title="Harbour strike",
            body="Dockers walked out.",
            acting_user=eddie,
        )
    edit_url = f"{live_server.url}/briefs/{brief.public_id}/edit/"
    first, second = sign_in(browser, live_server, "eddie"), sign_in(browser, live_server, "edna")
    for page in (first, second):
        page.goto(edit_url)
        expect(page.get_by_label("Body")).to_have_value("Dockers walked out.")

    first.get_by_label("Body").fill("Dockers returned at noon.")
    first.get_by_role("button", name="Submit for review").click()
    expect(first.get_by_text("Revision 2 submitted for review.")).to_be_visible()
    mine = "Talks resume at five.\nUnions <agree> & sign."
    second.get_by_label("Body").fill(mine)
    second.get_by_role("button", name="Submit for review").click()

    expect(second.get_by_text("Revision 2 was saved while you were editing revision 1.")).to_be_visible()
    assert second.get_by_label("Body").input_value() == mine
    expect(second.locator("input[name=base_number]")).to_have_value("1")
    expect(second.locator(".diff-field[data-field=body] ins:visible")).to_have_text("returned at noon")
    screenshot(second, "b1-conflict")
    assert not brief.revisions.filter(number=3).exists()

    second.get_by_role("button", name="Overwrite revision 2 with my version").click()
    expect(second.get_by_text("Revision 3 submitted for review.")).to_be_visible()
    assert brief.revisions.get(number=3).body.splitlines() == mine.splitlines()
