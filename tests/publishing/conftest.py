"""Fixtures for publishing's tests: a real WordPress with Galley's plugin, started once per session when a test asks;
the admin signed in as a staff operator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import transaction
from django.test import Client

from tests.wordpress import WordPress, running_wordpress


@pytest.fixture(scope="session")
def wordpress() -> Iterator[WordPress]:
    """Debian's WordPress on PHP's built-in server and a private MariaDB (tests/wordpress.py), stopped at exit."""
    with running_wordpress(test_faults=True) as wp:
        yield wp


@pytest.fixture
def operator_client(operator) -> Client:
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def published_brief(target, brief, revise, approver):
    """`brief` with revision 1 approved, published on the settings' target and verified by a drain (the
    test needs django_db(transaction=True): the drain runs on the worker pool's own connections)."""
    from approvals.actions import check_decide_revision
    from approvals.models import Approval
    from publishing.identities import PUBLISH, VERIFY
    from workers.drain import drain

    revision = revise(brief, "Dockers walked out at dawn.")
    with transaction.atomic(durable=True):
        check_decide_revision(
            brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=approver,
        )
    drain(worker_id="w-test", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5)
    return brief
