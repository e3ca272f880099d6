"""The editor's pages pass axe-core (axe-playwright-python) with no serious or critical violation —
names for every control, contrast, landmarks, keyboard focus — at 1280 px and at 390 px, in Chromium:
the dashboard, a brief's page, a revision's page (with a publish in trouble, told in plain words), the
inbox and the notifications. Each page is saved as plain-<page>-desktop/-phone (tests/browser.py)."""

from __future__ import annotations

import time

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.db import transaction
from playwright.sync_api import Page, expect

from approvals.actions import check_assign_brief
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.identities import PUBLISH
from publishing.models import Brief
from publishing.roles import Role
from tests.approvals.test_approvals import decide
from tests.browser import PASSWORD, screenshot, sign_in
from workers.actions.claims import claim_operations, fail_operation
from workers.errors import FailureKind, OperationFailed

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
BLOCKING = {"serious", "critical"}


def write(brief: Brief, *, title: str, body: str, base: int, by) -> None:
    with transaction.atomic(durable=True):
        check_create_revision(brief.public_id, base_number=base, title=title, body=body, acting_user=by)


@pytest.fixture
def newsroom(make_user) -> tuple[Brief, Brief]:
    """A brief in review assigned to ava (renamed since it was created), and one approved whose publish
    is retrying because the website does not answer."""
    eddie = make_user("eddie", Role.EDITOR, password=PASSWORD)
    ava = make_user("ava", Role.APPROVER, password=PASSWORD)
    with transaction.atomic(durable=True):
        review = check_create_brief(
            title="Harbour strike", source_material="Dockers walked out at dawn.", acting_user=eddie
        )
        trouble = check_create_brief(title="Tram fares", source_material="", acting_user=eddie)
    write(review, title="Harbour strike", body="Dockers walked out at dawn.", base=0, by=eddie)
    write(review, title="Dockers stop the port for a second day", body="Dockers walked out again.", base=1, by=eddie)
    with transaction.atomic(durable=True):
        check_assign_brief(review.public_id, assignee=str(ava.pk), acting_user=eddie)
    write(trouble, title="Tram fares rise in March", body="Fares go up by 5%.", base=0, by=eddie)
    decide(trouble.revisions.get(), by=ava)
    (claimed,) = claim_operations(worker_id="w-test", limit=1, kinds=[PUBLISH])
    fail_operation(claimed, OperationFailed(FailureKind.TIMEOUT, "read timed out"), started=time.monotonic())
    return review, trouble


def assert_no_serious_violations(page: Page, name: str) -> None:
    for width, viewport in WIDTHS.items():
        page.set_viewport_size(viewport)
        results = Axe().run(page)
        blocking = [v for v in results.response["violations"] if v["impact"] in BLOCKING]
        screenshot(page, f"plain-{name}-{width}")
        assert not blocking, f"{name} at {viewport['width']} px:\n" + "\n".join(
            f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:5]}" for v in blocking
        )


def test_axe__dashboard_brief_revision_and_inbox__no_serious_violation_at_both_widths(browser, live_server, newsroom):
    review, trouble = newsroom
    page = sign_in(browser, live_server, "ava")

    expect(page.get_by_text("Dockers stop the port for a second day")).to_be_visible()
    assert_no_serious_violations(page, "dashboard")

    page.goto(f"{live_server.url}/briefs/{review.public_id}/")
    expect(page.get_by_role("heading", name="Dockers stop the port for a second day")).to_be_visible()
    assert_no_serious_violations(page, "brief")

    page.goto(f"{live_server.url}/briefs/{trouble.public_id}/revisions/1/")
    expect(page.get_by_test_id("publication-told")).to_contain_text("The website is not answering")
    expect(page.get_by_test_id("next-step")).to_have_text("nothing to do")
    assert_no_serious_violations(page, "revision-in-trouble")
    page.locator("#publication summary").click()
    expect(page.get_by_text(f"publish:{trouble.public_id}:revision-1").first).to_be_visible()
    assert_no_serious_violations(page, "revision-engineer-detail")

    page.goto(f"{live_server.url}/inbox/")
    expect(page.get_by_role("cell", name="Dockers stop the port for a second day")).to_be_visible()
    assert_no_serious_violations(page, "inbox")

    # One brief's two submissions are one notification, naming the newest revision.
    page.goto(f"{live_server.url}/notifications/")
    submitted = page.get_by_test_id("notification").filter(has_text=review.public_id).filter(has_text="Submitted")
    expect(submitted).to_have_count(1)
    expect(submitted).to_contain_text("2 updates")
    expect(submitted).to_contain_text("Revision 2 of")
    assert_no_serious_violations(page, "notifications")


def test_keyboard__tab_reaches_the_search_and_shows_a_focus_ring(browser, live_server, newsroom):
    page = sign_in(browser, live_server, "eddie")

    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "id_q":
            break

    assert page.evaluate("document.activeElement.id") == "id_q"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    shadow = page.evaluate("getComputedStyle(document.activeElement).boxShadow")
    assert outline not in ("none", "") or shadow not in ("none", ""), (outline, shadow)
