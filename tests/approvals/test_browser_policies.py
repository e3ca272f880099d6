"""An approval policy walked in a real browser (Debian's Chromium through Playwright) against a real HTTP
server (docs/policies.md): a Politics brief needs two approvals from distinct approvers, and the editor
flags it for legal review, so one of them must come from Legal. Each approval that does not complete the
policy publishes nothing and tells the next reviewers, by email through the worker; Legal's approval
completes it and writes the publish intents."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.db import transaction
from playwright.sync_api import Page, expect

from approvals.models import Approval, ApprovalCompletion, Notification
from approvals.notifications import NOTIFICATION_EMAIL
from publishing.actions.revisions import check_create_revision
from publishing.identities import PUBLISH
from publishing.models import Brief, Desk
from publishing.roles import LEGAL_GROUP, Role
from tests.browser import PASSWORD, screenshot, sign_in
from workers.drain import drain
from workers.models import Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def sent_emails() -> list[tuple[str, str]]:
    """The notification emails the worker sent since the last call, as (recipient, subject)."""
    drain(worker_id="w-mail", kinds=[NOTIFICATION_EMAIL], time_budget=30, idle_wait=0.3)
    sent = sorted((message.to[0], message.subject) for message in mail.outbox)
    mail.outbox.clear()
    return sent


def approve(page: Page, url: str, number: int) -> None:
    page.goto(url)
    page.get_by_role("button", name=f"Approve revision {number}").click()


def needed(emails: list[tuple[str, str]]) -> list[str]:
    """Who of `emails` was asked for their approval."""
    return [to.split("@")[0] for to, subject in emails if subject.startswith("[Galley] Your approval is needed:")]


def publish_operations(brief: Brief) -> int:
    return Operation.objects.filter(kind=PUBLISH, subject_type="brief", subject_id=brief.public_id).count()


def test_browser__two_approvals_and_legal__completed_by_legal_with_notifications(browser, live_server, make_user):
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    ava = make_user("ava", Role.APPROVER, password=PASSWORD)
    abe = make_user("abe", Role.APPROVER, password=PASSWORD)
    lena = make_user("lena", Role.APPROVER, password=PASSWORD)
    lena.groups.add(Group.objects.get(name=LEGAL_GROUP))
    for user in (eddie, ava, abe, lena):
        user.email = f"{user.username}@newsroom.example"
        user.save(update_fields=["email"])
    Desk.objects.create(slug="politics", name="Politics", approvals_required=2)

    editor = sign_in(browser, live_server, "eddie")
    editor.goto(f"{live_server.url}/briefs/new/")
    editor.get_by_label("Title").fill("Council budget vote")
    editor.get_by_label("Source material").fill("The council votes on the budget tonight.")
    editor.get_by_label("Desk").select_option(label="Politics")
    editor.get_by_role("button", name="Create brief").click()
    brief = Brief.objects.get(title="Council budget vote")
    assert brief.desk.slug == "politics"
    with transaction.atomic():
        revision, _created = check_create_revision(
            brief.public_id,
            base_number=0,
            title="Council passes the budget",
            body="By 31 votes to 20.",
            acting_user=eddie,
        )
    revision_url = f"{live_server.url}{revision.get_absolute_url()}"
    assert sent_emails() == sorted(
        (f"{name}@newsroom.example", f"[Galley] Submitted for review: {brief.public_id}")
        for name in ("abe", "ava", "lena")
    )

    editor.goto(f"{live_server.url}{brief.get_absolute_url()}")
    editor.get_by_role("button", name="Needs legal review").click()
    expect(editor.get_by_text("Legal review required").first).to_be_visible()
    assert needed(sent_emails()) == ["lena"]

    first = sign_in(browser, live_server, "ava")
    first.goto(revision_url)
    policy = first.get_by_test_id("policy")
    expect(policy).to_contain_text("Politics")
    expect(policy).to_contain_text("2 approvals from distinct approvers, including one from Legal")
    expect(first.get_by_test_id("policy-legal")).to_be_visible()
    expect(first.get_by_test_id("policy-approvals")).to_have_text("No approval yet.")
    approve(first, revision_url, 1)
    expect(first.get_by_test_id("policy-approvals")).to_contain_text("ava")
    expect(first.get_by_test_id("policy-needed")).to_contain_text("1 more approval and an approval from Legal")
    # ava has decided: her page offers no second approval.
    expect(first.get_by_role("button", name="Approve revision 1")).to_have_count(0)
    screenshot(first, "policy-one-of-two")
    assert publish_operations(brief) == 0 and not ApprovalCompletion.objects.exists()
    emails = sent_emails()
    # lena's unread "needed" notification takes the event (coalesced): her one email was the flag's.
    assert needed(emails) == ["abe"]
    assert ("eddie@newsroom.example", f"[Galley] Approved: {brief.public_id}") in emails

    second = sign_in(browser, live_server, "abe")
    approve(second, revision_url, 1)
    expect(second.get_by_test_id("policy-approvals")).to_contain_text("abe")
    expect(second.get_by_test_id("policy-needed")).to_have_text("Still needed: an approval from Legal.")
    assert publish_operations(brief) == 0 and not ApprovalCompletion.objects.exists()
    assert needed(sent_emails()) == []
    asked = Notification.objects.get(recipient=lena, event=Notification.Event.REVIEW_NEEDED, read_at__isnull=True)
    assert asked.count == 3 and "abe approved revision 1" in asked.message and "an approval from Legal" in asked.message

    legal = sign_in(browser, live_server, "lena")
    expect(legal.get_by_test_id("nav-inbox")).to_have_text("Inbox 1")
    legal.get_by_test_id("nav-inbox").click()
    row = legal.get_by_test_id("inbox-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(brief.public_id)
    approve(legal, revision_url, 1)
    expect(legal.get_by_test_id("policy-complete")).to_contain_text("Completed by lena")
    screenshot(legal, "policy-completed")

    completion = ApprovalCompletion.objects.get()
    assert completion.approval.approver == lena
    assert (completion.desk.slug, completion.approvals_required, completion.required_groups) == (
        "politics",
        2,
        [LEGAL_GROUP],
    )
    assert list(Approval.objects.order_by("id").values_list("approver__username", flat=True)) == ["ava", "abe", "lena"]
    assert publish_operations(brief) == brief.channels.count() == 1
    # Completing it asks nobody else for an approval.
    assert needed(sent_emails()) == []
    assert Notification.objects.filter(event=Notification.Event.REVIEW_NEEDED).count() == 2  # abe's and lena's
