"""``python -m tests.approvals.dst_desk seed|approve|report ...``: the Django side of
tests/approvals/test_schedule_dst_clock.py, run in a child process on the database DATABASE_URL names (a
throwaway PostgreSQL whose clock libfaketime sets), never the test process's own test database. Each command
prints one JSON line.

- ``seed PARTNER_URL``: the role groups, an editor and an approver, the channel partner-feed (a reference target
  at PARTNER_URL; `web` is the primary from the GALLEY_TARGET_* settings), a brief to both and its revision 1.
- ``approve PUBLIC_ID PUBLISH_AT ZONE``: the approver approves revision 1 at that time, through
  check_decide_revision as the approval view calls it (one durable transaction); prints each publish's
  scheduled_for and the database clock when the approval committed.
- ``report PUBLIC_ID``: each publish's channel, status, attempts, scheduled_for and its attempts' started_at.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from typing import Any

BODY = "Dockers walked out at dawn."
TOKEN = "delivery-test-token"


def seed(partner_url: str) -> dict[str, Any]:
    from django.contrib.auth.models import Group, User
    from django.db import transaction

    from publishing.actions.briefs import check_create_brief
    from publishing.actions.revisions import check_create_revision
    from publishing.credentials import seal
    from publishing.models import Channel
    from publishing.roles import Role, ensure_role_groups

    ensure_role_groups()
    editor = User.objects.create_user(username="eddie", password="correct-horse-battery")
    editor.groups.add(Group.objects.get(name=Role.EDITOR.value))
    approver = User.objects.create_user(username="ava", password="correct-horse-battery")
    approver.groups.add(Group.objects.get(name=Role.APPROVER.value))
    Channel.objects.create(
        slug="partner-feed", name="Partner Feed", base_url=partner_url, secret_sealed=seal(TOKEN), is_default=True
    )
    brief = check_create_brief(title="Harbour strike", source_material=BODY, acting_user=editor)
    with transaction.atomic():
        check_create_revision(brief.public_id, base_number=0, title="Harbour strike", body=BODY, acting_user=editor)
    return {"public_id": brief.public_id}


def approve(public_id: str, publish_at: str, zone: str) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import transaction

    from approvals.actions import check_decide_revision
    from approvals.models import Approval
    from approvals.schedules import database_now
    from publishing.models import Revision

    revision = Revision.objects.get(brief__public_id=public_id, number=1)
    with transaction.atomic(durable=True):
        check_decide_revision(
            public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            publish_at=publish_at,
            zone=zone,
            acting_user=User.objects.get(username="ava"),
        )
    return {
        "scheduled_for": [op["scheduled_for"] for op in report(public_id)["publishes"]],
        "committed_by": now(database_now()),
    }


def report(public_id: str) -> dict[str, Any]:
    from publishing.identities import PUBLISH
    from workers.models import Operation

    publishes = Operation.objects.filter(kind=PUBLISH, subject_id=public_id, subject_version=1).order_by("channel")
    return {
        "publishes": [
            {
                "channel": op.channel,
                "status": op.status,
                "attempts": op.attempts,
                "scheduled_for": now(op.scheduled_for),
                "started_at": [now(attempt.started_at) for attempt in op.attempt_set.order_by("number")],
            }
            for op in publishes
        ]
    }


def now(moment: datetime.datetime | None) -> str | None:
    """An instant as ISO 8601 in UTC, as the test compares them."""
    return None if moment is None else moment.astimezone(datetime.UTC).isoformat()


def main(command: str, *args: str) -> None:
    import django

    django.setup()
    commands: dict[str, Callable[..., dict[str, Any]]] = {"seed": seed, "approve": approve, "report": report}
    print(json.dumps(commands[command](*args)))


if __name__ == "__main__":
    main(*sys.argv[1:])
