"""The newsroom end to end (issue 11): one stack started as `make run` starts it (the launcher with its
embedded PostgreSQL, web server, django-q2 cluster and reference target), driven through Debian's
Chromium. An editor and two approvers review a brief (assignment, inbox, email, comment threads),
publish it, diff and restore revisions; an operator reads /ops/ and /metrics.

The scenarios share the stack and run in order: each one starts from what the one before left.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest
from playwright.sync_api import Page, expect
from prometheus_client.parser import text_string_to_metric_families

from publishing.identities import PUBLISH, step_key
from tests.acceptance.conftest import (
    APPROVER_B,
    APPROVER_B_EMAIL,
    DESKTOP,
    PHONE,
    create_brief,
    reload_until,
    sign_in,
    wait_until_published,
)
from tests.acceptance.test_make_run import PUBLISHED_DEADLINE_SECONDS, RunningGalley
from tests.browser import screenshot

pytestmark = [pytest.mark.acceptance]

EDITOR_EMAIL = "editor@galley.localhost"  # seed_demo gives each demo user an address
# Every sentence names the port, so whichever sentences the offline summarizer picks, the draft
# (revision 1's body) holds the word the editor then changes.
SOURCE = (
    "Dockers at the port walked out at dawn on Monday. The union says pay at the port has not kept up. "
    "Ships are waiting outside the port. The port authority called for talks on Tuesday."
)
# Placeholder text pasted as the source: the summary's quality gate refuses it, terminally.
PLACEHOLDER_SOURCE = "Lorem ipsum dolor sit amet. Lorem ipsum consectetur adipiscing elit. Lorem ipsum sed do."
QUESTION = "Is the union's pay figure sourced?"
TYPED = "One more check before this goes out:\nthe harbour master's name is spelled two ways."
ANSWER = "Yes: the union's statement of Monday morning."


def shoot(page: Page, name: str) -> None:
    """The page as it is, at desktop and at phone width."""
    page.wait_for_load_state("load")
    for width, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        screenshot(page, f"newsroom-{name}-{width}")
    page.set_viewport_size(DESKTOP)


def printed_emails(galley: RunningGalley) -> list[dict[str, str]]:
    """The headers of each email the console backend has printed in the cluster's output (which the
    launcher forwards): the backend ends each message with a line of 79 dashes."""
    emails = []
    for block in galley.printed().split("-" * 79):
        if subject := re.search(r"^Subject: (.*)$", block, re.MULTILINE):
            to = re.search(r"^To: (.*)$", block, re.MULTILINE)
            emails.append({"subject": subject.group(1).strip(), "to": to.group(1).strip() if to else ""})
    return emails


def recipients(galley: RunningGalley, subject: str, *, count: int) -> list[str]:
    """The recipients of the emails with `subject`, once `count` of them have been printed."""
    started = time.monotonic()
    while len(sent := [email["to"] for email in printed_emails(galley) if email["subject"] == subject]) < count:
        assert time.monotonic() - started < PUBLISHED_DEADLINE_SECONDS, (subject, printed_emails(galley))
        time.sleep(0.5)
    return sent


Sample = tuple[str, dict[str, str], float]


def scrape(page: Page, base_url: str) -> list[Sample]:
    """/metrics read with the operator's session and parsed with prometheus-client's own parser."""
    response = page.request.get(f"{base_url}/metrics")
    assert response.status == 200, response.text()
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(response.text())
        for sample in family.samples
    ]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of `name`'s samples that carry `labels`."""
    return sum(value for sample, have, value in samples if sample == name and labels.items() <= have.items())


def test_newsroom__assignment_inbox_email_and_a_comment_thread_with_a_reply(browser, newsroom):
    base_url = newsroom.galley.base_url
    editor = sign_in(browser, newsroom, "editor")
    revision_links = create_brief(
        editor, newsroom, title="Harbour strike", source=SOURCE, shot=lambda page: shoot(page, "01-new-brief")
    )
    expect(revision_links).to_have_text(["1"])
    expect(editor.locator("[data-step]")).to_have_count(5)
    expect(editor.locator("[data-step][data-state=succeeded]")).to_have_count(5)

    editor.get_by_label("Assign to").select_option(label=APPROVER_B)
    editor.get_by_role("button", name="Assign").click()
    expect(editor.get_by_text(f"{newsroom.public_id} is assigned to {APPROVER_B}.")).to_be_visible()
    expect(editor.get_by_test_id("assignment")).to_contain_text(f"Assigned to {APPROVER_B}")
    shoot(editor, "02-brief-assigned")

    bea = sign_in(browser, newsroom, APPROVER_B)
    bea.get_by_test_id("nav-inbox").click()
    expect(bea.get_by_role("heading", name="Awaiting my review")).to_be_visible()
    row = bea.get_by_test_id("inbox-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(newsroom.public_id)
    expect(row).to_contain_text("Harbour strike")
    shoot(bea, "03-inbox")
    # The other approver was not asked: the brief is not in their inbox.
    approver = sign_in(browser, newsroom, "approver")
    approver.goto(f"{base_url}/inbox/")
    expect(approver.get_by_text("Nothing is waiting for your review.")).to_be_visible()

    # The assignment's email, sent by a worker through the console backend into the cluster's output.
    assert recipients(newsroom.galley, f"[Galley] Assigned for review: {newsroom.public_id}", count=1) == [
        APPROVER_B_EMAIL
    ]
    bea.get_by_test_id("nav-notifications").click()
    expect(bea.get_by_text(f"editor asked you to review {newsroom.public_id}")).to_be_visible()
    shoot(bea, "04-notifications-approver")

    bea.goto(f"{base_url}/inbox/")
    bea.get_by_role("link", name="Revision 1").click()
    expect(bea).to_have_url(newsroom.revision_url(1))
    bea.get_by_label("Start a thread").fill(QUESTION)
    bea.get_by_role("button", name="Start thread").click()
    expect(bea.get_by_text("Comment posted.")).to_be_visible()
    expect(bea.get_by_test_id("thread")).to_contain_text(QUESTION)

    editor.goto(newsroom.revision_url(1))
    thread = editor.get_by_test_id("thread")
    expect(thread).to_contain_text(QUESTION)
    thread.get_by_label("Reply").fill(ANSWER)
    thread.get_by_role("button", name="Reply", exact=True).click()
    expect(editor.get_by_text("Reply posted.")).to_be_visible()

    for name, page in (("editor", editor), ("approver-b", bea)):
        page.goto(newsroom.revision_url(1))
        thread = page.get_by_test_id("thread")
        expect(thread).to_have_count(1)
        expect(thread).to_contain_text(QUESTION)
        expect(thread.get_by_test_id("reply")).to_contain_text(ANSWER)
        shoot(page, f"05-revision-thread-{name}")
        page.goto(newsroom.brief_url)
        brief_thread = page.get_by_test_id("brief-thread")
        expect(brief_thread).to_have_count(1)
        expect(brief_thread).to_contain_text(QUESTION)
        expect(brief_thread.locator(".reply")).to_contain_text(f"editor: {ANSWER}")
        shoot(page, f"06-brief-thread-{name}")
    bea.get_by_test_id("nav-notifications").click()
    expect(bea.get_by_text(f"editor replied on revision 1 of {newsroom.public_id}")).to_be_visible()
    # The comment told the brief's author (the demo editor, whose address seed_demo gave), the reply the approver.
    assert sorted(recipients(newsroom.galley, f"[Galley] Commented: {newsroom.public_id}", count=2)) == [
        APPROVER_B_EMAIL,
        EDITOR_EMAIL,
    ]


def test_newsroom__approval_publishes__word_diff_against_published__restore(browser, newsroom):
    assert newsroom.public_id, "the first scenario made the brief"
    bea = sign_in(browser, newsroom, APPROVER_B)
    bea.goto(newsroom.revision_url(1))
    bea.get_by_role("button", name="Approve revision 1").click()
    expect(bea.get_by_text("Approved: revision 1.")).to_be_visible()
    permalink = wait_until_published(bea, newsroom.revision_url(1))
    shoot(bea, "07-revision-published")
    article = httpx.get(permalink, timeout=10)
    assert article.status_code == 200
    assert "Harbour strike" in article.text

    editor = sign_in(browser, newsroom, "editor")
    editor.goto(newsroom.brief_url)
    expect(editor.locator("#brief-status")).to_contain_text("published revision 1")
    shoot(editor, "08-brief-published")
    editor.get_by_role("link", name="Edit draft").click()
    body = editor.get_by_label("Body")
    first_body = body.input_value()
    assert re.search(r"\bport\b", first_body), first_body
    body.fill(re.sub(r"\bport\b", "harbour", first_body))
    shoot(editor, "09-edit")
    editor.get_by_role("button", name="Submit for review").click()
    expect(editor.get_by_text("Revision 2 submitted for review.")).to_be_visible()
    expect(editor).to_have_url(newsroom.revision_url(2))

    # Revision 1 is the published one: the diff against the previous revision is the one against it.
    expect(editor.locator("h2#changes-previous")).to_have_text("Changes against revision 1 (published)")
    changed = editor.locator("h2#changes-previous + .diff section[data-field=body]")
    expect(editor.locator("h2#changes-previous + .diff section[data-field=title]")).to_have_count(0)
    for view in (".diff-inline", ".diff-old, .diff-new"):
        deleted = changed.locator(view).locator("del").all_text_contents()
        inserted = changed.locator(view).locator("ins").all_text_contents()
        assert deleted and all(word.strip() == "port" for word in deleted), deleted
        assert inserted and all(word.strip() == "harbour" for word in inserted), inserted
    # A wide screen puts the diffs in a column beside the preview, each change inline there.
    expect(changed.locator(".diff-inline del").first).to_be_visible()
    expect(editor.get_by_test_id("story-preview").locator(".story-body")).to_contain_text("harbour")
    shoot(editor, "10-revision-2-diff")

    editor.goto(newsroom.revision_url(1))
    # The payload hash is engineer detail, folded: read as text, not as what the page shows.
    first_hash = editor.get_by_test_id("payload-hash").text_content()
    editor.get_by_role("button", name="Restore this revision").click()
    expect(editor.get_by_text("Revision 1 restored as revision 3; it needs approval like any other.")).to_be_visible()
    expect(editor).to_have_url(newsroom.revision_url(3))
    expect(editor.get_by_test_id("restores")).to_have_text("Restores revision 1.")
    expect(editor.get_by_test_id("payload-hash")).to_have_text(first_hash)
    expect(editor.locator("h2#changes-published + .diff")).to_contain_text("No differences.")
    shoot(editor, "11-revision-3-restored")
    editor.goto(newsroom.brief_url)
    expect(editor.locator("#brief-status .status")).to_have_text("In review")
    expect(editor.locator("#brief-status")).to_contain_text("published revision 1")
    bea.goto(newsroom.revision_url(3))
    expect(bea.get_by_role("button", name="Approve revision 3")).to_be_visible()
    shoot(bea, "12-revision-3-awaiting-approval")


def test_newsroom__ops_page_shows_a_dead_letter_with_its_reason_and_the_publication_charts(browser, newsroom):
    """The dead letter comes from a real failure: placeholder text pasted as a brief's source, which
    the summary's quality gate refuses in the cluster, terminally (no retry can fix the source)."""
    base_url = newsroom.galley.base_url
    editor = sign_in(browser, newsroom, "editor")
    editor.get_by_role("link", name="New brief").click()
    editor.get_by_label("Title").fill("Placeholder page")
    editor.get_by_label("Source material").fill(PLACEHOLDER_SOURCE)
    editor.get_by_role("button", name="Create brief").click()
    editor.wait_for_url("**/briefs/brief-*/")
    placeholder_id = editor.url.rstrip("/").rsplit("/", 1)[-1]
    gate = editor.locator("[data-step=quality_gate]")
    reload_until(editor, lambda: gate.get_attribute("data-state") == "dead", what="the quality gate's refusal")
    expect(gate).to_contain_text("lorem ipsum", ignore_case=True)
    shoot(editor, "13-brief-quality-gate-dead")

    operator = sign_in(browser, newsroom, "operator")
    operator.get_by_role("link", name="Ops").click()
    expect(operator).to_have_url(f"{base_url}/ops/")
    dead = operator.locator("section[aria-labelledby=ops-dead-heading] li")
    expect(dead).to_have_count(1)
    expect(dead.locator("code")).to_have_text(step_key(placeholder_id, 1, "quality_gate"))
    expect(dead.locator(".status")).to_have_text("quality_gate")
    expect(dead.locator(".ops-reason")).to_contain_text("quality gate:")
    expect(dead.locator(".ops-reason")).to_contain_text("leftover prompt text")
    # Scenario 2's publication, drawn: a point in the throughput chart's publish series and in the latency chart.
    expect(operator.locator("#chart-throughput g[data-series=publish] circle.chart-point")).to_have_count(1)
    expect(operator.locator("#chart-latency circle.chart-point")).not_to_have_count(0)
    shoot(operator, "14-ops")


def test_newsroom__publication_while_an_approver_types__live_status_typed_text_kept__metrics_move(browser, newsroom):
    assert newsroom.public_id, "the first scenario made the brief"
    base_url = newsroom.galley.base_url
    operator = sign_in(browser, newsroom, "operator")
    before = scrape(operator, base_url)
    assert total(before, "galley_database_up") == 1
    # One publication so far, on each of make run's two channels (web and partner-feed).
    assert total(before, "galley_operations", kind=PUBLISH, state="succeeded") == 2
    assert total(before, "galley_approval_to_published_seconds_count") == 2  # a verification per channel

    # The demo approver is typing a comment on revision 3 when bea's approval publishes it: their page
    # follows the status without reloading, and the decision form, which could only be refused now,
    # becomes a notice that keeps what they typed.
    typing = sign_in(browser, newsroom, "approver")
    typing.goto(newsroom.revision_url(3))
    typing.evaluate("window.__marker = 1")  # gone if the page reloads
    typing.get_by_label("Comment").fill(TYPED)

    bea = sign_in(browser, newsroom, APPROVER_B)
    bea.goto(newsroom.revision_url(3))
    bea.get_by_role("button", name="Approve revision 3").click()
    expect(bea.get_by_text("Approved: revision 3.")).to_be_visible()
    wait_until_published(bea, newsroom.revision_url(3))
    shoot(bea, "15-revision-3-published")

    expect(typing.locator("#publication")).to_have_attribute("data-state", "published")
    expect(typing.locator("#decision-form")).to_have_count(0)
    expect(typing.locator("#decision-closed")).to_be_visible()
    expect(typing.locator("#kept-comment")).to_have_value(TYPED)
    assert typing.evaluate("window.__marker") == 1
    shoot(typing, "15-revision-3-stale-form-notice")

    after = scrape(operator, base_url)
    # Revision 3 on the website at least (the partner feed's may still be on its way), never more than
    # one publish per channel.
    assert 3 <= total(after, "galley_operations", kind=PUBLISH, state="succeeded") <= 4
    assert total(after, "galley_attempts_total", outcome="succeeded") > total(
        before, "galley_attempts_total", outcome="succeeded"
    )
    assert 3 <= total(after, "galley_approval_to_published_seconds_count") <= 4
    assert total(after, "galley_approval_to_published_seconds_sum") > total(
        before, "galley_approval_to_published_seconds_sum"
    )
    assert 3 <= total(after, "galley_approval_to_published_seconds_bucket", le="+Inf") <= 4
    operator.goto(f"{base_url}/ops/")
    expect(operator.locator("#chart-throughput g[data-series=publish] circle.chart-point")).not_to_have_count(0)
    shoot(operator, "16-ops-after")
