"""Atomic claim, lease, fencing (docs/invariants.md#i8) with real processes: a paused worker loses its lease.

Worker A claims the publish operation and sends it; the target holds the request (latency) and
A is frozen with SIGSTOP in the middle of the call. A's lease expires on the database clock;
worker B takes the operation over with a higher fencing token, meets A's request still being
applied at the target (409 in_progress, a retry) or finds it applied, adopts it, and verifies.
Only then is A thawed: it reads the target's answer to its old request, tries its fenced
finalize, matches no row, and records on its own attempt that the lease was lost.

"The first writes nothing (its guarded updates match no row), the target sees no second
application, and the attempt row says the lease was lost."
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
from django.db.models.functions import Now

from publishing.identities import publish_key, verify_key
from publishing.models import Brief, Publication
from tests.acceptance import test_crash_points as recovery
from tests.acceptance.test_crash_points import (
    approve,
    assert_published_exactly_once,
    worker_env,
    write_revision,
)
from tests.processes import run_worker, wait_until
from workers.models import Attempt, AuditEvent, Conflict, Dependency, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

# The same reference-target fixture as the crash-point tests (`spawn` is in conftest).
start_target = recovery.start_target

# A's lease runs out long before the target answers A's request, and B (started after the
# expiry) finds that request still being applied. The client timeout stays under lease / 2.5.
LATENCY_MS = 9000
LEASE_SECONDS = 6
TIMEOUT_SECONDS = 2
# Worker B's lease is not under test: B gets worker_env's defaults, which no loaded CPU overruns.


def talking_to(pid: int, port: int) -> bool:
    """Whether process `pid` has a TCP connection open to `port` on this host."""
    return any(
        conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED
        for conn in psutil.Process(pid).net_connections(kind="tcp")
    )


def request_sent(pid: int, port: int) -> bool:
    """Whether process `pid` has written a whole request on a connection to `port` and the peer's kernel
    acknowledged all of it: from then on the request is the target's, whatever becomes of `pid`.

    httpx writes the headers and the body separately on a TCP_NODELAY socket, so a whole request is
    at least two data segments; `ss` reports them (data_segs_out) and the unacknowledged bytes (Send-Q).
    """
    for conn in psutil.Process(pid).net_connections(kind="tcp"):
        if not (conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED):
            continue
        local, remote = f"{conn.laddr.ip}:{conn.laddr.port}", f"{conn.raddr.ip}:{conn.raddr.port}"
        info = subprocess.run(
            ["ss", "-tinH", "src", local, "dst", remote], capture_output=True, text=True, check=True
        ).stdout
        segments = re.search(r"\bdata_segs_out:(\d+)", info)
        if info.split() and info.split()[2] == "0" and segments and int(segments.group(1)) >= 2:
            return True
    return False


def database_state(*, except_worker: str) -> dict[str, list[dict[str, Any]]]:
    """Every row a worker could write, but the attempt rows of `except_worker`."""
    return {
        "operations": list(Operation.objects.order_by("id").values()),
        "attempts": list(Attempt.objects.exclude(worker_id=except_worker).order_by("operation_id", "number").values()),
        "dependencies": list(Dependency.objects.order_by("id").values()),
        "conflicts": list(Conflict.objects.order_by("id").values()),
        "publications": list(Publication.objects.order_by("id").values()),
        "briefs": list(Brief.objects.order_by("id").values()),
        "audit": list(AuditEvent.objects.order_by("id").values()),
    }


def test_atomic_claim_lease_fencing__paused_worker_loses_lease_and_writes_nothing(
    start_target, spawn, editor, approver, settings
):
    settings.GALLEY_MAX_ATTEMPTS = 20  # B retries about once a second while A's request is in flight
    target = start_target("--latency-ms", str(LATENCY_MS))
    revision = write_revision(editor)
    approve(revision, approver)
    key = publish_key(revision.brief.public_id, revision.number)
    env = worker_env(target, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS)

    worker_a = run_worker(spawn, "worker-a", env=env)
    wait_until(
        lambda: Operation.objects.filter(key=key, status="running", lease_owner="worker-a").exists(),
        timeout=120,
        what="worker A's claim",
    )
    port = urlsplit(target.url).port
    wait_until(lambda: talking_to(worker_a.process.pid, port), timeout=60, what="worker A's call to the target")
    # Not a fixed pause: however slowly A runs, it is frozen only once its whole request is at the
    # target, which then holds it for LATENCY_MS.
    wait_until(lambda: request_sent(worker_a.process.pid, port), timeout=60, what="worker A's request sent")
    sent_at = time.monotonic()
    os.kill(worker_a.process.pid, signal.SIGSTOP)
    try:
        a_attempt = Attempt.objects.get(operation__key=key)
        assert (a_attempt.worker_id, a_attempt.fencing_token, a_attempt.finished_at) == ("worker-a", 1, None)
        # A renewed its lease just before sending; frozen, it can renew no more.
        a_lease_expires_at = Operation.objects.get(key=key).lease_expires_at

        wait_until(
            lambda: Operation.objects.filter(key=key, lease_expires_at__lt=Now()).exists(),
            timeout=LEASE_SECONDS + 60,
            what="the expiry of A's lease",
        )
        # Whenever this test gets to look: the target had applied nothing when A's lease ran out (it
        # applies A's request LATENCY_MS after receiving it, by the same host clock as the database's).
        applied_at = [datetime.fromisoformat(row["applied_at"]) for row in target.applications()]
        assert all(at > a_lease_expires_at for at in applied_at), (
            f"the target applied A's request at {applied_at}, before A's lease expired at {a_lease_expires_at} "
            f"({time.monotonic() - sent_at:.1f} s after A sent it)"
        )

        worker_b = run_worker(spawn, "worker-b", env=worker_env(target))
        assert worker_b.wait(timeout=120) == 0, worker_b.output()
        assert_published_exactly_once(revision, target)
        taken_over = Operation.objects.get(key=key)
        a_attempt.refresh_from_db()
        # B's claim closed A's attempt as abandoned; A itself has not run since its claim.
        assert (a_attempt.error_kind, a_attempt.outcome) == ("lease_expired", "")
        assert worker_a.process.poll() is None
        before_a_resumes = database_state(except_worker="worker-a")
    finally:
        os.kill(worker_a.process.pid, signal.SIGCONT)

    # A reads the answer to its old request, tries its fenced finalize, matches no row, stops.
    assert worker_a.wait(timeout=120) == 0, worker_a.output()
    assert "lease lost" in worker_a.output()

    # A wrote nothing: every row is as B left it, but A's own attempt.
    assert database_state(except_worker="worker-a") == before_a_resumes
    a_attempt.refresh_from_db()
    assert (a_attempt.outcome, a_attempt.error_kind) == (Attempt.Outcome.LEASE_LOST, "lease_lost")
    assert a_attempt.finished_at is not None

    # The target saw one application: A's request, applied while A was frozen; B adopted it.
    assert_published_exactly_once(revision, target)
    assert [application["operation_key"] for application in target.applications()] == [key]
    assert taken_over.result["first_application"] is False
    assert taken_over.result["external_id"] == target.held(key)["id"]

    # The operation's lease history belongs to B: a higher fencing token, B's result, B's success.
    b_attempts = list(Attempt.objects.filter(operation__key=key, worker_id="worker-b").order_by("number"))
    assert b_attempts, "worker B never attempted"
    assert b_attempts[0].ambiguous  # A's attempt had no outcome: B looked the key up first
    assert [attempt.outcome for attempt in b_attempts] == [Attempt.Outcome.RETRY] * (len(b_attempts) - 1) + [
        Attempt.Outcome.SUCCEEDED
    ]
    # Retries only because A's request was still being applied (or B's own replay waited it out).
    assert {attempt.error_kind for attempt in b_attempts[:-1]} <= {"in_progress", "timeout"}
    assert taken_over.fencing_token == b_attempts[-1].fencing_token > a_attempt.fencing_token
    assert taken_over.status == Operation.Status.SUCCEEDED
    # The verification is B's: in its publish's attempt (no verify operation), or its verify operation's.
    verify_workers = Attempt.objects.filter(operation__key=verify_key(revision.brief.public_id, revision.number))
    assert set(verify_workers.values_list("worker_id", flat=True)) <= {"worker-b"}
    assert taken_over.result["verified_inline"] is not verify_workers.exists()
