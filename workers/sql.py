"""Every raw SQL statement of the durable machinery, named, in one place, with the fragments the
statements share: the fence, the claimable operation, the released lease, the close of a dead
worker's attempt.

The statements are built from the models when this module is imported: table names from
`_meta.db_table`, statuses from OperationStatus, an INSERT's column defaults from the model's
fields. So a renamed status or a new column touches the model alone. The models' constants are SQL
literals (`sql_literal`), not passed as parameters: the text of each statement is fixed, so it is
prepared once per connection (workers.prepared), and the claim's WHERE spells the very predicates
of the partial indexes it must use. Every other value is a named parameter.

Each result is read by column name (a `dict_row` cursor), never by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import models

from workers.errors import LEASE_EXPIRED
from workers.models import (
    FINISHED_STATUSES,
    UNFINISHED_STATUSES,
    WAITING_STATUSES,
    Attempt,
    AuditEvent,
    ChannelGate,
    Conflict,
    Dependency,
    Operation,
    OperationStatus,
)

S = OperationStatus


def sql_literal(value: str | int | bool | None) -> str:
    """A constant of the models (a status, a field's default) as an SQL literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    """Constants as the items of an SQL `IN (…)` list, e.g. the waiting statuses (WAITING)."""
    return ", ".join(sql_literal(value) for value in values)


def sql_assignments(values: Mapping[str, str | int | bool | None]) -> str:
    """`column = literal, …`: the SET list of `values` (a mapping an ORM path may pass to `update()`)."""
    return ", ".join(f"{column} = {sql_literal(value)}" for column, value in values.items())


def insert_values(model: type[models.Model], given: Mapping[str, str]) -> tuple[str, str]:
    """The column list and the VALUES list of an INSERT of one `model` row: the `given` columns take
    their SQL expression, every other one its field's default (a nullable field without a default is
    left out: NULL). A field without a constant default must be given; one missing fails at import."""
    if unknown := set(given) - {field.column for field in model._meta.concrete_fields}:
        raise TypeError(f"{model.__name__} has no columns {sorted(unknown)}")
    columns, values = [], []
    for field in model._meta.concrete_fields:
        if field.primary_key and field.column not in given:
            continue
        if field.column in given:
            expression = given[field.column]
        elif field.null and not field.has_default():
            continue
        elif (field.has_default() and callable(field.default)) or field.get_default() is None:
            raise TypeError(f"{model.__name__}.{field.name} has no constant default: give its value")
        else:
            expression = sql_literal(field.get_default())
        columns.append(field.column)
        values.append(expression)
    return ", ".join(columns), ", ".join(values)


OPERATION = Operation._meta.db_table
ATTEMPT = Attempt._meta.db_table
DEPENDENCY = Dependency._meta.db_table
CONFLICT = Conflict._meta.db_table
AUDIT_EVENT = AuditEvent._meta.db_table
CHANNEL_GATE = ChannelGate._meta.db_table

RUNNING = sql_literal(S.RUNNING)
WAITING = sql_list(WAITING_STATUSES)
UNFINISHED = sql_list(UNFINISHED_STATUSES)
FINISHED = sql_list(FINISHED_STATUSES)


# --- the doorbell (workers.doorbell) -----------------------------------------------------------

CHANNEL = "galley_doorbell"
# A worker process listens for rings (the doorbell's Listener).
LISTEN_SQL = f"LISTEN {CHANNEL}"
UNLISTEN_SQL = f"UNLISTEN {CHANNEL}"
# A ring, delivered at COMMIT and dropped on rollback: it never announces work that is not there.
RING_SQL = f"SELECT pg_notify('{CHANNEL}', '')"
# A listener's check that it hears rings (workers.doorbell.Listener): a ring whose payload only it knows.
PROBE_PAYLOAD_PREFIX = "probe:"
PROBE_SQL = f"SELECT pg_notify('{CHANNEL}', %(payload)s)"
# The ring as a column of a statement that made work due: saves the round trip of RING_SQL.
# `%(ring)s` is doorbell.rings(); the caller then calls doorbell.rang_in_statement().
NOTIFY_SQL = f"(SELECT pg_notify('{CHANNEL}', '') WHERE %(ring)s)"


# --- the fence, the lease, the dead worker's attempt (docs/invariants.md#i8) --------------------

# The fence of every write after the claim (docs/architecture.md#fencing): the operation's id, the claim's lease owner
# and fencing token, and still running. Its parameters are named after the columns, so the ORM's
# fenced update (claims.fenced_update) filters on the same values with FENCE_STATUS.
FENCE_COLUMNS = ("id", "lease_owner", "fencing_token")
FENCE_STATUS = S.RUNNING
FENCE_SQL = " AND ".join(f"{column} = %({column})s" for column in FENCE_COLUMNS) + f" AND status = {RUNNING}"

# A lease released (an operation leaving running): its columns back at the model's defaults, as on an
# operation never claimed. The ORM's transitions update them to these same values.
RELEASED_LEASE = {
    field.name: field.get_default() for field in (Operation.lease_owner.field, Operation.lease_expires_at.field)
}
RELEASE_LEASE_SQL = sql_assignments(RELEASED_LEASE)

# An attempt whose worker stopped before recording an outcome (died, or stalled past its lease): closed
# for the record when its operation is taken over (the claim) or made claimable again (the reconciler).
ABANDONED_ATTEMPT = {"error_kind": LEASE_EXPIRED, "error_message": "the worker stopped before an outcome"}


def close_abandoned_attempts(operations: str) -> str:
    """The UPDATE closing the open attempts of the operations whose ids the CTE `operations` holds."""
    return f"""UPDATE {ATTEMPT} a
    SET finished_at = statement_timestamp(), {sql_assignments(ABANDONED_ATTEMPT)}
    FROM {operations}
    WHERE a.operation_id = {operations}.id AND a.finished_at IS NULL"""  # noqa: S608 -- this module's constants


# --- claims (workers.actions.claims; docs/invariants.md#i7 and #i8) ---------------------------

# An operation a claim may take (docs/invariants.md#i7 and the bounds): deadline left, of the asked kinds,
# every prerequisite met, its channel not paused (a Retry-After it answered: ChannelGate) nor holding
# its share of the claiming process's threads already (`busy_channels`: workers.drain), and attempts
# left (below). Due is one of two cases, each matching one
# partial index (so that a claim reads a few index entries in order, however long the queue):
# waiting and due, or running with a lease expired (database clock).
_CLAIMABLE_SQL = f"""
    AND o.deadline > statement_timestamp()
    AND (%(kinds)s::text[] IS NULL OR o.kind = ANY(%(kinds)s::text[]))
    AND NOT EXISTS (
        SELECT 1
        FROM {DEPENDENCY} d
        JOIN {OPERATION} p ON p.id = d.prerequisite_id
        WHERE d.operation_id = o.id
          AND CASE d.requires
                  WHEN {sql_literal(Dependency.Requires.SUCCESS)} THEN p.status <> {sql_literal(S.SUCCEEDED)}
                  ELSE p.status IN ({UNFINISHED})
              END)
    AND NOT EXISTS (
        SELECT 1 FROM {CHANNEL_GATE} g WHERE g.channel = o.channel AND g.paused_until > statement_timestamp())
    AND NOT (o.channel = ANY(%(busy_channels)s::text[]))
"""  # noqa: S608 -- this module's constants
# Waiting and due: the predicate of operation_due_idx.
WAITING_DUE_SQL = (
    f"o.status IN ({WAITING}) AND o.next_attempt_at <= statement_timestamp()"
    " AND o.attempts - o.waits < o.max_attempts" + _CLAIMABLE_SQL
)
# Running with an expired lease: the predicate of operation_lease_idx. A lease that ran out after its
# attempt observed the effect (`result` recorded before the finalize: `complete_operation`) was no
# failure: that attempt is not counted (the takeover adds a wait for it), so it may be taken over even
# when it was the last attempt the budget allowed.
LEASE_EXPIRED_SQL = (
    f"o.status = {RUNNING} AND o.lease_expires_at < statement_timestamp()"
    " AND (o.attempts - o.waits < o.max_attempts OR o.result IS NOT NULL)" + _CLAIMABLE_SQL
)

# The claim, in one statement (docs/invariants.md#i8): lock due rows (SKIP LOCKED), take the lease with a new
# fencing token, close the attempt a dead worker left open, and open this attempt. The attempt is
# ambiguous when the previous one may have had its effect: it never recorded an outcome (its
# worker died: an open attempt row, seen in the statement's snapshot, before `abandoned` closes it),
# it ended in a kind that may have reached the target, or an attempt observed the effect (`result`).
# The attempt keeps when the operation became claimable (its due time, or its lease's expiry for a
# takeover), for the queue time of /metrics. `more_due` says whether another operation was claimable
# (one more row is locked to know it, free again when the statement ends), so that a worker lets one
# more thread claim only when there is work for it. The columns are ClaimedOperation's fields.
CLAIM_SQL = f"""
WITH waiting AS (
    SELECT o.id, o.next_attempt_at, o.next_attempt_at AS due_at
    FROM {OPERATION} o
    WHERE {WAITING_DUE_SQL}
    ORDER BY o.next_attempt_at, o.id
    LIMIT %(limit)s + 1
    FOR UPDATE OF o SKIP LOCKED
),
expired AS (
    SELECT o.id, o.next_attempt_at, o.lease_expires_at AS due_at
    FROM {OPERATION} o
    WHERE {LEASE_EXPIRED_SQL}
    ORDER BY o.lease_expires_at, o.id
    LIMIT %(limit)s + 1
    FOR UPDATE OF o SKIP LOCKED
),
candidates AS (SELECT * FROM waiting UNION ALL SELECT * FROM expired),
due AS (
    SELECT id FROM candidates
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE {OPERATION} o
    SET status = {RUNNING},
        lease_owner = %(owner)s,
        lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s),
        fencing_token = o.fencing_token + 1,
        attempts = o.attempts + 1,
        waits = o.waits + (o.status = {RUNNING} AND o.result IS NOT NULL)::int,
        last_error_kind = CASE WHEN o.status = {RUNNING} THEN {sql_literal(LEASE_EXPIRED)} ELSE o.last_error_kind END,
        updated_at = statement_timestamp()
    FROM due
    WHERE o.id = due.id
    RETURNING o.id, o.key, o.kind, o.payload_hash, o.subject_type, o.subject_id, o.subject_version, o.channel,
              o.arguments,
              o.attempts, o.fencing_token, o.deadline, o.last_error_kind, o.next_attempt_at,
              o.result IS NOT NULL AS observed
),
abandoned AS ({close_abandoned_attempts("claimed")}),
opened AS (
    INSERT INTO {ATTEMPT}
        (id, operation_id, number, worker_id, fencing_token, ambiguous, due_at, started_at,
         outcome, error_kind, error_message, usage)
    SELECT gen_random_uuid(), c.id, c.attempts, %(owner)s, c.fencing_token,
           c.last_error_kind = ANY(%(ambiguous_kinds)s::text[]) OR c.observed
               OR EXISTS (SELECT 1 FROM {ATTEMPT} a WHERE a.operation_id = c.id AND a.finished_at IS NULL),
           candidates.due_at, statement_timestamp(), '', '', '', '{{}}'::jsonb
    FROM claimed c
    JOIN candidates ON candidates.id = c.id
    RETURNING id, operation_id, ambiguous
)
SELECT c.id AS operation_id, c.key, c.kind, c.payload_hash, c.subject_type, c.subject_id, c.subject_version,
       c.channel, c.arguments, c.attempts AS attempt_number, c.fencing_token, c.deadline, opened.id AS attempt_id,
       opened.ambiguous, (SELECT count(*) FROM candidates) > %(limit)s AS more_due
FROM claimed c
JOIN opened ON opened.operation_id = c.id
ORDER BY c.next_attempt_at, c.id
"""  # noqa: S608 -- this module's constants; every value is a parameter

# How long a drain may sleep: until the next waiting operation is due, a channel's pause ends (its
# waiting operations are due then) or the next lease expires (the database clock, as the claim and the lease
# use: docs/invariants.md#i8).
SECONDS_UNTIL_DUE_SQL = f"""
SELECT extract(epoch FROM LEAST(
    (SELECT min(o.next_attempt_at) FROM {OPERATION} o
     WHERE o.status IN ({WAITING}) AND (%(kinds)s::text[] IS NULL OR o.kind = ANY(%(kinds)s::text[]))
       AND NOT EXISTS (
           SELECT 1 FROM {CHANNEL_GATE} g WHERE g.channel = o.channel AND g.paused_until > statement_timestamp())),
    (SELECT min(g.paused_until) FROM {CHANNEL_GATE} g
     WHERE g.paused_until > statement_timestamp()
       AND EXISTS (
           SELECT 1 FROM {OPERATION} o
           WHERE o.channel = g.channel AND o.status IN ({WAITING})
             AND (%(kinds)s::text[] IS NULL OR o.kind = ANY(%(kinds)s::text[])))),
    (SELECT min(lease_expires_at) FROM {OPERATION}
     WHERE status = {RUNNING} AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[])))
) - statement_timestamp()) AS seconds
"""  # noqa: S608 -- built from the model's table and statuses

# Extend a held lease before a step that could outlive it (fenced: no row when the lease is gone).
RENEW_SQL = f"""
UPDATE {OPERATION}
SET lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s), updated_at = statement_timestamp()
WHERE {FENCE_SQL}
"""  # noqa: S608 -- this module's constants

# What the handler observed (for a publish: the target's receipt), recorded before the finalize and
# committed on its own, fenced (docs/invariants.md#i5): should the finalize wait or this worker stop, the effect
# is on record, and a takeover does not count the lost lease as a failed attempt (CLAIM_SQL). It leaves
# the lease alone: a change of the indexed lease_expires_at makes the update non-HOT, which cost a third
# of the throughput in make bench; complete_operation renews the lease separately when it is half spent.
RECORD_RESULT_SQL = f"""
UPDATE {OPERATION}
SET result = %(result)s::jsonb
WHERE {FENCE_SQL}
"""  # noqa: S608 -- this module's constants

# A success in one statement (docs/invariants.md#i5 and #i8): the fenced update (which locks the operation row,
# last in the finalize's lock order) releasing the lease, this attempt's row only if the fence held,
# and whether dependents wait.
SUCCEED_SQL = f"""
WITH finished AS (
    UPDATE {OPERATION}
    SET status = {sql_literal(S.SUCCEEDED)}, {RELEASE_LEASE_SQL}, result = %(result)s::jsonb,
        finished_at = statement_timestamp(), updated_at = statement_timestamp(),
        last_error_kind = '', last_error_message = '', needs_operator = false
    WHERE {FENCE_SQL}
    RETURNING id
),
closed AS (
    UPDATE {ATTEMPT}
    SET usage = %(usage)s::jsonb, finished_at = statement_timestamp(),
        outcome = {sql_literal(Attempt.Outcome.SUCCEEDED)}, error_kind = '', error_message = '', http_status = NULL,
        duration_ms = %(duration_ms)s
    WHERE id = %(attempt_id)s AND EXISTS (SELECT 1 FROM finished)
)
SELECT EXISTS (SELECT 1 FROM finished) AS succeeded,
       EXISTS (SELECT 1 FROM {DEPENDENCY} d JOIN finished ON d.prerequisite_id = finished.id) AS has_dependents
"""  # noqa: S608 -- this module's constants


# --- channel gates (workers.actions.gates; docs/operations.md#rate-limits-and-pauses) ----------

# A send's reservation on its channel's gate, in one statement on the database clock. The gate row is
# locked only when it limits anything (a rate, or a pause still running): an unlimited channel's sends
# take no lock and write nothing. Paused: wait until the pause ends. The next slot within `bound`
# seconds: take it (move next_send_at on by 1/rate) and sleep until it (`sleep_seconds`). A slot later
# than that: wait, told to come back at next_return_at, which moves on by one slot for each operation
# turned away, so that a backlog returns one operation per slot. No row: no limit, send now.
RESERVE_SEND_SQL = f"""
WITH gate AS (
    SELECT g.channel, g.rate_per_second, g.next_send_at, g.next_return_at, g.paused_until, g.pause_reason,
           statement_timestamp() AS now,
           make_interval(secs => 1.0 / g.rate_per_second) AS slot
    FROM {CHANNEL_GATE} g
    WHERE g.channel = %(channel)s
      AND (g.rate_per_second IS NOT NULL OR g.paused_until > statement_timestamp())
    FOR UPDATE
),
verdict AS (
    SELECT gate.*,
           coalesce(gate.paused_until > gate.now, false) AS paused,
           NOT coalesce(gate.paused_until > gate.now, false)
               AND gate.next_send_at <= gate.now + make_interval(secs => %(bound)s) AS sending,
           greatest(gate.next_return_at, gate.next_send_at) AS return_at
    FROM gate
),
moved AS (
    UPDATE {CHANNEL_GATE} g
    SET next_send_at = CASE WHEN v.sending THEN greatest(v.next_send_at, v.now) + v.slot ELSE g.next_send_at END,
        next_return_at = CASE WHEN v.sending OR v.paused THEN g.next_return_at ELSE v.return_at + v.slot END,
        waits = g.waits + (NOT v.sending)::int,
        updated_at = v.now
    FROM verdict v
    WHERE g.channel = v.channel
)
SELECT paused, pause_reason,
       CASE WHEN sending THEN greatest(next_send_at, now) END AS slot_at,
       CASE WHEN sending THEN extract(epoch FROM greatest(next_send_at, now) - now) END AS sleep_seconds,
       CASE WHEN paused THEN extract(epoch FROM paused_until - now)
            WHEN NOT sending THEN extract(epoch FROM return_at - now) END AS wait_seconds
FROM verdict
"""  # noqa: S608 -- this module's constants; every value is a parameter

_GATE_COLUMNS, _GATE_VALUES = insert_values(
    ChannelGate,
    {
        "channel": "%(channel)s",
        "next_send_at": "statement_timestamp()",
        "next_return_at": "statement_timestamp()",
        "paused_until": "statement_timestamp() + make_interval(secs => %(seconds)s)",
        "pause_reason": "%(reason)s",
        "pauses": "1",
        "updated_at": "statement_timestamp()",
    },
)
# A channel's 429 or 503 with Retry-After pauses it for every worker: never shortened by a shorter
# Retry-After, the reason kept from the answer that set the end. The gate is made if the channel has
# none yet (no rate: a pause alone).
PAUSE_CHANNEL_SQL = f"""
INSERT INTO {CHANNEL_GATE} AS g ({_GATE_COLUMNS})
VALUES ({_GATE_VALUES})
ON CONFLICT (channel) DO UPDATE
SET paused_until = greatest(g.paused_until, EXCLUDED.paused_until),
    pause_reason = CASE WHEN g.paused_until >= EXCLUDED.paused_until THEN g.pause_reason
                        ELSE EXCLUDED.pause_reason END,
    pauses = g.pauses + 1,
    updated_at = EXCLUDED.updated_at
RETURNING paused_until
"""  # noqa: S608 -- this module's constants; every value is a parameter


# --- enqueue (workers.actions.enqueue; docs/invariants.md#i1, #i2, #i5 and #i7) ----------------

_OPERATION_COLUMNS, _OPERATION_VALUES = insert_values(
    Operation,
    {
        "key": "%(key)s",
        "kind": "%(kind)s",
        "payload_hash": "%(payload_hash)s",
        "subject_type": "%(subject_type)s",
        "subject_id": "%(subject_id)s",
        "subject_version": "%(subject_version)s::integer",
        "channel": "%(channel)s",
        "arguments": "%(arguments)s::jsonb",
        "max_attempts": "%(max_attempts)s",
        # A continuation takes its prerequisites' place in the queue (below).
        "next_attempt_at": f"""GREATEST(%(scheduled_for)s::timestamptz, LEAST(statement_timestamp(),
              (SELECT min(p.next_attempt_at) FROM {OPERATION} p WHERE p.id = ANY(%(prerequisites)s::bigint[]))))""",  # noqa: S608 -- this module's constants
        "scheduled_for": "%(scheduled_for)s::timestamptz",
        # A scheduled intent's deadline runs from its time T, not from the approval.
        "deadline": """GREATEST(statement_timestamp(), %(scheduled_for)s::timestamptz)
              + make_interval(secs => %(deadline_seconds)s)""",
        "created_at": "%(now)s",
        "updated_at": "%(now)s",
    },
)
# The intent, its durable prerequisites and the doorbell's ring, in one statement; every other column
# takes the model's default. A continuation takes its prerequisites' place in the queue (the earliest
# time one of them was due; database clock), so that the next steps of jobs under way are claimed
# before a backlog of newer first steps: a verification never waits behind every publish approved
# after its own. A key already recorded inserts nothing (ON CONFLICT): the caller reads it instead.
ENQUEUE_SQL = f"""
WITH inserted AS (
    INSERT INTO {OPERATION} ({_OPERATION_COLUMNS})
    VALUES ({_OPERATION_VALUES})
    ON CONFLICT (key) DO NOTHING
    RETURNING id, next_attempt_at, deadline
),
edges AS (
    INSERT INTO {DEPENDENCY} (operation_id, prerequisite_id, requires)
    SELECT inserted.id, edge.prerequisite_id, edge.requires
    FROM inserted, unnest(%(prerequisites)s::bigint[], %(requires)s::text[]) AS edge(prerequisite_id, requires)
)
SELECT id, next_attempt_at, deadline, {NOTIFY_SQL} AS rang FROM inserted
"""  # noqa: S608 -- this module's constants; every value is a parameter

# A durable happens-before edge (docs/invariants.md#i7); idempotent.
ADD_DEPENDENCY_SQL = f"""
INSERT INTO {DEPENDENCY} (operation_id, prerequisite_id, requires)
VALUES (%(operation_id)s, %(prerequisite_id)s, %(requires)s)
ON CONFLICT (operation_id, prerequisite_id) DO NOTHING
"""  # noqa: S608 -- this module's constants


# --- housekeeping (workers.actions.housekeeping; docs/invariants.md#i11 and #i12) -------------

# What operator_needed is told of an operation that became a dead letter here (registry.OperatorNeeded).
_NEEDED_COLUMNS = (
    "o.id, o.kind, o.subject_type, o.subject_id, o.subject_version, o.arguments, o.status, o.last_error_message"
)

# The reconciler (docs/invariants.md#i12): every operation whose lease expired becomes claimable again with a new
# fencing token, its lease released and its dead worker's attempt closed; one out of attempts or past
# its deadline becomes a dead letter for an operator instead. A lease that ran out after its attempt
# recorded what it observed (`result`) counts as a wait, as in CLAIM_SQL.
RECONCILE_EXPIRED_SQL = f"""
WITH expired AS (
    SELECT id,
           (result IS NULL AND attempts - waits >= max_attempts
            OR deadline <= statement_timestamp()) AS spent,
           (result IS NOT NULL)::int AS observed
    FROM {OPERATION}
    WHERE status = {RUNNING} AND lease_expires_at < statement_timestamp()
    FOR UPDATE SKIP LOCKED
),
abandoned AS ({close_abandoned_attempts("expired")})
UPDATE {OPERATION} o
SET status = CASE WHEN expired.spent THEN {sql_literal(S.DEAD)} ELSE {sql_literal(S.RETRY_WAIT)} END,
    finished_at = CASE WHEN expired.spent THEN statement_timestamp() END,
    needs_operator = expired.spent,
    waits = o.waits + expired.observed,
    last_error_kind = {sql_literal(LEASE_EXPIRED)},
    last_error_message = 'lease of ' || o.lease_owner || ' expired before an outcome',
    {RELEASE_LEASE_SQL},
    fencing_token = o.fencing_token + 1,
    next_attempt_at = statement_timestamp(),
    updated_at = statement_timestamp()
FROM expired
WHERE o.id = expired.id
RETURNING {_NEEDED_COLUMNS}, o.needs_operator
"""  # noqa: S608 -- this module's constants

# Waiting operations out of attempts or past their deadline: dead letters for an operator (docs/invariants.md#i12).
EXHAUSTED_SQL = f"""
UPDATE {OPERATION} o
SET status = {sql_literal(S.DEAD)},
    finished_at = statement_timestamp(),
    updated_at = statement_timestamp(),
    needs_operator = true,
    last_error_message = CASE
        WHEN attempts - waits >= max_attempts
        THEN 'attempts exhausted (' || attempts - waits || ' of ' || max_attempts || '); last: '
             || last_error_message
        ELSE 'deadline passed; last: ' || last_error_message END
WHERE status IN ({WAITING})
  AND (attempts - waits >= max_attempts OR deadline <= statement_timestamp())
RETURNING {_NEEDED_COLUMNS}
"""  # noqa: S608 -- this module's constants

# The retention purge (docs/invariants.md#i11): finished operations older than the period, with their attempts and
# dependency edges; never one an unfinished operation depends on, nor one with a conflict (the operators'
# record). One batch: at most %(batch)s operations with ids above %(after)s, in id order along the primary key,
# so that batch after batch reads on from where the last one stopped (one pass over the table in all);
# returns how many went and the last id purged (NULL when none).
PURGE_SQL = f"""
WITH purged AS (
    SELECT o.id
    FROM {OPERATION} o
    WHERE o.id > %(after)s
      AND o.status IN ({FINISHED})
      AND o.finished_at < statement_timestamp() - make_interval(days => %(days)s::integer)
      AND NOT EXISTS (SELECT 1 FROM {CONFLICT} c WHERE c.operation_id = o.id)
      AND NOT EXISTS (
          SELECT 1 FROM {DEPENDENCY} d JOIN {OPERATION} u ON u.id = d.operation_id
          WHERE d.prerequisite_id = o.id AND u.status IN ({UNFINISHED}))
    ORDER BY o.id
    LIMIT %(batch)s
    FOR UPDATE OF o SKIP LOCKED
),
attempts AS (DELETE FROM {ATTEMPT} a USING purged WHERE a.operation_id = purged.id),
edges_out AS (DELETE FROM {DEPENDENCY} d USING purged WHERE d.operation_id = purged.id),
-- Apart from edges_out, so that each reads its own index (an OR would read every edge, batch after batch);
-- an edge between two purged operations is deleted once, the second DELETE skips it.
edges_in AS (DELETE FROM {DEPENDENCY} d USING purged WHERE d.prerequisite_id = purged.id),
deleted AS (DELETE FROM {OPERATION} o USING purged WHERE o.id = purged.id RETURNING o.id)
SELECT count(*) AS purged, max(id) AS last_id FROM deleted
"""  # noqa: S608 -- this module's constants


# --- the audit log (workers.audit; docs/invariants.md#i13) -----------------------------------

_AUDIT_COLUMNS, _AUDIT_VALUES = insert_values(
    AuditEvent,
    {
        "actor_id": "%(actor_id)s",
        "event_type": "%(event_type)s",
        "subject_type": "%(subject_type)s",
        "subject_id": "%(subject_id)s",
        "old_state": "%(old_state)s::jsonb",
        "new_state": "%(new_state)s::jsonb",
        "created_at": "%(created_at)s",
    },
)
# One audit record, appended in the caller's transaction: every state change writes one, workers'
# finalizes included.
RECORD_AUDIT_EVENT_SQL = f"""
INSERT INTO {AUDIT_EVENT} ({_AUDIT_COLUMNS})
VALUES ({_AUDIT_VALUES})
RETURNING id
"""  # noqa: S608 -- this module's constants; every value is a parameter


# --- the sweep (workers.tasks) ---------------------------------------------------------------

# pg_try_advisory_lock key: one sweeper at a time across the cluster ("GALLEY" in ASCII).
SWEEP_LOCK_KEY = 0x47414C4C4559
# Overlapping sweeps (several clusters, a slow minute) do not double up: the lock is the session's,
# so a sweep whose connection is lost leaves it to the next.
TRY_SWEEP_LOCK_SQL = f"SELECT pg_try_advisory_lock({SWEEP_LOCK_KEY}) AS locked"
SWEEP_UNLOCK_SQL = f"SELECT pg_advisory_unlock({SWEEP_LOCK_KEY})"


# --- the queue's health (workers.selectors.get_queue_health; docs/operations.md#queue-health) ------

# The oldest open transaction of this database's client backends (this one left out: a scrape is never
# the culprit), timed on the statement's clock (a request's transaction may have begun before the one
# it finds), and the operation table's dead and live tuples as the statistics last counted them. A
# transaction left open keeps every row version since its start alive, the claim's index entries
# included (docs/operations.md#queue-health). Autovacuum workers are left out: a vacuum holds back no one.
QUEUE_HEALTH_SQL = f"""
SELECT
    COALESCE((
        SELECT extract(epoch FROM max(statement_timestamp() - a.xact_start))
        FROM pg_stat_activity a
        WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
          AND a.xact_start IS NOT NULL
    ), 0)::float8 AS oldest_transaction_seconds,
    s.n_dead_tup AS dead_tuples,
    s.n_live_tup AS live_tuples
FROM pg_stat_user_tables s
WHERE s.relid = {sql_literal(OPERATION)}::regclass
"""  # noqa: S608 -- this module's constants
