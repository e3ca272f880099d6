"""``faketime -f -30m python -m tests.workers.skewed_claim KIND``: one claim of an operation of KIND through
the production claim (workers.actions.claims.claim_operations), by a worker process whose clock is whatever
it was started with, on the database DATABASE_URL names. Prints one JSON line: what this process's clocks
said, what the database's said, and how long the lease has left by the database's clock, measured by the
statement right after the claim (no renewal between)."""

from __future__ import annotations

import json
import sys
import time


def main(kind: str) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from workers.actions.claims import claim_operations

    connection.ensure_connection()  # connecting is not part of the claim
    (claimed,) = claim_operations(worker_id="skewed-worker", limit=1, kinds=[kind])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXTRACT(EPOCH FROM lease_expires_at - statement_timestamp()),"
            " EXTRACT(EPOCH FROM statement_timestamp())"
            " FROM workers_operation WHERE id = %s",
            [claimed.operation_id],
        )
        remaining, database_clock = cursor.fetchone()
    measured = {
        "lease_seconds": settings.GALLEY_LEASE_SECONDS,
        "lease_remaining": float(remaining),
        "database_clock": float(database_clock),
        "worker_time": time.time(),
        "worker_django_now": timezone.now().timestamp(),
    }
    print(json.dumps(measured), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
