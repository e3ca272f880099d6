"""Scheduled publishes for the tests of what reads them (the overdue rule, /ops, receipts, the dashboard,
/metrics): `schedule(revision, ago=s)` approves the revision through the real action, then gives its publish
a time T `ago` seconds before now on the database clock (negative: still ahead), as an approval for a time
T writes it. Fixtures for every app's tests (imported by tests/conftest.py)."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.identities import publish_key
from publishing.models import Revision
from workers.models import Operation


def database_now() -> datetime.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


@pytest.fixture
def schedule(approver) -> Callable[..., Operation]:
    def approve_for(revision: Revision, *, ago: float) -> Operation:
        with transaction.atomic(durable=True):
            check_decide_revision(
                revision.brief.public_id,
                revision_number=revision.number,
                payload_hash=revision.payload_hash,
                decision=Approval.Decision.APPROVED,
                acting_user=approver,
            )
        key = publish_key(revision.brief.public_id, revision.number)
        due = database_now() - datetime.timedelta(seconds=ago)
        Operation.objects.filter(key=key).update(scheduled_for=due, next_attempt_at=max(due, database_now()))
        return Operation.objects.get(key=key)

    return approve_for
