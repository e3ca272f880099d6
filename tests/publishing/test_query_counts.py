"""Query counts of the hot pages, pinned, with 1 brief and with 1,000 (issue 11): the dashboard (and the
brief list with its filters), the brief page and the revision page, as an editor and as an approver.
Each number is exact and the same at both sizes, so a query per brief (or per anything) shows up here.

The 999 other briefs are written in one statement each for briefs and revisions (the SQL of
test_list_at_scale.py: every status, one to three revisions each) and roll back with the test.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test import Client
from pytest_django.asserts import assertContains

from approvals.actions import APPROVERS_GROUP, check_assign_brief, check_decide_revision, check_post_comment
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.models import Brief
from publishing.roles import Role
from tests.publishing.test_list_at_scale import INSERT_BRIEFS, INSERT_REVISIONS
from tests.web import client_for

pytestmark = pytest.mark.django_db

FIRST_NUMBER = 2_000_000  # public ids far above what the sequence hands out

# Every page: the session, the user, the user's roles. Pages that show the nav's counts add one
# query for them (unread notifications, and the inbox for an approver).
#
# The dashboard: the nav's counts, the paginator's count, the page of briefs (their ids from the list
# index, then those rows with author and latest revision number: one statement), the publish and
# verify operations of the approved ones among them (one statement, for their badges).
DASHBOARD = 7
# The brief page: the brief; the AI summary (run, steps' operations, attempts, artifacts); the
# revisions with their decisions; the brief's runs, operations, attempts, assignment, publication
# and revisions once more for the rest of the page (the revision links and the compare form's
# numbers come from the latest revision's number); the badge's publish and verify operations; the
# nav's counts; the review block (open assignment, the approvers to assign to, threads, their
# replies); who else has the draft open. None of them is per revision, decision, comment or brief
# in the list; the receipts per channel (the newest sent revision's publish and verify operations,
# and, once something was sent, the channels with their publications: never one per channel); the
# corrections with the channels each reached (one statement, publications aggregated beside each); the
# schedule card's look for the newest schedule (docs/schedules.md: nothing more when there is none).
BRIEF_PAGE = 27
# The revision page (as tests/publishing/test_diff_views.py counts it): the brief, the revision, the
# latest, the previous and published ones (one query), decisions, the restore note, the valid
# approval, the publication state (operations with attempts, publication), the receipts per channel
# (as on the brief page), the nav's counts, the comment threads; and the approval policy card's three
# (the revision's completion, its desk's required groups, the policy's count: approvals.policies); the
# schedule card's look for the revision's schedule (docs/schedules.md: nothing more when there is none).
REVISION_PAGE = 19
# An approver who may decide is offered the channels too (every enabled one and the brief's, one query).
REVISION_PAGE_DECIDING = REVISION_PAGE + 1

DASHBOARD_PATHS = [
    pytest.param("/", id="first-page"),
    pytest.param("/?q=harbour", id="search"),
    pytest.param("/?status=in_review", id="status"),
    pytest.param("/?q=harbour&status=in_review&page=2", id="search-status-page-2"),
    pytest.param("/?q={public_id}", id="public-id"),
]


@pytest.fixture(params=[1, 1000], ids=["1-brief", "1000-briefs"])
def briefs(request, editor, approver, make_user) -> int:
    """The page's brief (revised, decided, commented on, assigned) and, for 1,000, 999 more."""
    eddie = editor
    brief = check_create_brief(title="Harbour strike", source_material="Dockers walked out at dawn.", acting_user=eddie)
    for base, body in enumerate(["Dockers walked out.", "Dockers walked out at dawn.", "The port is closed."]):
        with transaction.atomic():
            revision, _created = check_create_revision(
                brief.public_id, base_number=base, title="Harbour strike", body=body, acting_user=eddie
            )
        if base < 2:
            with transaction.atomic():
                check_decide_revision(
                    brief.public_id,
                    revision_number=revision.number,
                    payload_hash=revision.payload_hash,
                    decision="changes_requested",
                    comment=f"Not yet ({base}).",
                    acting_user=approver,
                )
            with transaction.atomic():
                check_post_comment(
                    brief.public_id, revision_number=revision.number, body="Which union?", acting_user=approver
                )
    with transaction.atomic():
        check_assign_brief(brief.public_id, assignee=APPROVERS_GROUP, acting_user=eddie)
    make_user("abe", Role.APPROVER)  # another approver to assign to
    if request.param > 1:
        with connection.cursor() as cursor:
            others = {"first": FIRST_NUMBER, "count": request.param - 1, "authors": [eddie.pk, approver.pk]}
            cursor.execute(INSERT_BRIEFS, others)
            cursor.execute(INSERT_REVISIONS, others)
    assert Brief.objects.count() == request.param
    return request.param


@pytest.fixture
def clients(editor, approver) -> dict[str, Client]:
    return {"editor": client_for(editor), "approver": client_for(approver)}


def page_brief() -> Brief:
    return Brief.objects.get(title="Harbour strike")


@pytest.mark.parametrize("path", DASHBOARD_PATHS)
@pytest.mark.parametrize("role", ["editor", "approver"])
def test_query_count__dashboard_and_brief_list__pinned_at_1_and_1000_briefs(
    briefs, clients, role, path, django_assert_num_queries
):
    public_id = page_brief().public_id

    with django_assert_num_queries(DASHBOARD):
        response = clients[role].get(path.format(public_id=public_id))

    assert response.status_code == 200
    assert len(response.context["page"].object_list) >= 1


@pytest.mark.parametrize("role", ["editor", "approver"])
def test_query_count__brief_page__pinned_at_1_and_1000_briefs(briefs, clients, role, django_assert_num_queries):
    brief = page_brief()

    with django_assert_num_queries(BRIEF_PAGE):
        response = clients[role].get(brief.get_absolute_url())

    assert response.status_code == 200
    for number in (1, 2, 3):
        assertContains(response, f'href="{brief.get_absolute_url()}revisions/{number}/"')


@pytest.mark.parametrize("number", [1, 3])
@pytest.mark.parametrize("role", ["editor", "approver"])
def test_query_count__revision_page__pinned_at_1_and_1000_briefs(
    briefs, clients, role, number, django_assert_num_queries
):
    brief = page_brief()

    deciding = role == "approver" and number == 3  # the current revision, undecided
    with django_assert_num_queries(REVISION_PAGE_DECIDING if deciding else REVISION_PAGE):
        response = clients[role].get(f"{brief.get_absolute_url()}revisions/{number}/")

    assert response.status_code == 200
    assert response.context["revision"].number == number
    assert response.context["may_decide"] is deciding
