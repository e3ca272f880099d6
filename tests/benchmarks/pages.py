"""(f) The dashboard and the brief list with BENCH_BRIEFS briefs: p95 per round, and queries per page.

The database is topped up to BENCH_BRIEFS briefs with bulk rows (bulk.py: the status mix, 1-3 revisions,
decisions, verified publications and their operations), then VACUUM ANALYZE (what autovacuum does after a
bulk load). Pages are requested through Django's test client in the bench's process: Galley's URLs,
middleware, views, selectors, templates and database, signed in as an editor, with a persistent connection;
no HTTP server, so no network or WSGI server time. The peer: the sign-in page, which reads no brief.
Requests are interleaved page by page; each round gives a p95 per page.
"""

from __future__ import annotations

import time

from tests.benchmarks import bulk
from tests.benchmarks.support import MAIN, Bench, Goal, Row, percentile, phase

WARM_UP = 3


def top_up(bench: Bench) -> int:
    from publishing.models import Brief

    existing = Brief.objects.count()
    missing = bench.sizes.briefs - existing
    if missing > 0:
        with bench.postgres.connect(MAIN) as conn:
            first, last = bulk.insert_briefs(
                conn, count=missing, author_id=bench.editor_id, approver_id=bench.approver_id, mixed=True
            )
            bulk.check_payload_hashes(conn, first=first, last=last)
            bulk.vacuum_analyze(
                conn,
                "publishing_brief",
                "publishing_revision",
                "approvals_approval",
                "publishing_publication",
                "workers_operation",
                "workers_attempt",
                "workers_dependency",
            )
    return Brief.objects.count()


def run(bench: Bench) -> list[Row]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    sizes = bench.sizes
    with phase(f"pages: {sizes.briefs:,} briefs in the database"):
        briefs = top_up(bench)
    signed_in = Client(HTTP_HOST="localhost")
    signed_in.force_login(get_user_model().objects.get(id=bench.editor_id))
    anonymous = Client(HTTP_HOST="localhost")
    middle_page = max(1, briefs // 20 // 2)  # BRIEFS_PER_PAGE is 20
    pages = [  # (name, client, URL, goal on the p95 in ms)
        ("sign-in page (peer: reads no brief)", anonymous, "/login/", None),
        ("(f) dashboard (all briefs, newest first)", signed_in, "/", 100),
        ("(f) brief list filtered by status", signed_in, "/?status=in_review", 100),
        ("(f) brief list searched by title", signed_in, "/?q=harbour", 100),
        (f"(f) brief list page {middle_page:,}", signed_in, f"/?page={middle_page}", 100),
    ]
    queries: dict[str, int] = {}
    for name, client, url, _goal in pages:
        for _ in range(WARM_UP):
            client.get(url)
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        if response.status_code != 200:
            raise AssertionError(f"{url} answered {response.status_code}")
        queries[name] = len(captured.captured_queries)
    p95: dict[str, list[float]] = {name: [] for name, *_ in pages}
    for number in range(sizes.rounds):
        with phase(f"pages round {number + 1}/{sizes.rounds}: {sizes.page_requests} requests per page"):
            timings: dict[str, list[float]] = {name: [] for name, *_ in pages}
            for _ in range(sizes.page_requests):
                for name, client, url, _goal in pages:
                    started = time.perf_counter()
                    response = client.get(url)
                    timings[name].append(time.perf_counter() - started)
                    if response.status_code != 200:
                        raise AssertionError(f"{url} answered {response.status_code}")
            for name, values in timings.items():
                p95[name].append(1000 * percentile(values, 0.95))
    section = (
        f"(f) pages with {briefs:,} briefs, {sizes.page_requests} requests per page and round (test client, no HTTP)"
    )
    rows = []
    for index, (name, _client, url, goal) in enumerate(pages):
        rows.append(
            Row(
                f"{name} p95, {queries[name]} queries",
                p95[name],
                "ms",
                goal=Goal(goal, at_most=True, strict=True, unit=" ms") if goal else None,
                note=f"GET {url}",
                section=section if index == 0 else "",
            )
        )
    return rows
