"""The brief timeline (publishing.timeline): one list, newest first, every kind of entry, engineer
detail folded by role, and a query count that does not grow with the brief's history."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from approvals.actions import APPROVERS_GROUP, check_assign_brief, check_decide_revision, check_post_comment
from approvals.models import Approval
from publishing.identities import publish_key
from publishing.roles import Role
from publishing.timeline import get_brief_timeline
from tests.approvals.test_approvals import decide
from tests.publishing.handlers.test_summaries import create_brief, provider, run_pipeline
from tests.publishing.test_diff_views import publish
from tests.web import client_for
from workers.models import Attempt, Operation

pytestmark = pytest.mark.django_db

__all__ = ["provider"]  # the counting AI provider, a fixture


def try_once(operation: Operation, *, number: int = 1) -> Attempt:
    """What a worker's claim and finish leave behind: one failed attempt (no target is called here)."""
    return Attempt.objects.create(
        operation=operation,
        number=number,
        worker_id="w-test-1",
        fencing_token=41 + number,
        outcome=Attempt.Outcome.RETRY,
        error_kind="timeout",
        http_status=503,
        error_message="The target did not answer in time.",
        finished_at=timezone.now(),
        duration_ms=120,
    )


@pytest.fixture
def history(brief, revise, editor, approver, make_user):
    """A brief with every kind of entry: summary run and steps, revisions, a request for changes,
    a comment thread with a reply, an assignment, a publish with a failed attempt, a publication."""
    first = revise(brief, "Dockers walked out.")
    with transaction.atomic():
        check_decide_revision(
            brief.public_id,
            revision_number=1,
            payload_hash=first.payload_hash,
            decision=Approval.Decision.CHANGES_REQUESTED,
            comment="Which port?",
            acting_user=approver,
        )
        thread = check_post_comment(brief.public_id, revision_number=1, body="Name the union.", acting_user=approver)
        check_post_comment(brief.public_id, revision_number=1, body="Done.", reply_to=thread.pk, acting_user=editor)
        check_assign_brief(brief.public_id, assignee=APPROVERS_GROUP, acting_user=editor)
    second = revise(brief, "Dockers walked out at the harbour.")
    publish(second, by=make_user("abe", Role.APPROVER))
    try_once(Operation.objects.get(key=publish_key(brief.public_id, 2)))
    return brief


def test_timeline__every_kind_of_entry__one_list_newest_first(history, editor):
    timeline = get_brief_timeline(history, viewer=editor)

    kinds = {entry.kind for entry in timeline.entries}
    assert kinds == {
        "revision",
        "summary_run",
        "operation",
        "decision",
        "comment",
        "assignment",
        "publication",
    }
    times = [entry.at for entry in timeline.entries]
    assert times == sorted(times, reverse=True)
    descriptions = [entry.description for entry in timeline.entries]
    # Newest first: the publication after the second revision, which came after the first one's decision.
    assert descriptions.index("Revision 2 published, read back and verified") < descriptions.index(
        "Wrote revision 2: “Harbour strike”"
    )
    assert descriptions.index("Wrote revision 2: “Harbour strike”") < descriptions.index(
        "Requested changes on revision 1"
    )
    assert descriptions.index("Requested changes on revision 1") < descriptions.index(
        "Wrote revision 1: “Harbour strike”"
    )
    assert "Replied in a thread on revision 1" in descriptions
    assert "Assigned the review to the Approvers group" in descriptions
    assert "AI summary: working" in descriptions
    assert "Publish of revision 2: queued" in descriptions


def test_timeline__entries__time_actor_and_links(history, editor):
    entries = {entry.description: entry for entry in get_brief_timeline(history, viewer=editor).entries}

    decision = entries["Requested changes on revision 1"]
    assert (decision.actor, decision.text) == ("ava", "Which port?")
    assert decision.link == f"/briefs/{history.public_id}/revisions/1/"
    publication = entries["Revision 2 published, read back and verified"]
    assert (publication.actor, publication.link) == ("Galley", "https://target.example/articles/1")
    assert ("Operation key", publish_key(history.public_id, 2)) in publication.detail
    publish = entries["Publish of revision 2: queued"]
    assert [step.description for step in publish.steps] == ["Try 1: no answer in time"]
    assert (
        "Attempt 1",
        "worker w-test-1, fencing token 42, timeout 503, 120 ms: The target did not answer in time.",
    ) in publish.detail
    assert entries["Wrote revision 1: “Harbour strike”"].actor == "eddie"


@pytest.mark.parametrize(("role", "open_"), [("editor", False), ("approver", False), ("operator", True)])
def test_timeline__engineer_detail__folded_for_editors_and_approvers_open_for_operators(history, users, role, open_):
    timeline = get_brief_timeline(history, viewer=users[role])
    assert timeline.detail_open is open_

    response = client_for(users[role]).get(history.get_absolute_url())
    assertContains(response, 'data-testid="timeline"')
    assertContains(response, "w-test-1")  # in the page, behind a <details> unless operator
    folded = re.findall(r'<details class="engineer-detail"[^>]*>', response.content.decode())
    assert folded
    assert all(tag.endswith(" open>") is open_ for tag in folded), folded


def test_brief_page__timeline_replaces_the_tables(history, editor):
    response = client_for(editor).get(history.get_absolute_url())

    assertContains(response, 'data-testid="timeline-permalink"')
    assertContains(response, "https://target.example/articles/1")
    assertNotContains(response, "<th>Payload hash</th>")
    assertNotContains(response, 'class="operations"')
    for number in (1, 2):
        assertContains(response, f'href="/briefs/{history.public_id}/revisions/{number}/">{number}</a>')


# The revisions (with authors), summary runs, operations, their attempts, decisions (approver,
# revision), comments (author, revision), assignments (assignee, group, assigner), publications.
TIMELINE_QUERIES = 8


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("count", [2, 20])
def test_timeline__query_count__same_for_2_and_20_revisions_and_operations(
    brief, revise, approver, editor, count, django_assert_num_queries
):
    for index in range(count):
        revision = revise(brief, f"Dockers walked out, take {index}.")
        decide(revision, by=approver, comment=f"Fine ({index}).")
        with transaction.atomic():
            check_post_comment(brief.public_id, revision_number=revision.number, body="Noted.", acting_user=editor)
        try_once(Operation.objects.get(key=publish_key(brief.public_id, revision.number)))
    assert Operation.objects.filter(kind="publish").count() == count

    with django_assert_num_queries(TIMELINE_QUERIES):
        timeline = get_brief_timeline(brief, viewer=editor)

    publishes = [entry for entry in timeline.entries if entry.description.startswith("Publish of revision")]
    assert len(publishes) == count
    assert all(len(entry.steps) == 1 for entry in publishes)


# --- one entry per AI run and per operation, their steps folded inside -----------------------------------


@pytest.mark.django_db(transaction=True)
def test_timeline__one_ai_run__one_entry_with_its_steps_inside(editor, provider):
    brief = create_brief(editor)
    run_pipeline()
    run = brief.summary_runs.get()

    timeline = get_brief_timeline(brief, viewer=editor)

    (entry,) = [e for e in timeline.entries if e.kind in ("summary_run", "operation")]
    assert entry.description == "AI summary: ready"
    assert (entry.link, entry.link_label) == (f"/briefs/{brief.public_id}/revisions/1/", "Revision 1")
    assert [step.description for step in entry.steps] == [
        "Started on the source material",
        "Outline: done",
        "Draft: done",
        "Headline: done",
        "Standfirst: done",
        "Quality gate: done",
    ]
    assert ("Source hash", run.source_hash) in entry.detail
    assert not any(e.kind == "attempt" for e in timeline.entries)


@pytest.mark.django_db(transaction=True)
def test_timeline__publish_retried__one_entry__tries_folded_and_told_plainly(brief, revise, editor, approver):
    revision = revise(brief, "Dockers walked out.")
    decide(revision, by=approver)
    publish = Operation.objects.get(key=publish_key(brief.public_id, revision.number))
    for number in (1, 2, 3):
        try_once(publish, number=number)

    (entry,) = [e for e in get_brief_timeline(brief, viewer=editor).entries if e.kind == "operation"]
    response = client_for(editor).get(brief.get_absolute_url())

    assert entry.description.startswith("Publish of revision 1: ") and entry.description.endswith("after 3 tries")
    assert [step.description for step in entry.steps] == [f"Try {n}: no answer in time" for n in (1, 2, 3)]
    assert sum(label.startswith("Attempt ") for label, _ in entry.detail) == 3
    assertContains(response, '<details class="timeline-steps"', count=2, html=False)  # the AI run's and the publish's
    assertContains(response, "3 tries")
