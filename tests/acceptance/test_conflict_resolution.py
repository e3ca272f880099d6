"""Every conflict kind brought to a final, audited state by an operator in the Django admin, in a
real browser (docs/operations.md#settling-problems): a key conflict, a stale revision at the target, a verification
mismatch and a dead letter. The operator sees Galley's intent beside what the target holds; each
action ends the situation and leaves the brief in a state the editors' pages explain.

The reference target runs in a thread (real HTTP); the worker drains in this process between
the operator's steps, so each step's effect is observed, not raced.
"""

from __future__ import annotations

import sqlite3

import pytest
from playwright.sync_api import Browser, Page, expect

from galley.reference_target import Faults
from publishing.hashing import payload_hash
from publishing.identities import PUBLISH, publish_key
from publishing.models import Brief, Publication, Revision
from publishing.roles import Role
from tests.browser import PASSWORD, assert_fits_window, sign_in
from tests.late_pages import serve_pages_late
from tests.publishing.handlers.test_publications import (
    OTHER_PAYLOAD,
    application_of,
    applied,
    approve,
    assert_not_published,
    assert_published,
    attempts_of,
    publish_op,
    run_worker,
    seed_target,
    verify_op,
)
from workers.actions.claims import claim_operations
from workers.attempts import run_operation
from workers.models import AuditEvent, Conflict, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

DESKTOP = {"width": 1280, "height": 800}

# The reference target and quick retries, as the publishing tests set them up.


@pytest.fixture
def otto(make_user):
    """An operator as `seed_demo` makes one: in the Operators group, and staff for the admin."""
    user = make_user("otto", Role.OPERATOR, password=PASSWORD)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return user


def open_problem(browser: Browser, live_server, operation: Operation) -> Page:
    """The operator finds the problem from the admin's list of open publication problems."""
    page = sign_in(browser, live_server, "otto")
    page.goto(f"{live_server.url}/admin/publishing/publicationproblem/?state=open")
    page.get_by_role("link", name=operation.key).click()
    expect(page.locator("#side-by-side")).to_be_visible()
    return page


def side_by_side(page: Page) -> dict[str, tuple[str, str]]:
    """The comparison table as {row: (Galley intended, the target holds)}."""
    rows = {}
    for row in page.locator("#side-by-side tbody tr").all():
        name = row.locator("th").inner_text().strip()
        intended, held = (cell.inner_text().strip() for cell in row.locator("td").all())
        rows[name] = (intended, held)
    return rows


def editors_see(page: Page, live_server, revision: Revision) -> str:
    page.goto(f"{live_server.url}/briefs/{revision.brief.public_id}/revisions/{revision.number}/")
    return page.locator("main").inner_text()


def audit_of(operation: Operation) -> list[tuple[str, str | None]]:
    return [
        (event.event_type, event.actor.username if event.actor else None)
        for event in AuditEvent.objects.filter(subject_id=operation.key).order_by("id")
    ]


def test_key_conflict_is_loud__operator_sees_both_sides_and_cancels_with_a_reason(
    browser, live_server, target, brief, revise, approver, otto
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    key = publish_key(brief.public_id, 1)
    seed_target(target, key=key, brief_id=brief.public_id, revision=1, payload=OTHER_PAYLOAD)
    assert run_worker() == {"conflict": 1}
    operation = publish_op(revision)

    page = open_problem(browser, live_server, operation)
    expect(
        page.get_by_role("heading", name="Key conflict: the target holds this key with another payload")
    ).to_be_visible()
    rows = side_by_side(page)
    assert rows["Payload hash"] == (revision.payload_hash, payload_hash(OTHER_PAYLOAD))
    assert rows["In Galley"][1] == "matches no revision of this brief"
    expect(page.get_by_text("Adopt what the target holds: not possible.")).to_be_visible()
    assert_fits_window(page, "conflict-key", viewport=DESKTOP)
    page.get_by_label("Reason").fill("the target keeps an article from the old system under this key")
    page.get_by_role("button", name="Cancel with this reason").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Cancelled {key}; the brief shows why.")
    expect(page.locator("#problem-status")).to_have_text("Cancelled")
    expect(page.locator("#problem-settled")).to_be_visible()

    operation.refresh_from_db()
    assert operation.status == "cancelled"
    conflict = Conflict.objects.get(operation=operation)
    assert (conflict.resolved_by, conflict.resolution) == (
        otto,
        "cancelled: cancelled by an operator: the target keeps an article from the old system under this key",
    )
    assert audit_of(operation) == [
        ("operation.key_conflict", None),
        ("operation.cancelled", "otto"),
        ("operation.conflict_resolved", "otto"),
    ]
    assert "Not published: cancelled by an operator: the target keeps an article" in editors_see(
        page, live_server, revision
    )
    assert applied(target) == [(key, 1, payload_hash(OTHER_PAYLOAD))]
    assert_not_published(brief)


def test_no_regression__stale_revision_at_the_target__operator_adopts_the_approved_revision_it_holds(
    browser, live_server, target, brief, revise, approver, otto
):
    """The target holds approved revision 2 under Galley's key (sent by an earlier attempt Galley's
    tables do not show, e.g. after a restore from backup), so its fence refuses revision 1."""
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    (claimed,) = claim_operations(worker_id="w-test", limit=1, kinds=[PUBLISH])  # revision 1 is in flight
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)  # so revision 2 waits for it
    seed_target(
        target, key=publish_key(brief.public_id, 2), brief_id=brief.public_id, revision=2, payload=second.payload
    )
    assert run_operation(claimed) == "conflict"
    operation = publish_op(first)
    assert Conflict.objects.get(operation=operation).kind == "stale_revision"

    page = open_problem(browser, live_server, operation)
    expect(
        page.get_by_role("heading", name="Stale revision: the target holds a revision Galley did not publish")
    ).to_be_visible()
    rows = side_by_side(page)
    assert rows["Revision"] == ("1", "2")
    assert rows["Payload hash"] == (first.payload_hash, second.payload_hash)
    assert rows["In Galley"] == ("revision 1, approved by ava", "revision 2, approved by ava")
    assert_fits_window(page, "conflict-stale", viewport=DESKTOP)
    page.get_by_role("button", name="Adopt revision 2, which the target holds").click()
    expect(page.locator(".messagelist")).to_contain_text("Adopting revision 2")
    expect(page.locator("#problem-status")).to_have_text("Cancelled")

    assert run_worker() == {"succeeded": 1}  # revision 2's publish (adopted, a replay), verified in its attempt
    assert_published(brief, second)
    assert applied(target) == [application_of(second)]  # nothing sent twice, revision 1 never
    assert not Publication.objects.filter(revision=first).exists()
    assert Conflict.objects.get(operation=operation).resolved_by == otto
    assert AuditEvent.objects.filter(event_type="publication.adopted", actor=otto, subject_id=brief.public_id).exists()
    assert "Not published: the target holds approved revision 2; an operator adopted it" in editors_see(
        page, live_server, first
    )


def test_done_means_observed__verification_mismatch__operator_retries_after_the_target_is_fixed(
    browser, live_server, target, brief, revise, approver, otto
):
    serve_pages_late(target)  # the page comes late: a verify operation reads back, after the change below
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    publication = Publication.objects.get()
    # Someone at the target changes the stored record behind Galley's back.
    with sqlite3.connect(target.store.path) as db:
        db.execute("DROP TRIGGER publications_immutable")
        db.execute("UPDATE publications SET payload_hash = ? WHERE id = ?", ("0" * 64, publication.external_id))
    db.close()
    assert run_worker() == {"conflict": 1}
    operation = verify_op(revision)

    page = open_problem(browser, live_server, operation)
    expect(page.get_by_role("heading", name="Verification mismatch: the read-back shows other content")).to_be_visible()
    rows = side_by_side(page)
    assert rows["Payload hash"] == (revision.payload_hash, "0" * 64)
    assert rows["At the target"][1].startswith(f"id {publication.external_id}")
    # The target's owner restores the record; the operator retries the verification.
    with sqlite3.connect(target.store.path) as db:
        db.execute(
            "UPDATE publications SET payload_hash = ? WHERE id = ?", (revision.payload_hash, publication.external_id)
        )
    db.close()
    page.get_by_role("button", name="Retry now, after a fix at the target").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Running {operation.key} again now.")
    # Queued, not settled, until a worker has run it (issue 18, item 10).
    expect(page.locator("#problem-status")).to_have_text("Retry queued")
    expect(page.locator("#problem-queued")).to_contain_text("Queued: a retry after a fix, asked for by otto")
    expect(page.get_by_text("Settled", exact=False)).to_have_count(0)
    expect(page.locator("#problem-settled")).to_have_count(0)

    assert run_worker() == {"succeeded": 1}
    assert_published(brief, revision)
    conflict = Conflict.objects.get(operation=operation)
    assert (conflict.resolved_by, conflict.resolution) == (otto, "retried after a fix")
    assert ("operation.retry_now", "otto") in audit_of(operation)
    assert applied(target) == [application_of(revision)]
    page.reload()
    expect(page.locator("#problem-status")).to_have_text("Succeeded")
    assert "Published" in editors_see(page, live_server, revision)


def test_nothing_lost__dead_letter_after_a_lost_answer__operator_looks_it_up_and_adopts_one_application(
    browser, live_server, start_target, brief, revise, approver, otto, settings
):
    target = start_target(Faults(rate_drop=1.0))  # applied, and the answer never arrives
    settings.GALLEY_MAX_ATTEMPTS = 1
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    assert run_worker() == {"dead": 1}
    operation = publish_op(revision)
    assert operation.last_error_kind == "connection"
    target.faults = Faults()

    page = open_problem(browser, live_server, operation)
    expect(page.get_by_role("heading", name="Dead letter: attempts exhausted", exact=False)).to_be_visible()
    assert side_by_side(page)["Revision"] == ("1", "unknown (not read when this stopped)")
    assert_fits_window(page, "operator-problem-dead-letter-desktop", viewport=DESKTOP)
    page.get_by_role("button", name="Look up at the target and adopt what it holds under this key").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Looking {operation.key} up at the target now")
    # Queued, not settled, until a worker has run it (issue 18, item 10).
    expect(page.locator("#problem-status")).to_have_text("Retry queued")
    expect(page.locator("#problem-queued")).to_contain_text("the outcome is not known yet")
    expect(page.get_by_text("Settled", exact=False)).to_have_count(0)
    expect(page.locator("#problem-settled")).to_have_count(0)
    assert_fits_window(page, "operator-problem-queued-desktop", viewport=DESKTOP)
    assert problem_keys(page, live_server, state="queued") == [operation.key]
    assert problem_keys(page, live_server, state="ended") == []

    assert run_worker() == {"succeeded": 1}  # adopted, read back and verified in one attempt
    assert_published(brief, revision)
    # The page shows what the look-up adopted, not the "unknown" of the dead letter, and fits 1,280 px.
    publication = Publication.objects.get(revision=revision)
    page.goto(f"{live_server.url}/admin/publishing/publicationproblem/{operation.id}/change/")
    expect(page.locator("#problem-status")).to_have_text("Succeeded")
    expect(page.locator("#problem-adopted")).to_contain_text("The target holds Galley's publication of revision 1")
    rows = side_by_side(page)
    assert rows["Revision"] == ("1", "1")
    assert rows["Payload hash"] == (revision.payload_hash, revision.payload_hash)
    assert rows["In Galley"][1] == "revision 1, approved by ava"
    assert rows["At the target"][1].startswith(f"id {publication.external_id}, key {operation.key}")
    assert_fits_window(page, "operator-problem-adopted-desktop", viewport=DESKTOP)
    assert problem_keys(page, live_server, state="ended") == [operation.key]
    assert applied(target) == [application_of(revision)]  # one application, adopted by lookup
    last = attempts_of(publish_op(revision))[-1]
    assert (last.ambiguous, last.outcome) == (True, "succeeded")
    assert ("operation.reconcile_requested", "otto") in audit_of(operation)
    assert Brief.objects.get(pk=brief.pk).status == Brief.Status.PUBLISHED

    # Idempotent: the same action again changes nothing and says so.
    page.goto(f"{live_server.url}/admin/publishing/publicationproblem/{operation.id}/change/")
    expect(page.locator("#problem-settled")).to_be_visible()
    events = AuditEvent.objects.count()
    response = page.request.post(
        f"{live_server.url}/admin/publishing/publicationproblem/{operation.id}/resolve/",
        form={"action": "look_up", "csrfmiddlewaretoken": csrf_token(page)},
        headers={"Referer": page.url},
    )
    assert response.ok
    assert "Nothing to do" in response.text()
    assert AuditEvent.objects.count() == events


def csrf_token(page: Page) -> str:
    return next(cookie["value"] for cookie in page.context.cookies() if cookie["name"] == "csrftoken")


def problem_keys(page: Page, live_server, *, state: str) -> list[str]:
    """The operation keys the admin's list of publication problems shows under a state filter."""
    page.goto(f"{live_server.url}/admin/publishing/publicationproblem/?state={state}")
    return [link.inner_text() for link in page.locator("#result_list tbody th a").all()]
