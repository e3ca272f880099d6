"""``python -m tests.acceptance.failover_desk write N`` / ``approve BRIEF...``: a desk's load for the failover
test (tests/acceptance/test_failover.py), through the real actions, on the database DATABASE_URL names.

`write N` creates N briefs with one revision each (by the simulation's editor) and prints their ids, one JSON
line. `approve` approves revision 1 of each brief named, one transaction each, printing `approved <id>` once
it committed; like the workers it rides through a failover: a lost connection is closed and the approval
tried again (an approval already there is returned, not made twice: approvals.actions.check_decide_revision).
"""

from __future__ import annotations

import json
import sys
import time

RIDE_THROUGH_SECONDS = 120


def _write(count: int) -> None:
    from django.db import transaction

    from publishing.actions.briefs import check_create_brief
    from publishing.actions.revisions import check_create_revision
    from publishing.demo.simulation import DEFAULT_APPROVER, DEFAULT_EDITOR, ensure_simulation_user
    from publishing.roles import Role

    editor = ensure_simulation_user(DEFAULT_EDITOR, Role.EDITOR)
    ensure_simulation_user(DEFAULT_APPROVER, Role.APPROVER)
    ids = []
    for index in range(1, count + 1):
        with transaction.atomic(durable=True):
            brief = check_create_brief(title=f"Failover {index}", source_material="", acting_user=editor)
            check_create_revision(
                brief.public_id,
                base_number=0,
                title=f"Failover article {index}",
                body=f"Story {index} of the failover desk.",
                acting_user=editor,
            )
        ids.append(brief.public_id)
    print(json.dumps(ids), flush=True)


def _approve(public_ids: list[str]) -> None:
    from django.contrib.auth import get_user_model
    from django.db import DatabaseError, connection, transaction

    from approvals.actions import check_decide_revision
    from approvals.models import Approval
    from publishing.demo.simulation import DEFAULT_APPROVER
    from publishing.models import Revision

    def approve(public_id: str) -> None:
        approver = get_user_model().objects.get(username=DEFAULT_APPROVER)
        revision = Revision.objects.get(brief__public_id=public_id, number=1)
        with transaction.atomic(durable=True):
            check_decide_revision(
                public_id,
                revision_number=1,
                payload_hash=revision.payload_hash,
                decision=Approval.Decision.APPROVED,
                acting_user=approver,
            )

    for public_id in public_ids:
        deadline = time.monotonic() + RIDE_THROUGH_SECONDS
        while True:
            try:
                approve(public_id)
                break
            except DatabaseError as exc:
                if time.monotonic() > deadline:
                    raise
                print(f"database unavailable ({type(exc).__name__}); trying {public_id} again", flush=True)
                connection.close()
                time.sleep(0.2)
        print(f"approved {public_id}", flush=True)


def main(command: str, *args: str) -> None:
    import django

    django.setup()
    if command == "write":
        _write(int(args[0]))
    elif command == "approve":
        _approve(list(args))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
