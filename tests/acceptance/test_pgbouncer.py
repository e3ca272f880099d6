"""Galley through PgBouncer (issue 24, docs/operations.md#pgbouncer): Debian's PgBouncer 1.18 (tests/pgbouncer.py)
in front of the test database, real `run_worker` processes and a real web server behind it, the reference
target served from a thread (tests/reference_target.py).

Measured before these settings existed: through transaction pooling `run_worker` exited at once with
`prepared statement "_pg3_0" already exists` and published nothing (two clients' first prepared statement
met on one server connection), and its LISTEN would have been deaf without a word.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from django.db import transaction
from django.test import Client

from galley.reference_target import ReferenceTarget
from galley.testing.pgbouncer import PgBouncer
from publishing.actions.api_tokens import do_create_api_token
from publishing.identities import publish_key
from publishing.models import Brief, Revision
from tests import pgbouncer
from tests.acceptance import test_worker_partition as partition
from tests.acceptance.test_crash_points import approve, worker_env, write_revision
from tests.galley.test_multi_host import approve_through_the_web, start_web
from tests.processes import Child, stop, wait_until
from tests.reference_target import TOKEN

# Fixtures: PgBouncer, and the keeper of the web server's process.
start_pgbouncer = pgbouncer.start_pgbouncer
processes = partition.processes

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DEAF = "the doorbell is not heard"
HEARD = "the doorbell is heard"
POLLING = "no doorbell (GALLEY_WAKEUP=poll)"
# Generous bounds on a loaded machine; a worker that polls publishes within about a second of an approval.
PUBLISHED_TIMEOUT_SECONDS = 45
# Longer than PUBLISHED_TIMEOUT_SECONDS: a worker that waits out its whole idle wait publishes too late,
# so only the doorbell, or the short poll of a worker that knows it is not heard, publishes in time.
IDLE_POLL_SECONDS = "120"


def galley_env(bouncer: PgBouncer, target: ReferenceTarget, **settings: str) -> dict[str, str]:
    """A child's environment, as the crash-point tests give it, with the test database through `bouncer`."""
    env = worker_env(target, **settings)
    env.update(
        DATABASE_URL=pgbouncer.database_url(bouncer), GALLEY_TARGET_TOKEN=TOKEN
    )  # the target of this test process
    return env


def start_worker(spawn: Callable[..., Child], name: str, *, env: dict[str, str]) -> Child:
    worker = spawn(name, "run_worker", "--worker-id", name, "--poll", IDLE_POLL_SECONDS, env=env)
    worker.wait_for_output(f"worker {name} started")
    return worker


def wait_published(revisions: list[Revision], target: ReferenceTarget, worker: Child) -> None:
    """Every one of `revisions` published and verified, and applied at the target once."""
    briefs = Brief.objects.filter(id__in=[revision.brief_id for revision in revisions])

    def published() -> bool:
        assert worker.process.poll() is None, f"the worker exited ({worker.process.returncode})\n{worker.output()}"
        return briefs.filter(published_revision_number=1).count() == len(revisions)

    wait_until(published, timeout=PUBLISHED_TIMEOUT_SECONDS, what=f"published\n{worker.output()[-4000:]}")
    keys = [publish_key(revision.brief.public_id, 1) for revision in revisions]
    applied = [row["operation_key"] for row in target.ledger()]
    assert sorted(key for key in applied if key in keys) == sorted(keys)


def assert_said_once(worker: Child, text: str) -> None:
    lines = [line for line in worker.output().splitlines() if text in line]
    assert len(lines) == 1, worker.output()


def test_pgbouncer__transaction_pooling_prepared_statements_off__worker_publishes_and_keeps_running(
    spawn, start_pgbouncer, target, editor, approver
):
    bouncer = start_pgbouncer("transaction")
    env = galley_env(bouncer, target, GALLEY_PREPARED_STATEMENTS="off", GALLEY_WAKEUP="poll")
    worker = start_worker(spawn, "pooled", env=env)

    revisions = [write_revision(editor, title=f"Harbour strike, day {day}") for day in range(1, 4)]
    for revision in revisions:
        approve(revision, approver)
    wait_published(revisions, target, worker)

    assert_said_once(worker, POLLING)
    assert "already exists" not in worker.output()
    assert stop(worker.process) == 0, worker.output()
    assert "worker pooled stopped" in worker.output()


def test_pgbouncer__transaction_pooling_notify__worker_says_once_it_is_not_heard_and_polls(
    spawn, start_pgbouncer, target, editor, approver
):
    bouncer = start_pgbouncer("transaction")
    env = galley_env(bouncer, target, GALLEY_PREPARED_STATEMENTS="off", GALLEY_WAKEUP="notify")
    worker = start_worker(spawn, "mispointed", env=env)

    # Approved while the worker's probe is still out: it polls until a ring is heard.
    first = write_revision(editor, title="Harbour strike, day 1")
    approve(first, approver)
    wait_published([first], target, worker)
    worker.wait_for_output(DEAF)
    # Made due after it gave up on the doorbell: its short poll finds it, not its idle wait.
    second = write_revision(editor, title="Harbour strike, day 2")
    approve(second, approver)
    wait_published([first, second], target, worker)

    assert_said_once(worker, DEAF)
    assert "GALLEY_WAKEUP=poll" in worker.output()
    assert HEARD not in worker.output()
    assert stop(worker.process) == 0, worker.output()


def test_pgbouncer__session_pooling_notify__worker_hears_the_doorbell(spawn, start_pgbouncer, target, editor, approver):
    bouncer = start_pgbouncer("session")
    worker = start_worker(spawn, "session", env=galley_env(bouncer, target, GALLEY_WAKEUP="notify"))
    worker.wait_for_output(HEARD)

    revision = write_revision(editor)
    approve(revision, approver)
    # The idle wait is longer than this bound: the ring woke it.
    wait_published([revision], target, worker)

    assert_said_once(worker, HEARD)
    assert DEAF not in worker.output()
    assert stop(worker.process) == 0, worker.output()


def test_pgbouncer__web_through_transaction_pooling__form_and_api_approvals_published_by_a_session_pooled_worker(
    spawn, processes, start_pgbouncer, target, editor, approver
):
    web_pool, worker_pool = start_pgbouncer("transaction"), start_pgbouncer("session")
    web = start_web(
        processes,
        env=galley_env(web_pool, target, GALLEY_PREPARED_STATEMENTS="off", SECURE_COOKIES="false"),
    )
    worker = start_worker(spawn, "worker", env=galley_env(worker_pool, target))
    worker.wait_for_output(HEARD)

    by_form, by_api = (write_revision(editor, title=f"Harbour strike, day {day}") for day in range(1, 3))
    approver_session = Client()
    approver_session.force_login(approver)
    approve_through_the_web(web, approver_session.cookies["sessionid"].value, by_form)
    # The JSON API's decision: its Idempotency-Key record and transaction-level advisory lock go through too.
    with transaction.atomic(durable=True):
        _token, secret = do_create_api_token(approver, name="pgbouncer", acting_user=approver)
    answer = httpx.post(
        f"{web}/api/v1/briefs/{by_api.brief.public_id}/revisions/1/decisions",
        json={"decision": "approved", "payload_hash": by_api.payload_hash},
        headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "pgbouncer-approval"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    wait_published([by_form, by_api], target, worker)

    assert stop(worker.process) == 0, worker.output()
