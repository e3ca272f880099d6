"""The database clock of docs/invariants.md#i8, with a worker whose clock is not the database's: at the claim, a process
started under Debian's libfaketime (`make faketime`), so that every clock it reads (time.time, datetime,
Django's timezone.now) is 30 minutes off while PostgreSQL keeps the real time; at a failed attempt's
deadline check, the clock Django's code reads moved in this process."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import time

import pytest
from django.utils import timezone

from tests.processes import BASE_DIR, child_database_url, process_env
from tests.workers.test_operations import enqueue
from workers.actions.claims import claim_operations, fail_operation
from workers.errors import FailureKind, OperationFailed
from workers.models import Operation

KIND = "test.skewed-claim"
LEASE_SECONDS = 60
# How long a loaded machine may take between the claim's statement and the next one.
SLACK_SECONDS = 20


def claim_in_a_process_whose_clock_is_off(offset: str) -> dict[str, float]:
    """Run tests.workers.skewed_claim under faketime `offset` (e.g. "-30m"); what it measured."""
    faketime = shutil.which("faketime")
    assert faketime is not None, "this test needs Debian's faketime: run `make faketime` (make test does)"
    env = process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_LEASE_SECONDS=str(LEASE_SECONDS),
        # The offset applies to the wall clock only: a monotonic clock moved back before boot would not be one.
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    done = subprocess.run(
        [faketime, "-f", offset, sys.executable, "-m", "tests.workers.skewed_claim", KIND],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("offset", "skew_seconds"), [("-30m", -1800), ("+30m", 1800)], ids=["behind", "ahead"])
def test_invariant_8__claim_by_a_worker_30_minutes_off__lease_ends_lease_seconds_after_the_database_clock(
    offset, skew_seconds
):
    enqueue("skewed-claim", kind=KIND)

    measured = claim_in_a_process_whose_clock_is_off(offset)

    # The worker's clocks really were off by the offset (give or take the time between the readings)...
    for clock in ("worker_time", "worker_django_now"):
        assert abs(measured[clock] - measured["database_clock"] - skew_seconds) < SLACK_SECONDS, measured
    # ...and the lease its claim took, before any renewal, ends lease-seconds after the database's now.
    assert measured["lease_seconds"] == LEASE_SECONDS
    assert LEASE_SECONDS - SLACK_SECONDS <= measured["lease_remaining"] <= LEASE_SECONDS, measured


# The deadline (the bound of docs/invariants.md#i9) is the database's too: whether a retry would still come before it
# is decided on the database clock, whatever the clock of the worker whose attempt failed.
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("worker_clock_minutes", "deadline_seconds", "outcome"),
    [(90, 3600, "retry_wait"), (-90, 30, "dead")],
    ids=["ahead_retry_before_the_deadline", "behind_retry_past_the_deadline"],
)
def test_invariant_8__retry_or_dead_by_the_deadline__decided_on_the_database_clock(
    monkeypatch, settings, worker_clock_minutes, deadline_seconds, outcome
):
    settings.GALLEY_OPERATION_DEADLINE_SECONDS = deadline_seconds
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 120  # a retry in 60-120 s
    enqueue("deadline-by-database", kind=KIND)
    (claimed,) = claim_operations(worker_id="skewed-worker", limit=1, kinds=[KIND])
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + datetime.timedelta(minutes=worker_clock_minutes))

    fail_operation(claimed, OperationFailed(FailureKind.SERVER_ERROR, "the target failed"), started=time.monotonic())

    operation = Operation.objects.get(id=claimed.operation_id)
    assert operation.status == outcome, operation.last_error_message
    assert operation.last_error_message.startswith("the target failed" if outcome == "retry_wait" else "deadline ")
