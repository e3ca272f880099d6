"""``python -m tests.benchmarks.claim_probe N``: N claims through workers.actions.claims.claim_operations
(the production claim: one statement, batch of one here), each completed (fenced) before the next, on the
database DATABASE_URL names. Prints one JSON line: the claim latencies in milliseconds."""

from __future__ import annotations

import json
import sys
import time


def main(count: int) -> None:
    import django

    django.setup()
    from django.db import connection

    from workers.actions.claims import claim_operations, complete_operation
    from workers.registry import Success

    connection.ensure_connection()  # connecting is not part of a claim
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        claimed = claim_operations(worker_id="bench-claim-probe", limit=1)
        latencies.append(1000 * (time.perf_counter() - started))
        if not claimed:
            raise SystemExit("nothing left to claim")
        complete_operation(claimed[0], Success(), started=time.monotonic())
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
