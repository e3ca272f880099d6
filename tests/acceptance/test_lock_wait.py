"""A brief's row lock held by another session while a real worker publishes (docs/invariants.md#i8, #i9, #i13).

The deterministic reproduction of a published revision turned dead letter: a second PostgreSQL session
(as a `psql` would: no bound of Galley's on it) holds the brief's row lock for several leases while one
worker process publishes. The target applies the revision; the worker's finalize then waits for the
brief. Without a bound it waited for ever, its lease ran out, every takeover counted as a failed attempt,
and the operation went dead although the target held it, with no Publication and no audit record; the
editors' saves on that brief waited as long.

With the bound (GALLEY_LOCK_TIMEOUT_SECONDS, shrunk here with the lease so that the test takes seconds):
the finalize waits again and again holding its lease (a wait, not a failure), the editor's save answers
at once "this brief is busy, try again" with the text kept, and when the lock is free the publication
is recorded, audited and verified, with no dead letter and no attempt counted against the budget.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.db.models.functions import Now
from django.urls import reverse

from publishing.identities import publish_key, revision_subject_id
from publishing.models import Publication
from tests.acceptance import test_crash_points as recovery
from tests.acceptance.test_crash_points import approve, assert_published_exactly_once, worker_env, write_revision
from tests.concurrency import brief_locked
from tests.processes import run_worker, wait_until
from workers.models import Attempt, AuditEvent, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

start_target = recovery.start_target

LEASE_SECONDS = 6
TIMEOUT_SECONDS = 2
LOCK_TIMEOUT_SECONDS = 1
# Several leases: before the bound, each of them was a takeover counted as a failed attempt.
HOLD_SECONDS = 4 * LEASE_SECONDS


def test_finalize__brief_lock_held__waits_not_failure_and_editor_save_answers_busy(
    start_target, spawn, editor, approver, client, settings
):
    # A small budget (the operation takes it when the approval enqueues it): before the bound, the
    # takeovers behind the lock spent it within the hold.
    settings.GALLEY_MAX_ATTEMPTS = 3
    target = start_target()
    revision = write_revision(editor)
    brief = revision.brief
    key = publish_key(brief.public_id, revision.number)
    # Approved first (the approval locks the brief too); no worker runs until the lock is held.
    approve(revision, approver)
    with brief_locked(brief, at_most=HOLD_SECONDS) as released:
        env = worker_env(
            target, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS, GALLEY_LOCK_TIMEOUT_SECONDS=str(LOCK_TIMEOUT_SECONDS)
        )
        worker = run_worker(spawn, "worker", env=env)
        wait_until(
            lambda: [row["operation_key"] for row in target.applications()] == [key],
            timeout=60,
            what="the target's application",
        )
        assert not released.is_set(), "the lock was released before the target applied the revision"

        # The editor saves the next revision while the brief is held: a clear answer within the lock
        # bound (this process's own, the default), never a wait for the holder; the text is kept.
        client.force_login(editor)
        typed = "Dockers walked out at dawn.\n\nTalks resume on Monday, the union says."
        started = time.monotonic()
        response = client.post(
            reverse("publishing:revision_edit", args=[brief.public_id]),
            {"action": "submit", "base_number": revision.number, "title": "Harbour strike", "body": typed},
        )
        answered_in = time.monotonic() - started
        assert not released.is_set(), "the save waited for the holder"
        assert response.status_code == 503, response.content[:2000]
        assert response["Retry-After"]
        page = response.content.decode()
        assert "This brief is busy" in page and "try again" in page
        assert "Talks resume on Monday, the union says." in page
        assert answered_in < HOLD_SECONDS
        assert brief.revisions.count() == 1

        # The worker waits as long as the lock is held, then finishes.
        released.wait()
    assert worker.wait(timeout=120) == 0, worker.output()

    # The worker waited for the lock holding its lease, and published once, recorded and verified.
    assert "waiting again" in worker.output()
    assert_published_exactly_once(revision, target)
    publication = Publication.objects.get(operation_key=key)
    assert publication.external_id == target.held(key)["id"]
    subject = revision_subject_id(brief.public_id, revision.number)
    assert AuditEvent.objects.filter(event_type="publication.recorded", subject_id=subject).count() == 1
    assert AuditEvent.objects.filter(event_type="publication.verified", subject_id=brief.public_id).exists()

    # No dead letter, and no attempt counted against the budget but the one that succeeded.
    assert not Operation.objects.filter(status__in=["dead", "conflict"]).exists()
    publish = Operation.objects.get(key=key)
    assert publish.attempts - publish.waits == 1
    assert not publish.needs_operator
    assert not Attempt.objects.filter(operation=publish, outcome__in=["dead", "retry"]).exists()

    # Once the brief is free, the same save goes through.
    response = client.post(
        reverse("publishing:revision_edit", args=[brief.public_id]),
        {"action": "submit", "base_number": revision.number, "title": "Harbour strike", "body": typed},
    )
    assert response.status_code == 302
    assert brief.revisions.count() == 2


def test_finalize__worker_frozen_holding_brief_lock__takeover_not_counted_and_publication_recorded(
    start_target, spawn, editor, approver, settings
):
    """The SIGSTOP variant, deterministic: worker A stops itself (SIGSTOP) inside its publish finalize,
    the brief locked, on the last attempt the budget allows. PostgreSQL ends A's idle transaction (the
    brief is free again); A's lease runs out; worker B takes over (not counted: A had recorded the
    target's receipt), adopts what the target applied and finalizes it while A is still frozen."""
    settings.GALLEY_MAX_ATTEMPTS = 1  # taken by the operation when the approval enqueues it
    target = start_target()
    revision = write_revision(editor)
    approve(revision, approver)
    key = publish_key(revision.brief.public_id, revision.number)
    bounds = {
        "GALLEY_LOCK_TIMEOUT_SECONDS": str(LOCK_TIMEOUT_SECONDS),
        "GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "2",
    }
    env_a = worker_env(
        target, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS, GALLEY_FREEZE_POINT="in_finalize:publish", **bounds
    )
    worker_a = run_worker(spawn, "worker-a", env=env_a)
    worker_a.wait_for_output("freeze point in_finalize:publish reached", timeout=120)
    try:
        wait_until(
            lambda: Operation.objects.filter(key=key, lease_expires_at__lt=Now()).exists(),
            timeout=LEASE_SECONDS + 60,
            what="the expiry of A's lease",
        )
        worker_b = run_worker(spawn, "worker-b", env=worker_env(target, **bounds))
        assert worker_b.wait(timeout=120) == 0, worker_b.output()
        assert worker_a.process.poll() is None  # still frozen: B did not wait for it
    finally:
        os.kill(worker_a.process.pid, signal.SIGKILL)

    assert_published_exactly_once(revision, target)
    subject = revision_subject_id(revision.brief.public_id, revision.number)
    assert AuditEvent.objects.filter(event_type="publication.recorded", subject_id=subject).count() == 1
    publish = Operation.objects.get(key=key)
    # One attempt allowed, two made: A's, frozen after the target applied it, was not counted.
    assert publish.attempts == 2 and publish.attempts - publish.waits == 1
    (b_attempt,) = Attempt.objects.filter(operation=publish, worker_id="worker-b")
    assert b_attempt.ambiguous and b_attempt.outcome == Attempt.Outcome.SUCCEEDED
    assert publish.result["first_application"] is False  # B adopted what A's request applied
    assert not Operation.objects.filter(status__in=["dead", "conflict"]).exists()
