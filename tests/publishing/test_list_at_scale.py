"""The brief list at 100k briefs: its page queries read indexes, never every brief or every revision,
and the dashboard's query count does not grow (issue 10). Plans are checked with EXPLAIN ANALYZE on
the very SQL the dashboard ran; timings are `make bench`'s, never asserted here.

The rows are written once for the module by bulk SQL (generate_series), committed and vacuumed as
a live table would be, and truncated when the module ends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from publishing.models import Brief, Revision
from publishing.views import BRIEFS_PER_PAGE
from tests.web import client_for

pytestmark = pytest.mark.django_db

BRIEFS = 100_000
FIRST_NUMBER = 1_000_000  # public ids brief-1000001 … brief-1100000, far above what the sequence hands out
LIST_INDEXES = {"brief_created_idx", "brief_status_created_idx"}

# Briefs shaped like the real ones: five authors, every status (a tenth still drafting, with no
# revision), one to three revisions each, published ones at their last; two briefs share each
# creation time, as a bulk import makes them, so the order's tie-break on id is exercised.
INSERT_BRIEFS = """
INSERT INTO publishing_brief (public_id, title, source_material, source_hash, author_id, status,
                              published_revision_number, created_at, updated_at, desk_id, legal_review)
SELECT 'brief-' || (%(first)s + n),
       (ARRAY['Harbour', 'Rail', 'Council', 'School', 'Flood', 'Hospital', 'Bridge', 'Market', 'Festival',
              'Airport', 'Library'])[1 + n %% 11]
         || ' ' || (ARRAY['strike', 'fares rise', 'budget vote', 'closure', 'warning', 'opening', 'inquiry',
                          'repairs', 'report', 'delays', 'plans', 'row', 'deal'])[1 + (n / 11) %% 13]
         || ' ' || n,
       'Notes from the newsroom for story ' || n || ': who said what, when, and the figures to check.',
       encode(sha256(('source ' || n)::bytea), 'hex'),
       (%(authors)s::integer[])[1 + n %% cardinality(%(authors)s::integer[])],
       (ARRAY['drafting', 'in_review', 'in_review', 'in_review', 'changes_requested', 'approved', 'approved',
              'published', 'published', 'published'])[1 + n %% 10],
       CASE WHEN n %% 10 >= 7 THEN 1 + n %% 3 END,
       now() - ((%(count)s - n) / 2) * interval '10 minutes',
       now() - ((%(count)s - n) / 2) * interval '10 minutes' + interval '1 hour',
       (SELECT id FROM publishing_desk WHERE is_default), false
FROM generate_series(1, %(count)s) AS n
"""

INSERT_REVISIONS = """
INSERT INTO publishing_revision (brief_id, number, payload, payload_hash, author_id, created_at)
SELECT brief.id, number, payload, encode(sha256(convert_to(payload::text, 'UTF8')), 'hex'), brief.author_id,
       brief.created_at + number * interval '1 minute'
FROM publishing_brief AS brief
CROSS JOIN LATERAL (SELECT substr(brief.public_id, 7)::integer - %(first)s AS n) AS source
CROSS JOIN LATERAL generate_series(1, 1 + source.n %% 3) AS number
CROSS JOIN LATERAL (
    SELECT jsonb_build_object('title', brief.title, 'body', 'Revision ' || number || ' of the story. ' || brief.title)
) AS revision (payload)
WHERE brief.status <> 'drafting' AND source.n BETWEEN 1 AND %(count)s
"""


def expected_latest_revision(public_id: str) -> int | None:
    """What INSERT_BRIEFS and INSERT_REVISIONS made the latest revision number of this brief."""
    n = int(public_id.removeprefix("brief-")) - FIRST_NUMBER
    return None if n % 10 == 0 else 1 + n % 3


@pytest.fixture(scope="module")
def scale(django_db_setup, django_db_blocker) -> Iterator[None]:
    """100k briefs with their revisions, committed and vacuumed for the module, then truncated.

    Committed so that VACUUM can set the visibility map as it does on a live table (without it
    PostgreSQL costs an index-only scan like a table read, and plans differ from production's);
    truncated at the end because revisions refuse DELETE. Between tests these tables hold
    nothing else: every other test rolls back or flushes.
    """
    with django_db_blocker.unblock():
        authors = [User.objects.create_user(username=f"scale-author-{n}") for n in range(5)]
    try:
        with django_db_blocker.unblock():
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    INSERT_BRIEFS, {"first": FIRST_NUMBER, "count": BRIEFS, "authors": [a.pk for a in authors]}
                )
                cursor.execute(INSERT_REVISIONS, {"first": FIRST_NUMBER, "count": BRIEFS})
            with connection.cursor() as cursor:
                cursor.execute("VACUUM (ANALYZE) publishing_brief, publishing_revision")
        yield
    finally:
        with django_db_blocker.unblock():
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE publishing_brief, publishing_revision CASCADE")
            User.objects.filter(pk__in=[a.pk for a in authors]).delete()


@pytest.fixture
def viewer(scale, editor) -> Client:
    return client_for(editor)


# --- EXPLAIN of what the dashboard ran -----------------------------------------------------------------


@dataclass(frozen=True)
class PlanNode:
    node_type: str
    relation: str
    index: str
    loops: int
    rows: float

    @classmethod
    def from_json(cls, node: dict[str, Any]) -> PlanNode:
        return cls(
            node_type=node["Node Type"],
            relation=node.get("Relation Name", ""),
            index=node.get("Index Name", ""),
            loops=node["Actual Loops"],
            rows=node["Actual Rows"],
        )


def explain(sql: str) -> list[PlanNode]:
    """Every node of the executed plan of `sql` (EXPLAIN ANALYZE, so loops are real, not estimates)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) {sql}")
        (document,) = cursor.fetchone()
    if isinstance(document, str):
        document = json.loads(document)

    def walk(node: dict[str, Any]) -> Iterator[PlanNode]:
        yield PlanNode.from_json(node)
        for child in node.get("Plans", []):
            yield from walk(child)

    return list(walk(document[0]["Plan"]))


@dataclass(frozen=True)
class DashboardQueries:
    count: str
    page: str
    page_objects: list[Brief]


def dashboard_queries(client: Client, path: str) -> DashboardQueries:
    """The dashboard's two list queries (the paginator's count, then the page) and the page's briefs."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200
    on_briefs = [query["sql"] for query in captured.captured_queries if '"publishing_brief"' in query["sql"]]
    assert len(on_briefs) == 2, on_briefs
    count, page = on_briefs
    assert count.startswith("SELECT COUNT(*)"), count
    return DashboardQueries(count, page, list(response.context["page"].object_list))


BROWSING = [
    pytest.param("/", id="first-page"),
    pytest.param("/?status=in_review", id="status"),
    pytest.param("/?page=2500", id="page-2500-of-5000"),
    pytest.param("/?status=published&page=1000", id="status-page-1000"),
]
SEARCHING = [
    pytest.param("/?q=harbour&page=3", id="title"),
    pytest.param("/?q=brief-1050001", id="public-id"),
]


def assert_revisions_probed_by_index(plan: list[PlanNode]) -> None:
    """Revisions are read by probes of the (brief, number) index, never by scanning the table."""
    revisions = [n for n in plan if n.relation == "publishing_revision"]
    assert revisions and all(n.index == "revision_number_unique_per_brief" for n in revisions), plan


def assert_page_rows_only(plan: list[PlanNode], *, searched: bool = False) -> None:
    """Revisions (for the latest number and headline), authors and whole brief rows are read for the
    page's rows only, however deep the page: nothing is computed for the rows OFFSET skips. A search
    also probes each brief it reads for its current headline (searched)."""
    revisions = [n for n in plan if n.relation == "publishing_revision"]
    assert_revisions_probed_by_index(plan)
    assert searched or all(n.loops <= BRIEFS_PER_PAGE for n in revisions), plan
    authors = [n for n in plan if n.relation == "auth_user"]
    assert authors and all(n.loops * n.rows <= BRIEFS_PER_PAGE for n in authors), plan


@pytest.mark.parametrize("path", BROWSING)
def test_dashboard_page__100k_briefs__ids_from_a_list_index_and_the_rest_for_the_page_only(viewer, path):
    queries = dashboard_queries(viewer, path)

    plan = explain(queries.page)

    assert len(queries.page_objects) == BRIEFS_PER_PAGE
    assert not [n for n in plan if n.node_type == "Seq Scan" and n.relation.startswith("publishing_")], plan
    assert {n.index for n in plan if n.relation == "publishing_brief"} & LIST_INDEXES, plan
    table_rows = [n for n in plan if n.relation == "publishing_brief" and n.index not in LIST_INDEXES]
    assert table_rows and all(n.loops * n.rows <= BRIEFS_PER_PAGE for n in table_rows), plan
    assert_page_rows_only(plan)


@pytest.mark.parametrize("path", SEARCHING)
def test_dashboard_search__100k_briefs__revisions_and_authors_for_the_page_only(viewer, path):
    # pg_trgm is not in the embedded PostgreSQL, so a substring search reads every title: from the
    # covering list index or from the table, whichever PostgreSQL finds cheaper, and the current
    # headline of every brief it reads (a probe of the revision index each). The rest must not grow.
    queries = dashboard_queries(viewer, path)

    plan = explain(queries.page)

    assert queries.page_objects
    assert_page_rows_only(plan, searched=True)


@pytest.mark.parametrize("path", BROWSING)
def test_dashboard_count__100k_briefs__reads_briefs_only(viewer, path):
    queries = dashboard_queries(viewer, path)

    plan = explain(queries.count)

    assert {n.relation for n in plan if n.relation} == {"publishing_brief"}, plan


@pytest.mark.parametrize("path", SEARCHING)
def test_dashboard_search_count__100k_briefs__briefs_and_their_headlines_by_index(viewer, path):
    queries = dashboard_queries(viewer, path)

    plan = explain(queries.count)

    assert {n.relation for n in plan if n.relation} <= {"publishing_brief", "publishing_revision"}, plan
    if any(n.relation == "publishing_revision" for n in plan):
        assert_revisions_probed_by_index(plan)


def test_dashboard__100k_briefs__same_query_count_on_every_page_as_for_one_brief(viewer, django_assert_num_queries):
    with CaptureQueriesContext(connection) as one_brief:
        response = viewer.get("/", {"q": "brief-1000042"})
    assert [b.public_id for b in response.context["page"]] == ["brief-1000042"]

    for path in ["/", "/?page=2", "/?page=5000", "/?status=approved&page=700", "/?q=flood", "/?q=flood&page=400"]:
        with django_assert_num_queries(len(one_brief)):
            assert viewer.get(path).status_code == 200


def test_dashboard__100k_briefs__newest_first_with_their_latest_revision(viewer):
    first = dashboard_queries(viewer, "/").page_objects
    second = dashboard_queries(viewer, "/?page=2").page_objects
    last = dashboard_queries(viewer, "/?page=5000").page_objects

    newest = [f"brief-{FIRST_NUMBER + BRIEFS - i}" for i in range(2 * BRIEFS_PER_PAGE)]
    assert [b.public_id for b in first + second] == newest
    assert [b.public_id for b in last] == [
        f"brief-{FIRST_NUMBER + BRIEFS_PER_PAGE - i}" for i in range(BRIEFS_PER_PAGE)
    ]
    for brief in first + second + last:
        assert brief.latest_revision_number == expected_latest_revision(brief.public_id), brief.public_id
        assert brief.author.username.startswith("scale-author-")


def test_dashboard__100k_briefs__status_and_search_filter_every_page(viewer):
    approved = dashboard_queries(viewer, "/?status=approved&page=500").page_objects
    harbour = dashboard_queries(viewer, "/?q=HARBOUR+STRIKE&page=2").page_objects
    by_id = dashboard_queries(viewer, "/?q=+BRIEF-1050001+").page_objects

    assert {b.status for b in approved} == {Brief.Status.APPROVED}
    in_order = Brief.objects.filter(status=Brief.Status.APPROVED).order_by("-created_at", "-id")
    assert approved == list(in_order[499 * BRIEFS_PER_PAGE : 500 * BRIEFS_PER_PAGE])
    assert len(harbour) == BRIEFS_PER_PAGE
    assert all("Harbour strike" in b.title for b in harbour)
    assert [b.public_id for b in by_id] == ["brief-1050001"]
    assert by_id[0].latest_revision_number == Revision.objects.filter(brief=by_id[0]).count() == 1
