"""The review workflow in a real browser (Debian's Chromium through Playwright) against a real HTTP
server: an editor assigns a brief to an approver, who finds it in the inbox and comments; the
editor replies. The assignment's email leaves through the worker, never the request."""

from __future__ import annotations

import pytest
from django.core import mail
from django.db import transaction
from playwright.sync_api import expect

from approvals.models import Comment
from approvals.notifications import NOTIFICATION_EMAIL
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in
from workers.drain import drain

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_browser__assign_inbox_comment_and_reply(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    ava = make_user("ava", Role.APPROVER, password=PASSWORD)
    make_user("abe", Role.APPROVER, password=PASSWORD)
    for user in (eddie, ava):
        user.email = f"{user.username}@newsroom.example"
        user.save(update_fields=["email"])
    title = "Harbour strike: dockers walk out over the night-shift rota and the port closes until Monday"
    brief = check_create_brief(title=title, source_material="Dockers walked out at dawn.", acting_user=eddie)
    with transaction.atomic():
        revision, _created = check_create_revision(
            brief.public_id, base_number=0, title=title, body="Dockers walked out at dawn.", acting_user=eddie
        )
    drain(worker_id="w-mail", kinds=[NOTIFICATION_EMAIL], time_budget=30, idle_wait=0.3)
    mail.outbox.clear()

    editor = sign_in(browser, live_server, "eddie")
    editor.goto(f"{live_server.url}{brief.get_absolute_url()}")
    expect(editor.get_by_test_id("assignment")).to_contain_text("Not assigned")
    editor.get_by_label("Assign to").select_option(label="ava")
    editor.get_by_role("button", name="Assign").click()
    expect(editor.get_by_text(f"{brief.public_id} is assigned to ava.")).to_be_visible()
    expect(editor.get_by_test_id("assignment")).to_contain_text("Assigned to ava")
    # The request only wrote the intent; the worker sends the email.
    assert mail.outbox == []
    drain(worker_id="w-mail", kinds=[NOTIFICATION_EMAIL], time_budget=30, idle_wait=0.3)
    assert [(m.to, m.subject) for m in mail.outbox] == [
        (["ava@newsroom.example"], f"[Galley] Assigned for review: {brief.public_id}")
    ]

    approver = sign_in(browser, live_server, "ava")
    expect(approver.get_by_test_id("nav-inbox")).to_have_text("Inbox 1")
    approver.get_by_test_id("nav-inbox").click()
    expect(approver.get_by_role("heading", name="Awaiting my review")).to_be_visible()
    row = approver.get_by_test_id("inbox-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(brief.public_id)
    expect(row).to_contain_text("Revision 1")
    screenshot(approver, "inbox-desktop")
    approver.set_viewport_size({"width": 390, "height": 844})
    expect(row).to_be_visible()
    screenshot(approver, "inbox-phone")
    approver.set_viewport_size({"width": 1280, "height": 800})

    row.get_by_role("link", name="Revision 1").click()
    expect(approver).to_have_url(f"{live_server.url}{revision.get_absolute_url()}")
    approver.get_by_label("Start a thread").fill("Which union called the strike?")
    approver.get_by_role("button", name="Start thread").click()
    thread = approver.get_by_test_id("thread")
    expect(thread).to_contain_text("Which union called the strike?")

    editor.goto(f"{live_server.url}{revision.get_absolute_url()}")
    first = Comment.objects.get()
    editor.locator(f"#reply-{first.pk}").fill("The dockers' union; I have added it.")
    editor.get_by_role("button", name="Reply").click()
    expect(editor.get_by_text("Reply posted.")).to_be_visible()
    expect(editor.get_by_test_id("reply")).to_contain_text("The dockers' union; I have added it.")

    approver.reload()
    expect(approver.get_by_test_id("reply")).to_contain_text("The dockers' union; I have added it.")
    approver.get_by_role("button", name="Resolve thread").click()
    expect(approver.get_by_text("Thread resolved.")).to_be_visible()
    expect(approver.get_by_role("button", name="Reopen thread")).to_be_visible()
    screenshot(approver, "review-thread")
    approver.goto(f"{live_server.url}{brief.get_absolute_url()}")
    expect(approver.get_by_test_id("brief-thread")).to_contain_text("Resolved")
    screenshot(approver, "review-brief")
    reply = Comment.objects.get(parent=first)
    assert (reply.author.username, first.author.username) == ("eddie", "ava")
