"""Publishing's raw SQL: every statement the hot path runs instead of the ORM, named, each with what it
does and the invariant it serves; and how their rows come back, by column name into the model they
are rows of (`columns` and `from_row`, the only place that knows a model's column list; the statements
run through workers.prepared.execute_prepared with psycopg's dict_row).

Table and column names come from the models (`_meta`), values are parameters: renaming a table, a
column or a status touches the model alone. The valid approval is approvals' rule: the statement that
checks it (`publish_checks_sql`) takes its fragment (approvals.sql) as an argument, so that nothing
here imports approvals (publishing.actions runs these statements and imports nothing of approvals).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Model

from publishing.models import Brief, Channel, Publication, Revision, StepArtifact
from workers.models import Attempt, Operation

M = TypeVar("M", bound=Model)


def columns(model: type[Model], alias: str, *, prefix: str = "", only: tuple[str, ...] = ()) -> str:
    """The select list of `model`'s concrete columns (or of `only` those attnames), read from table
    alias `alias`, each named `prefix` + its attname: what `from_row` reads back."""
    fields = [f for f in model._meta.concrete_fields if not only or f.attname in only]
    return ", ".join(f"{alias}.{field.column} AS {prefix}{field.attname}" for field in fields)


def from_row(model: type[M], row: Mapping[str, Any], *, prefix: str = "") -> M:
    """An instance of `model` from the columns of `row` named `prefix` + attname (a select list of
    `columns`); a column the row does not have is deferred (loads if ever read). Each value goes
    through its field's from_db_value, as Django's own queries do: its adapters load jsonb as text
    and leave decoding to the field."""
    names, values = [], []
    for field in model._meta.concrete_fields:
        if prefix + field.attname not in row:
            continue
        value = row[prefix + field.attname]
        if value is not None and hasattr(field, "from_db_value"):
            value = field.from_db_value(value, None, connection)
        names.append(field.attname)
        values.append(value)
    return model.from_db(None, names, values)


def brief_versions(operation: str, *, public_id: str, versions: str) -> str:
    """The condition that operation row `operation` acts on brief `public_id` (an SQL expression) at a
    revision `versions` (a comparison, e.g. "< %(number)s"): a brief's older or newer publishes and
    verifications, by the typed, indexed subject_version (the subject index's columns). The ORM's
    spelling is `.for_subject("brief", public_id).filter(subject_version__lt=number)`."""
    return (
        f"{operation}.subject_type = 'brief' AND {operation}.subject_id = {public_id}"
        f" AND {operation}.subject_version {versions}"
    )


_BRIEF = Brief._meta.db_table
_CHANNEL = Channel._meta.db_table
_REVISION = Revision._meta.db_table
_PUBLICATION = Publication._meta.db_table
_OPERATION = Operation._meta.db_table
_ATTEMPT = Attempt._meta.db_table
_STEP_ARTIFACT = StepArtifact._meta.db_table

# -- Reads (publishing.selectors) -------------------------------------------------------------------

# A brief's badge (publishing.selectors.publications.list_brief_badges): the publish and verify
# operations of the given keys, in id order. `key = ANY(array)` runs even for an empty array (`key__in=[]`
# would skip the query), keeping a page's query count constant; the key is unique, so each key is one
# index probe. An approved brief whose publish ended unpublished is not shown as on its way: done means
# observed (docs/invariants.md#i10).
BADGE_OPERATIONS_SQL = f"SELECT * FROM {_OPERATION} WHERE key = ANY(%s) ORDER BY id"  # noqa: S608 -- the model's table

# A verification's first read (publishing.selectors.publications.get_publication): the publication the
# publish operation %(key)s recorded, with its revision (columns prefixed "revision__"); what is
# verified is what was published (docs/invariants.md#i10).
PUBLICATION_SQL = f"""
SELECT {columns(Publication, "p")}, {columns(Revision, "r", prefix="revision__")}
FROM {_PUBLICATION} p
JOIN {_REVISION} r ON r.id = p.revision_id
WHERE p.operation_key = %(key)s
"""  # noqa: S608 -- column and table names from the models; every value is a parameter


def publish_checks_sql(*, valid_approval: str) -> str:
    """What a publish checks before it sends revision %(number)s of brief %(public_id)s to channel
    %(channel)s, in one statement (one snapshot) instead of four ORM queries: the revision (its columns
    prefixed "revision__"), whether it is approved for that channel — `valid_approval`, approvals'
    fragment over the revision alias `r` (docs/invariants.md#i3, #i14) — and the newer revisions of the
    brief that are published on that channel or whose publish to it has made an attempt (may be there),
    which it must not regress below (docs/invariants.md#i4: per channel; another channel's progress
    is its own)."""
    return f"""
SELECT {columns(Revision, "r", prefix="revision__")},
       {valid_approval} AS approved,
       (SELECT newer.number
        FROM {_PUBLICATION} p
        JOIN {_REVISION} newer ON newer.id = p.revision_id
        JOIN {_CHANNEL} ch ON ch.id = p.channel_id
        WHERE p.brief_id = r.brief_id AND newer.number > r.number AND ch.slug = %(channel)s
        LIMIT 1) AS newer_published,
       (SELECT o.subject_version
        FROM {_OPERATION} o
        WHERE {brief_versions("o", public_id="b.public_id", versions="> r.number")}
          AND o.kind = %(publish)s AND o.channel = %(channel)s AND o.attempts > 0
        LIMIT 1) AS newer_attempted
FROM {_REVISION} r
JOIN {_BRIEF} b ON b.id = r.brief_id
WHERE b.public_id = %(public_id)s AND r.number = %(number)s
"""  # noqa: S608 -- table names from the models; every value is a parameter


# Every AI token the kept attempts of summary steps recorded (docs/editorial.md#ai-summary),
# by step, the model of the artifact the step stored, and kind of token; the figures the ops page and
# /metrics show (publishing.selectors.metrics). One statement.
AI_TOKENS_SQL = f"""
SELECT o.arguments ->> 'step' AS step, coalesce(s.model, '') AS model,
       left(u.key, -length('_tokens')) AS kind, sum(u.value::bigint) AS tokens
FROM {_ATTEMPT} a
JOIN {_OPERATION} o ON o.id = a.operation_id
LEFT JOIN {_STEP_ARTIFACT} s ON s.identity = o.result ->> 'artifact'
CROSS JOIN LATERAL jsonb_each_text(a.usage) u
WHERE o.kind = %(kind)s AND right(u.key, length('_tokens')) = '_tokens'
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
"""  # noqa: S608 -- table names from the models; every value is a parameter

# -- Writes (publishing.actions) -------------------------------------------------------------------

# A new brief's number, for its public id (brief-042): the sequence of migration 0002, never reused, so
# a public id is stable for the life of its brief (docs/invariants.md#i1: identities never change).
NEXT_BRIEF_NUMBER_SQL = f"SELECT nextval('{_BRIEF}_number_seq') AS number"

# A summary step's artifact, canonical-first (docs/invariants.md#i6: publishing.actions.summaries.do_store_artifact):
# insert the proposal, or nothing when another run's insert of the identity won; the caller reads the
# winner back. Positional parameters: brief id, source hash, step, identity, content, provider, model, usage.
STORE_ARTIFACT_SQL = f"""
INSERT INTO {_STEP_ARTIFACT}
    (brief_id, source_hash, step, identity, content, provider, model, usage, created_at)
VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s::jsonb, statement_timestamp())
ON CONFLICT (identity) DO NOTHING
"""  # noqa: S608 -- the table name from the model; every value is a parameter


# The publish's finalize: the brief's lock and the publication, in one statement (docs/invariants.md#i5: the
# publication commits with the operation's success). The CTE locks the brief before the insert reads
# it (docs/architecture.md#lock-order), and ON CONFLICT makes a second run insert nothing. Without the lock the
# publication's foreign-key check would take the brief at COMMIT, after the operation row: the reverse
# of an approval, which holds the brief and waits for the operation. NO KEY UPDATE still serialises
# with the brief's writers.
RECORD_PUBLICATION_SQL = f"""
WITH brief AS (
    SELECT id FROM {_BRIEF} WHERE id = %(brief_id)s FOR NO KEY UPDATE
)
INSERT INTO {_PUBLICATION}
    (brief_id, revision_id, channel_id, operation_key, payload_hash, external_id, permalink, created_at, verified_at)
SELECT brief.id, %(revision_id)s, channel.id, %(key)s, %(payload_hash)s, %(external_id)s, %(permalink)s, %(now)s, NULL
FROM brief, {_CHANNEL} channel
WHERE channel.slug = %(channel)s
ON CONFLICT (operation_key) DO NOTHING
RETURNING id, channel_id
"""  # noqa: S608 -- table names from the models; every value is a parameter

# The verification's finalize locks the brief in a statement of its own (first:
# docs/architecture.md#lock-order): a statement that waited for the lock still reads other tables as
# they were when it began, and would miss a revision the lock's holder added meanwhile. Its columns
# are the brief's (from_row).
LOCK_BRIEF_SQL = f"""
SELECT {columns(Brief, "b", only=("id", "public_id", "status", "published_revision_number", "author_id"))}
FROM {_BRIEF} b WHERE b.id = %(brief_id)s
FOR NO KEY UPDATE
"""  # noqa: S608 -- the table name from the model; every value is a parameter

# Then its writes in one statement: mark the publication observed (docs/invariants.md#i10), advance the brief's
# published revision — the highest verified on any channel — (never backwards: docs/invariants.md#i4) and move
# it to "published" when this is its latest revision (whether its status may go there is BRIEF_TRANSITIONS'
# to say: the caller checks it, and rolls all of this back if not). It returns the brief's new status (None
# when it did not advance), its latest revision number, whether this is the publication's first
# observation (a second run of the finalize records nothing again), whether a newer revision is verified on this
# publication's channel already (then this observation changes nothing there), the brief's stuck
# publications of older revisions on this channel (publish or verify operations in resolutions.OPEN), which
# this one replaces, and the older publishes to this channel that ended without a Publication although
# their worker had recorded the channel's receipt (`result`: applied there), dead, in conflict or cancelled
# by an operator. Another channel's operations are never touched (docs/invariants.md#i14).
RECORD_VERIFICATION_SQL = f"""
WITH verified AS (
    UPDATE {_PUBLICATION} SET verified_at = %(now)s
    WHERE id = %(publication_id)s AND verified_at IS NULL
    RETURNING id
),
latest AS (
    SELECT max(number) AS number FROM {_REVISION} WHERE brief_id = %(brief_id)s
),
shown AS (
    SELECT b.id, (SELECT number FROM latest) = %(number)s AND b.status <> %(published)s AS published
    FROM {_BRIEF} b WHERE b.id = %(brief_id)s
),
advanced AS (
    UPDATE {_BRIEF} b
    SET published_revision_number = %(number)s,
        status = CASE WHEN shown.published THEN %(published)s ELSE b.status END,
        updated_at = CASE WHEN shown.published THEN %(now)s ELSE b.updated_at END
    FROM shown
    WHERE b.id = shown.id
      AND (b.published_revision_number IS NULL OR b.published_revision_number < %(number)s)
    RETURNING b.status
)
SELECT (SELECT status FROM advanced) AS new_status,
       (SELECT number FROM latest) AS latest,
       EXISTS (SELECT 1 FROM verified) AS first_observation,
       EXISTS (SELECT 1 FROM {_PUBLICATION} p JOIN {_REVISION} r ON r.id = p.revision_id
               WHERE p.brief_id = %(brief_id)s AND p.channel_id = %(channel_id)s
                 AND p.verified_at IS NOT NULL AND r.number > %(number)s) AS newer_on_channel,
       ARRAY(SELECT o.id FROM {_OPERATION} o
             WHERE {brief_versions("o", public_id="%(public_id)s", versions="< %(number)s")}
               AND o.channel = %(channel)s
               AND o.kind = ANY(%(kinds)s::text[]) AND o.status = ANY(%(open)s::text[])
             ORDER BY o.id) AS replaced,
       ARRAY(SELECT o.id FROM {_OPERATION} o
             WHERE {brief_versions("o", public_id="%(public_id)s", versions="< %(number)s")}
               AND o.channel = %(channel)s
               AND o.kind = %(publish)s AND o.status = ANY(%(ended)s::text[]) AND o.result ? 'external_id'
               AND NOT EXISTS (SELECT 1 FROM {_PUBLICATION} p WHERE p.operation_key = o.key)
             ORDER BY o.id) AS unrecorded
"""  # noqa: S608 -- table names from the models; every value is a parameter


# -- Locks and the clock (publishing.actions) ---------------------------------------------------------

# One API request per (user, Idempotency-Key) at a time (publishing.actions.idempotency): a transaction
# lock, released by the request's commit or rollback, so that a replay waits for nothing and answers
# "in flight" instead (docs/api.md#idempotency-key).
TRY_IDEMPOTENCY_LOCK_SQL = "SELECT pg_try_advisory_xact_lock(%(lock_id)s) AS locked"

# pg_advisory_xact_lock key of a drift round ("DRIFT" in ASCII).
DRIFT_ROUND_LOCK_KEY = 0x4452494654
# One drift round at a time (publishing.actions.drift): a concurrent round waits here, then sees this
# one's checks under way in its own statements' snapshots.
DRIFT_ROUND_LOCK_SQL = f"SELECT pg_advisory_xact_lock({DRIFT_ROUND_LOCK_KEY})"
# A drift round's id: the database's time once the round holds its lock (a statement of its own, so
# that it is read after the wait).
DRIFT_ROUND_ID_SQL = """SELECT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS.US"Z"')"""
