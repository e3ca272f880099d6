"""Peer (b), the ceiling: claim + fenced complete with plain psycopg, autocommit, one statement each.

``python -m tests.benchmarks.ceiling_worker DATABASE_URL WORKER_ID`` claims pending operations from
Galley's own workers_operation table (its constraints, indexes and status-transition trigger) one at a
time, marks each succeeded fenced by owner and token, until none is left; then prints one JSON line:
{"jobs": n, "first": time of the first claim, "last": time of the last completion} (time.time()).
"""

from __future__ import annotations

import json
import sys
import time

import psycopg

CLAIM = """
UPDATE workers_operation o
SET status = 'running', lease_owner = %(owner)s, lease_expires_at = statement_timestamp() + interval '60 seconds',
    fencing_token = o.fencing_token + 1, attempts = o.attempts + 1, updated_at = statement_timestamp()
WHERE o.id = (
    SELECT id FROM workers_operation
    WHERE status = 'pending' AND next_attempt_at <= statement_timestamp()
    ORDER BY next_attempt_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING o.id, o.fencing_token
"""
COMPLETE = """
UPDATE workers_operation
SET status = 'succeeded', lease_owner = '', lease_expires_at = NULL, finished_at = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE id = %(id)s AND lease_owner = %(owner)s AND fencing_token = %(token)s AND status = 'running'
"""


def main(url: str, owner: str) -> None:
    jobs, first, last = 0, None, None
    with psycopg.connect(url, autocommit=True) as conn:
        print("ready", flush=True)
        while True:
            claimed = conn.execute(CLAIM, {"owner": owner}).fetchone()
            if claimed is None:
                break
            operation_id, token = claimed
            first = first or time.time()
            done = conn.execute(COMPLETE, {"id": operation_id, "owner": owner, "token": token})
            if done.rowcount != 1:
                raise SystemExit(f"lost the lease of operation {operation_id}")
            jobs += 1
            last = time.time()
    print(json.dumps({"jobs": jobs, "first": first, "last": last}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
