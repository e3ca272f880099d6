"""Peer (b), the ceiling: claim + fenced complete with plain psycopg, autocommit, one statement each.

``python -m tests.benchmarks.ceiling_worker DATABASE_URL WORKER_ID [DUE_AT]`` claims pending operations from
Galley's own workers_operation table (its constraints, indexes and status-transition trigger) one at a
time, marks each succeeded fenced by owner and token, until none is left; then prints one JSON line:
{"jobs": n, "first": time of the first claim, "last": time of the last completion} (time.time()).
With DUE_AT (a time.time() moment: the spike's jobs are due then, spike.py) it polls every POLL_SECONDS
until its first claim, up to DUE_WINDOW_SECONDS past DUE_AT, before it takes an empty claim for the end,
and its JSON line also holds "claimed" and "completed": each job's claim and completion (the database's
statement time, as epochs) minus DUE_AT.
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
RETURNING o.id, o.fencing_token, extract(epoch FROM statement_timestamp())::float
"""
COMPLETE = """
UPDATE workers_operation
SET status = 'succeeded', lease_owner = '', lease_expires_at = NULL, finished_at = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE id = %(id)s AND lease_owner = %(owner)s AND fencing_token = %(token)s AND status = 'running'
RETURNING extract(epoch FROM finished_at)::float
"""


POLL_SECONDS = 0.005
DUE_WINDOW_SECONDS = 10.0


def main(url: str, owner: str, due_at: float | None = None) -> None:
    jobs, first, last = 0, None, None
    claimed_late: list[float] = []
    completed_late: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        print("ready", flush=True)
        while True:
            claimed = conn.execute(CLAIM, {"owner": owner}).fetchone()
            if claimed is None:
                if due_at is not None and first is None and time.time() < due_at + DUE_WINDOW_SECONDS:
                    time.sleep(POLL_SECONDS)
                    continue
                break
            operation_id, token, claimed_at = claimed
            first = first or time.time()
            done = conn.execute(COMPLETE, {"id": operation_id, "owner": owner, "token": token}).fetchone()
            if done is None:
                raise SystemExit(f"lost the lease of operation {operation_id}")
            jobs += 1
            last = time.time()
            if due_at is not None:
                claimed_late.append(claimed_at - due_at)
                completed_late.append(done[0] - due_at)
    report: dict[str, object] = {"jobs": jobs, "first": first, "last": last}
    if due_at is not None:
        report.update(claimed=claimed_late, completed=completed_late)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else None)
