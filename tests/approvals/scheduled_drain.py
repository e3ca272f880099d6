"""``faketime -f +10m python -m tests.approvals.scheduled_drain WORKER_ID [IDLE_WAIT]``: one production drain
of publishing's operations (workers.drain.drain, the real handlers and channels) by a worker process whose clock is
whatever it was started with, on the database DATABASE_URL names. With IDLE_WAIT (seconds, 1 by default) it keeps
waiting for work due within that long, as a worker running across T does. Prints one JSON line: the drain's
outcomes, and what this process's clock and the database's said when it ended."""

from __future__ import annotations

import json
import sys
import time


def main(worker_id: str, idle_wait: str = "1.0") -> None:
    import django

    django.setup()
    from django.db import connection

    from publishing.identities import PUBLISH, VERIFY
    from workers.drain import drain, shutdown_pool

    outcomes = drain(worker_id=worker_id, kinds=[PUBLISH, VERIFY], time_budget=60, idle_wait=float(idle_wait))
    shutdown_pool()
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXTRACT(EPOCH FROM statement_timestamp())")
        (database_clock,) = cursor.fetchone()
    print(json.dumps({"outcomes": dict(outcomes), "worker_time": time.time(), "database_clock": float(database_clock)}))


if __name__ == "__main__":
    main(*sys.argv[1:])
