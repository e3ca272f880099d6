"""docs/invariants.md#i15 with workers whose clocks are wrong: two real worker processes started under Debian's
libfaketime (`make faketime`), one 10 minutes fast and one 10 minutes slow, drain a scheduled revision's
publishes to two real reference targets. Neither claims anything before T by the database clock, whatever its own
clock says; after T, running at the same moment, they make exactly one publication per channel."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from approvals.schedules import database_now
from approvals.selectors import ScheduleState, get_schedule
from tests.approvals.test_schedules import (
    BODY,
    approve,
    in_minutes,
    ledgers,
    publishes,
    reschedule,
)
from tests.processes import BASE_DIR, child_database_url, process_env
from tests.reference_target import TOKEN
from workers.models import Attempt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

SKEWS = {"fast": "+10m", "slow": "-10m"}
# How far the clocks of a loaded machine's processes may be from the offsets faketime sets.
SLACK_SECONDS = 30


def drain_in_processes_whose_clocks_are_off(target_url: str) -> dict[str, dict[str, Any]]:
    """Both skewed workers, started together; what each one said."""
    faketime = shutil.which("faketime")
    assert faketime is not None, "this test needs Debian's faketime: run `make faketime` (make test does)"
    env = process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_TARGET_KIND="reference",
        GALLEY_TARGET_URL=target_url,
        GALLEY_TARGET_TOKEN=TOKEN,
        # libfaketime 0.9.10 (Debian 12) fails every time.sleep() with EINVAL when it leaves the monotonic
        # clock alone (FAKETIME_DONT_FAKE_MONOTONIC=1), and a drain that waits for work due soon sleeps; faked,
        # the monotonic clock moves by the same offset, which the drain's intervals do not notice.
        TZ="UTC",
    )

    def run(name: str) -> dict[str, Any]:
        argv = [faketime, "-f", SKEWS[name], sys.executable, "-m", "tests.approvals.scheduled_drain", f"w-{name}"]
        done = subprocess.run(argv, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = dict(zip(SKEWS, pool.map(run, SKEWS), strict=True))
    for name, offset in (("fast", 600), ("slow", -600)):
        skew = answers[name]["worker_time"] - answers[name]["database_clock"]
        assert abs(skew - offset) < SLACK_SECONDS, answers  # its clock really was off
    return answers


def test_invariant_15__workers_10_minutes_fast_and_slow__nothing_early__one_publication_per_channel(
    targets, story, revise, approver, approver2
):
    revision = revise(story, BODY)
    # Far enough ahead that the fast worker's clock (10 minutes on) is past it, the database's is not; given as
    # Amsterdam's wall-clock time (no offset), as the web form sends it, to workers that run in UTC.
    t = (database_now() + datetime.timedelta(minutes=5)).replace(microsecond=0)
    local = t.astimezone(ZoneInfo("Europe/Amsterdam")).replace(tzinfo=None).isoformat()
    approve(revision, by=approver, publish_at=local, zone="Europe/Amsterdam")
    assert [op.scheduled_for for op in publishes(revision)] == [t, t]

    early = drain_in_processes_whose_clocks_are_off(targets["web"].url)

    assert all(answer["database_clock"] < t.timestamp() for answer in early.values()), early  # both ran before T
    assert [answer["outcomes"] for answer in early.values()] == [{}, {}]
    assert not Attempt.objects.exists()
    assert ledgers(targets) == {"partner-feed": [], "web": []}

    # T comes (moved to a moment just past by an approver), and both workers run at once.
    reschedule(revision, by=approver2, publish_at=in_minutes(-0.05))
    while database_now() < publishes(revision)[0].scheduled_for:
        time.sleep(0.05)
    late = drain_in_processes_whose_clocks_are_off(targets["web"].url)

    assert (
        sum(sum(answer["outcomes"].values()) for answer in late.values()) == 2
    )  # 2 publishes, each verified in its attempt
    assert ledgers(targets) == {"partner-feed": [1], "web": [1]}
    schedule = get_schedule(story)
    assert schedule.state == ScheduleState.FIRED
    assert all(firing.fired_at >= firing.scheduled_for for firing in schedule.channels)
    assert [op.attempts for op in publishes(revision)] == [1, 1]
