"""Bulk rows for the large figures, written with INSERT … SELECT generate_series instead of the actions, but
shaped like the rows the actions write: the same columns and values, every constraint, foreign key and
trigger of the schema in force (nothing is disabled). Audit events are not written: no measured query
reads them.

- briefs: a brief (public id from the brief number sequence), its revisions 1..k (payload {"body", "title"},
  payload_hash = sha256 of the canonical JSON, checked against publishing.hashing afterwards), and by status:
  in review / drafting (revisions only), changes requested (that decision on the latest revision), published
  (an approval of the latest revision frozen to the primary channel, its verified publication there, the
  publish and verify operations that succeeded with one attempt each and the verify → publish edge, and
  published_revision_number).
- finished operations: publish/verify pairs that succeeded, with their attempts and dependency edges.
- pending operations: what enqueue_operation inserts for a fresh intent; and those claimed and finished in
  bulk, leaving the row versions the claim and the finish leave.
"""

from __future__ import annotations

import psycopg

from publishing.hashing import payload_hash, source_hash
from publishing.identities import PRIMARY_CHANNEL

# Payloads are built in SQL as canonical JSON text: keys sorted ("body" < "title"), no whitespace, plain
# ASCII (to_json escapes exactly as json.dumps(ensure_ascii=False) does for it). check_payload_hashes
# recomputes a sample in Python.
CANONICAL_PAYLOAD = "'{{\"body\":' || to_json({body})::text || ',\"title\":' || to_json({title})::text || '}}'"
TOPICS = ["harbour", "election", "budget", "railway", "festival", "drought", "museum", "vaccine", "bridge", "glacier"]

# One in 20 briefs by number: 2 drafting (no revision yet), 6 in review, 2 changes requested, 10 published.
STATUSES = ["drafting"] * 2 + ["in_review"] * 6 + ["changes_requested"] * 2 + ["published"] * 10
OPERATION_COLUMNS = """(key, kind, payload_hash, subject_type, subject_id, subject_version, channel, arguments,
    status, attempts, waits, max_attempts, next_attempt_at, deadline, lease_owner, fencing_token, last_error_kind,
    last_error_message, needs_operator, result, created_at, updated_at, finished_at)"""
PRIMARY_CHANNEL_ID = "(SELECT id FROM publishing_channel WHERE slug = %(channel)s)"


def insert_briefs(
    conn: psycopg.Connection, *, count: int, author_id: int, approver_id: int, mixed: bool, label: str = "Bench"
) -> tuple[int, int]:
    """`count` briefs; mixed: the status mix above with 1-3 revisions, else all in review with one revision
    (ready to be approved). Returns the range of brief ids (first, last). One transaction."""
    statuses = "ARRAY[" + ",".join(f"'{status}'" for status in STATUSES) + "]"
    status = f"({statuses})[n %% 20 + 1]" if mixed else "'in_review'"
    topics = "ARRAY[" + ",".join(f"'{topic}'" for topic in TOPICS) + "]"
    params = {"count": count, "label": label, "source_hash": source_hash(""), "author": author_id, "mixed": mixed}
    with conn.transaction():
        first, last = conn.execute(
            f"""
            WITH numbered AS (
                SELECT g, nextval('publishing_brief_number_seq') AS n FROM generate_series(1, %(count)s) AS g
            ), inserted AS (
                INSERT INTO publishing_brief
                    (public_id, title, source_material, source_hash, author_id, status, published_revision_number,
                     created_at, updated_at, desk_id, legal_review)
                SELECT 'brief-' || CASE WHEN n < 1000 THEN lpad(n::text, 3, '0') ELSE n::text END,
                       %(label)s || ' brief ' || n || ' on the ' || ({topics})[n %% 10 + 1],
                       '', %(source_hash)s, %(author)s, {status},
                       CASE WHEN {status} = 'published' THEN 1 + n %% 3 END,
                       statement_timestamp() - (%(count)s - g) * interval '20 seconds',
                       statement_timestamp() - (%(count)s - g) * interval '20 seconds' + interval '5 minutes',
                       (SELECT id FROM publishing_desk WHERE is_default), false
                FROM numbered
                RETURNING id
            )
            SELECT min(id), max(id) FROM inserted
            """,  # type: ignore[arg-type]
            params,
        ).fetchone()  # type: ignore[misc]
        payload = CANONICAL_PAYLOAD.format(
            body="'Revision ' || r || ' of ' || b.public_id || '. ' || repeat('Every revision says more. ', 12)",
            title="'Article ' || b.public_id || ', revision ' || r",
        )
        conn.execute(
            f"""
            INSERT INTO publishing_revision (brief_id, number, payload, payload_hash, author_id, created_at)
            SELECT b.id, r, p.text::jsonb, encode(sha256(convert_to(p.text, 'UTF8')), 'hex'), b.author_id,
                   b.created_at + r * interval '1 minute'
            FROM publishing_brief b
            CROSS JOIN LATERAL generate_series(
                1, CASE WHEN b.status = 'drafting' THEN 0 WHEN %(mixed)s THEN 1 + substr(b.public_id, 7)::bigint %% 3
                        ELSE 1 END) AS r
            CROSS JOIN LATERAL (SELECT {payload} AS text) AS p
            WHERE b.id BETWEEN %(first)s AND %(last)s
            """,  # type: ignore[arg-type]
            {**params, "first": first, "last": last},
        )
        if mixed:
            _decide_and_publish(conn, first=first, last=last, approver_id=approver_id)
    return first, last


def _decide_and_publish(conn: psycopg.Connection, *, first: int, last: int, approver_id: int) -> None:
    latest = """
        SELECT DISTINCT ON (r.brief_id) r.id, r.brief_id, r.number, r.payload_hash, r.created_at, b.public_id, b.status
        FROM publishing_revision r JOIN publishing_brief b ON b.id = r.brief_id
        WHERE b.id BETWEEN %(first)s AND %(last)s AND b.status IN ('changes_requested', 'published')
        ORDER BY r.brief_id, r.number DESC
    """
    params = {"first": first, "last": last, "approver": approver_id, "channel": PRIMARY_CHANNEL}
    conn.execute(
        f"""
        INSERT INTO approvals_approval (revision_id, payload_hash, decision, approver_id, comment, created_at)
        SELECT id, payload_hash, CASE status WHEN 'published' THEN 'approved' ELSE 'changes_requested' END,
               %(approver)s, '', created_at + interval '1 minute'
        FROM ({latest}) AS latest
        """,  # type: ignore[arg-type]
        params,
    )
    conn.execute(
        """
        INSERT INTO approvals_approvalcompletion
            (revision_id, payload_hash, approval_id, desk_id, approvals_required, required_groups, created_at)
        SELECT a.revision_id, a.payload_hash, a.id, (SELECT id FROM publishing_desk WHERE is_default), 1, '{}',
               a.created_at
        FROM approvals_approval a JOIN publishing_revision r ON r.id = a.revision_id
        WHERE r.brief_id BETWEEN %(first)s AND %(last)s AND a.decision = 'approved'
        """,
        params,
    )
    conn.execute(
        f"""
        INSERT INTO approvals_approvalchannel (approval_id, channel_id, added_by_id, created_at)
        SELECT a.id, {PRIMARY_CHANNEL_ID}, NULL, a.created_at
        FROM approvals_approval a JOIN publishing_revision r ON r.id = a.revision_id
        WHERE r.brief_id BETWEEN %(first)s AND %(last)s AND a.decision = 'approved'
        """,  # type: ignore[arg-type]
        params,
    )
    conn.execute(
        f"""
        INSERT INTO publishing_publication
            (brief_id, revision_id, channel_id, operation_key, payload_hash, external_id, permalink, created_at,
             verified_at)
        SELECT brief_id, id, {PRIMARY_CHANNEL_ID}, 'publish:' || public_id || ':revision-' || number, payload_hash,
               'pub-' || id, 'http://127.0.0.1:8001/articles/pub-' || id,
               created_at + interval '2 minutes', created_at + interval '2 minutes 1 second'
        FROM ({latest}) AS latest WHERE status = 'published'
        """,  # type: ignore[arg-type]
        params,
    )
    publications = """
        SELECT b.public_id, r.number, p.payload_hash, p.external_id, p.permalink, p.created_at, p.verified_at
        FROM publishing_publication p JOIN publishing_brief b ON b.id = p.brief_id
             JOIN publishing_revision r ON r.id = p.revision_id
        WHERE b.id BETWEEN %(first)s AND %(last)s
    """
    _insert_succeeded_pairs(conn, publications, params)


def _insert_succeeded_pairs(conn: psycopg.Connection, source: str, params: dict[str, object]) -> None:
    """A publish and a verify operation per row of `source` (public_id, number, payload_hash, external_id,
    permalink, created_at, verified_at), both succeeded on the primary channel with one attempt each (its
    keys are the unextended ones), and the verify → publish edge. In the caller's transaction."""
    # The planner has no statistics on rows this transaction wrote: without this it may join the new
    # operations to themselves (the dependency edges) by nested loop, quadratic in their number.
    conn.execute("SET LOCAL enable_nestloop = off")
    conn.execute(
        f"""
        WITH s AS ({source}),
        ops AS (
            INSERT INTO workers_operation {OPERATION_COLUMNS}
            SELECT 'publish:' || public_id || ':revision-' || number, 'publish', payload_hash, 'brief', public_id,
                   number, %(channel)s, jsonb_build_object('revision', number), 'succeeded', 1, 0, 8,
                   created_at - interval '1 minute',
                   created_at + interval '1 day', '', 1, '', '', false,
                   jsonb_build_object('external_id', external_id, 'permalink', permalink, 'first_application', true),
                   created_at - interval '1 minute', created_at, created_at
            FROM s
            UNION ALL
            SELECT 'verify:' || public_id || ':revision-' || number, 'verify', payload_hash, 'brief', public_id,
                   number, %(channel)s, jsonb_build_object(
                       'revision', number, 'publish_key', 'publish:' || public_id || ':revision-' || number),
                   'succeeded', 1, 0, 8, created_at, created_at + interval '1 day', '', 1, '', '', false,
                   jsonb_build_object('permalink', permalink, 'verified_hash', payload_hash, 'title_shown', true),
                   created_at, verified_at, verified_at
            FROM s
            RETURNING id, key, kind, arguments, created_at, finished_at
        ), attempts AS (
            INSERT INTO workers_attempt (id, operation_id, number, worker_id, fencing_token, ambiguous, started_at,
                                         finished_at, outcome, error_kind, error_message, http_status, duration_ms,
                                         usage)
            SELECT gen_random_uuid(), id, 1, 'bench-bulk', 1, false, created_at, finished_at, 'succeeded', '', '',
                   NULL, 30, '{{}}'::jsonb
            FROM ops
        )
        INSERT INTO workers_dependency (operation_id, prerequisite_id, requires)
        SELECT v.id, p.id, 'success'
        FROM ops v JOIN ops p ON p.key = v.arguments ->> 'publish_key'
        WHERE v.kind = 'verify' AND p.kind = 'publish'
        """,  # type: ignore[arg-type]
        {**params, "channel": PRIMARY_CHANNEL},
    )


def insert_finished_operations(conn: psycopg.Connection, *, count: int, offset: int = 0) -> None:
    """`count` finished operations (count / 2 publish/verify pairs of briefs not in this database: the
    operations table has no foreign key to briefs), spread over the last 30 days. One transaction."""
    source = f"""
        SELECT 'brief-' || (g + {int(offset)}) AS public_id, 1 AS number,
               encode(sha256(convert_to('brief-' || (g + {int(offset)}), 'UTF8')), 'hex') AS payload_hash,
               'pub-' || g AS external_id, 'http://127.0.0.1:8001/articles/pub-' || g AS permalink,
               statement_timestamp() - interval '30 days' + g * (interval '30 days' / %(pairs)s) AS created_at,
               statement_timestamp() - interval '30 days' + g * (interval '30 days' / %(pairs)s) + interval '1 second'
                   AS verified_at
        FROM generate_series(1, %(pairs)s) AS g
    """
    with conn.transaction():
        _insert_succeeded_pairs(conn, source, {"pairs": max(1, count // 2)})


def insert_pending_operations(conn: psycopg.Connection, *, kind: str, count: int, first: int = 0) -> None:
    """`count` fresh pending operations of `kind` on no channel, as enqueue_operation writes them. One
    transaction."""
    with conn.transaction():
        conn.execute(
            """
            INSERT INTO workers_operation
                (key, kind, payload_hash, subject_type, subject_id, channel, arguments, status, attempts, waits,
                 max_attempts, next_attempt_at, deadline, lease_owner, fencing_token, last_error_kind,
                 last_error_message, needs_operator, created_at, updated_at)
            SELECT %(kind)s || ':' || lpad(g::text, 7, '0'), %(kind)s, repeat('0', 64), 'bench', g::text, '',
                   '{}'::jsonb,
                   'pending', 0, 0, 8, statement_timestamp(), statement_timestamp() + interval '1 day', '', 0, '', '',
                   false, statement_timestamp(), statement_timestamp()
            FROM generate_series(%(first)s::bigint + 1, %(first)s::bigint + %(count)s) AS g
            """,
            {"kind": kind, "count": count, "first": first},
        )


def claim_and_finish(conn: psycopg.Connection, *, kind: str, batch: int = 1000) -> int:
    """Every pending operation of `kind` claimed and then succeeded, as the claim and the fenced finish leave
    them (a lease and an attempt taken, then the lease released, the attempt closed, the finish time set),
    `batch` operations per transaction and each step committed apart, so that every operation leaves the
    row versions a real claim and finish leave. Returns how many. Autocommit connection."""
    done = 0
    while True:
        with conn.transaction():
            claimed = conn.execute(
                """
                WITH due AS (
                    SELECT id FROM workers_operation WHERE kind = %(kind)s AND status = 'pending'
                    ORDER BY id LIMIT %(batch)s
                ), claimed AS (
                    UPDATE workers_operation o
                    SET status = 'running', lease_owner = 'bench-churn',
                        lease_expires_at = statement_timestamp() + interval '60 seconds',
                        fencing_token = o.fencing_token + 1, attempts = o.attempts + 1,
                        updated_at = statement_timestamp()
                    FROM due WHERE o.id = due.id
                    RETURNING o.id, o.attempts, o.fencing_token
                ), opened AS (
                    INSERT INTO workers_attempt (id, operation_id, number, worker_id, fencing_token, ambiguous,
                                                 due_at, started_at, outcome, error_kind, error_message, usage)
                    SELECT gen_random_uuid(), id, attempts, 'bench-churn', fencing_token, false,
                           statement_timestamp(), statement_timestamp(), '', '', '', '{}'::jsonb
                    FROM claimed
                )
                SELECT array_agg(id) FROM claimed
                """,
                {"kind": kind, "batch": batch},
            ).fetchone()[0]  # type: ignore[index]
        if not claimed:
            return done
        with conn.transaction():
            conn.execute(
                """
                WITH finished AS (
                    UPDATE workers_operation
                    SET status = 'succeeded', lease_owner = '', lease_expires_at = NULL, result = '{}'::jsonb,
                        finished_at = statement_timestamp(), updated_at = statement_timestamp()
                    WHERE id = ANY(%(ids)s)
                    RETURNING id
                )
                UPDATE workers_attempt a
                SET finished_at = statement_timestamp(), outcome = 'succeeded', duration_ms = 1
                FROM finished WHERE a.operation_id = finished.id AND a.finished_at IS NULL
                """,
                {"ids": claimed},
            )
        done += len(claimed)


def check_payload_hashes(conn: psycopg.Connection, *, first: int, last: int) -> None:
    """The SQL-built payloads hash as publishing.hashing says (a sample of the range)."""
    rows = conn.execute(
        "SELECT payload, payload_hash FROM publishing_revision WHERE brief_id BETWEEN %s AND %s ORDER BY id LIMIT 5",
        [first, last],
    ).fetchall()
    for payload, stored in rows:
        if payload_hash(payload) != stored:
            raise AssertionError(f"bulk payload hash {stored} is not publishing.hashing's for {payload!r}")


def vacuum_analyze(conn: psycopg.Connection, *tables: str) -> None:
    """What autovacuum does soon after a bulk insert (statistics, visibility map), done now."""
    for table in tables:
        conn.execute(f"VACUUM (ANALYZE) {table}")  # type: ignore[arg-type]
