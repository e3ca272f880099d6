"""The chaos test, short variant (docs/invariants.md#i3 to #i5, #i8 to #i10, #i12, #i14, #i15); `make chaos` is long.

Everything at once, with real processes: worker processes SIGKILLed and replaced at random, workers
frozen (SIGSTOP) inside a publish finalize holding the brief's lock until past their lease, then thawed
or killed, every brief fanned out to three channels (docs/invariants.md#i14), two reference targets and a
real WordPress behind the fault proxy, each with its own fault mix, answering 429, 503 and 500 and
committing then hanging or dropping the connection,
approvals racing new revisions and second approvers, a share of the approvals scheduled for a time T a
few seconds ahead, and a PostgreSQL restart half-way through. The
driver (tests/chaos.py) starts its own PostgreSQL so that it can restart it, which is also why it runs
as its own process here: this test session's database and settings stay untouched.

The assertions are the invariants the driver measured, never timings: per channel and in all, nothing
applied twice, no regression, every brief at its latest approved revision and verified, nothing unfinished, no dead
letter, no scheduled publish early or missed, and no worker that exited without being killed (a PostgreSQL
restart is ridden out).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes import BASE_DIR, process_env

pytestmark = [pytest.mark.acceptance, pytest.mark.wordpress]

# About 25 briefs (90-odd publications on three channels) over 25 s of editorial chaos: about a minute in all
# on two cores, WordPress's start included.
SHORT_RUN = [
    *("--briefs", "25", "--workers", "3", "--editors", "3"),
    *("--editorial-seconds", "25", "--kill-every", "2", "4"),
    *("--settle-seconds", "180", "--seed", "9011"),
    *("--scheduled-share", "0.3", "--schedule-ahead", "1", "5"),
]
# A bound for a hung run, not a timing assertion: a healthy one takes a fraction of it.
RUN_TIMEOUT_SECONDS = 600


def test_chaos__three_channels__kills_faults_races_and_a_postgresql_restart__exactly_once_no_regression_nothing_lost(
    tmp_path,
):
    figures_file = tmp_path / "figures.json"
    argv = [sys.executable, "-m", "tests.chaos", *SHORT_RUN, "--workdir", str(tmp_path), "--json", str(figures_file)]
    try:
        run = subprocess.run(
            argv, cwd=BASE_DIR, env=process_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the chaos run did not end within {RUN_TIMEOUT_SECONDS} s\n{expired.stdout}\n{expired.stderr}")
    output = f"{run.stdout}\n{run.stderr[-5000:]}\n(logs in {tmp_path / 'logs'})"
    print(run.stdout)
    assert figures_file.exists(), f"the chaos driver wrote no figures (exit {run.returncode})\n{output}"
    figures = json.loads(figures_file.read_text())

    # The chaos happened: kills, injected faults, the races, one PostgreSQL restart.
    assert figures["postgres_restarts"] == 1, output
    assert figures["kills"] >= 3, output
    assert figures["freezes"] >= 1, output  # the first worker freezes in its first publish finalize
    assert sum(figures["faults_injected"].values()) > 0, output
    races = ("races_approve_vs_new_revision", "races_second_approver", "back_to_back_approvals")
    assert all(figures[race] > 0 for race in races), output

    # The target's ledger: exactly once, never backwards, every brief at its latest approved revision.
    assert figures["duplicates"] == 0, output
    assert figures["regressions"] == 0, output
    assert figures["lost_intents"] == 0, output
    # Per channel (docs/invariants.md#i14), each its own target with its own fault mix: faults injected on
    # every one, and on every one exactly once, never backwards, every brief verified at its latest revision.
    assert sorted(figures["by_channel"]) == ["partner-feed", "web", "wordpress"], output
    for slug, counts in figures["by_channel"].items():
        assert sum(counts["faults_injected"].values()) > 0, (slug, output)
        assert (counts["duplicates"], counts["regressions"], counts["lost_intents"]) == (0, 0, 0), (slug, output)
        assert counts["briefs_verified"] == figures["briefs"], (slug, output)
    # Schedules (docs/invariants.md#i15): some approvals asked for T and fired under the chaos; none early
    # (no attempt, no application at a target before T), none missed (applied unless a newer one superseded it).
    assert figures["scheduled_approvals"] > 0 and figures["scheduled_fired"] > 0, output
    assert (figures["early"], figures["missed"]) == (0, 0), output
    assert figures["scheduled_fired"] + figures["scheduled_superseded"] == figures["scheduled_publishes"], output
    # Galley's tables: nothing unfinished, no dead letter the retry budget should have absorbed.
    assert figures["unfinished"] == 0, output
    assert figures["dead_letters"] == 0, output
    assert figures["conflicts"] == 0 and figures["open_attempts"] == 0, output
    # Every worker exit was a kill: none died of the PostgreSQL restart (or of anything else).
    assert figures["unexpected_worker_exits"] == 0, (figures["unexpected_exit_reasons"], output)
    assert figures["violations"] == [], output
    assert run.returncode == 0, output
