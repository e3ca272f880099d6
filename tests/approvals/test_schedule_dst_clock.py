"""docs/invariants.md#i15 across a daylight-saving change, by the database clock itself: a throwaway PostgreSQL
(the embedded binaries, its own data folder and socket) is started under Debian's libfaketime (`make faketime`)
with its clock running from 20 seconds before Amsterdam changes its clocks (01:00 UTC on 2027-03-28 and
2027-10-31). A revision is approved for an Amsterdam time 5 seconds after the change, in a child process that
runs in UTC with the real clock; a real worker process (in UTC, real clock) started at once drains publishing's
operations to two real reference targets across the change. Nothing is claimed before the database clock reaches
T, T is the zone's instant, and each channel gets exactly one publication.

The fall-back case names its hour by an explicit offset: 02:00:05+01:00 is the second 02:00:05 of that night
(01:00:05 UTC); the first (+02:00) was an hour earlier, so a T that lost its offset would fire at once."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from galley.reference_target import ReferenceTarget
from tests.approvals.test_schedules import ledgers
from tests.galley.test_production_server import Postgres
from tests.processes import BASE_DIR, process_env
from tests.reference_target import TOKEN

pytestmark = [pytest.mark.integration, pytest.mark.acceptance]

AMSTERDAM = "Europe/Amsterdam"
T = {
    "spring-forward": datetime.datetime(2027, 3, 28, 1, 0, 5, tzinfo=datetime.UTC),
    "fall-back": datetime.datetime(2027, 10, 31, 1, 0, 5, tzinfo=datetime.UTC),
}
# Long enough for a loaded machine to start the approving process and commit before T.
LEAD = datetime.timedelta(seconds=20)


class FakeClockPostgres(Postgres):
    """The embedded PostgreSQL on a data folder of its own: migrated and seeded with the real clock, then
    restarted (same folder, same socket) under libfaketime, its clock running from `start_at`."""

    def restart_at(self, start_at: datetime.datetime) -> None:
        libfaketime = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
        assert libfaketime, "this test needs Debian's libfaketime: run `make faketime` (make test does)"
        pgdata, socket_dir = str(self.server.pgdata), self.url.split("host=")[1]
        self.stop()
        # libfaketime preloaded (the `faketime` wrapper did not return here once pg_ctl had started the server):
        # "@" starts each process's clock at `start_at` and lets it run; the postmaster's backends are forks that
        # keep its start, so statement_timestamp() in every session runs on from `start_at`. Monotonic time
        # stays real, for pg_ctl's wait.
        argv = [str(self.server.bin_path / "pg_ctl"), "-w", "-t", "60", "-D", pgdata]
        argv += ["-l", str(self.server.pgdata / "log"), "-o", f'-h "" -k {socket_dir}', "start"]
        env = process_env(
            LD_PRELOAD=str(libfaketime[0]),
            FAKETIME=start_at.strftime("@%Y-%m-%d %H:%M:%S"),
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            TZ="UTC",
        )
        # Not a pipe: the postmaster inherits pg_ctl's output, and a pipe held open would hang the wait.
        with tempfile.TemporaryFile("w+") as output:
            done = subprocess.run(argv, env=env, user=self.server.system_user, stdout=output, stderr=output, timeout=90)
            output.seek(0)
            assert done.returncode == 0, output.read() + self.log()

    def log(self) -> str:
        path = Path(self.server.pgdata) / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def cleanup(self) -> None:
        """Stopped here: pgserver's own cleanup does not stop the server restart_at started."""
        if (Path(self.server.pgdata) / "postmaster.pid").exists():
            self.stop()
        self.server.cleanup()


@pytest.fixture
def faked_database() -> Iterator[FakeClockPostgres]:
    with tempfile.TemporaryDirectory(prefix="galley-dst-") as folder:
        database = FakeClockPostgres(Path(folder) / "pgdata")
        try:
            yield database
        finally:
            database.cleanup()


@pytest.fixture
def channels(tmp_path: Path) -> Iterator[dict[str, ReferenceTarget]]:
    started = {
        slug: ReferenceTarget(db_path=tmp_path / f"{slug}.sqlite3", token=TOKEN, port=0).start()
        for slug in ("partner-feed", "web")
    }
    yield started
    for target in started.values():
        target.stop()


def child(database: FakeClockPostgres, channels: dict[str, ReferenceTarget], *argv: str) -> dict[str, Any]:
    """`python <argv>` in UTC with the real clock, on the throwaway server; its last line, as JSON."""
    env = process_env(
        DATABASE_URL=database.url,
        DEBUG="false",
        GALLEY_TARGET_KIND="reference",
        GALLEY_TARGET_URL=channels["web"].url,
        GALLEY_TARGET_TOKEN=TOKEN,
        TZ="UTC",
    )
    done = subprocess.run(
        [sys.executable, *argv], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1]) if done.stdout.strip() else {}


@pytest.mark.parametrize(
    ("case", "publish_at"),
    [("spring-forward", "2027-03-28T03:00:05"), ("fall-back", "2027-10-31T02:00:05+01:00")],
    ids=["spring-forward-local-time", "fall-back-explicit-offset"],
)
def test_invariant_15__amsterdam_t_across_a_dst_change__database_clock_faked__fires_at_the_right_instant(
    faked_database, channels, case, publish_at
):
    t = T[case]
    child(faked_database, channels, "manage.py", "migrate", "--no-input", "-v", "0")
    public_id = child(faked_database, channels, "-m", "tests.approvals.dst_desk", "seed", channels["partner-feed"].url)[
        "public_id"
    ]
    faked_database.restart_at(t - LEAD)

    approved = child(
        faked_database, channels, "-m", "tests.approvals.dst_desk", "approve", public_id, publish_at, AMSTERDAM
    )
    assert approved["scheduled_for"] == [t.isoformat()] * 2  # T is the zone's instant on both channels
    # Approved while T was still ahead by the database clock: otherwise nothing here could have fired early.
    assert datetime.datetime.fromisoformat(approved["committed_by"]) < t, approved

    # A worker (UTC, the real clock: more than a year before T) waits for what is due soon and drains it.
    drained = child(faked_database, channels, "-m", "tests.approvals.scheduled_drain", "w-utc", str(LEAD.seconds * 2))

    assert drained["outcomes"] == {"succeeded": 2}, drained  # 2 publishes, each verified in its attempt
    assert drained["database_clock"] >= t.timestamp()  # the database's clock really ran on from before T
    assert drained["worker_time"] < t.timestamp() - 3600  # and the worker's was its own, the real one
    assert ledgers(channels) == {"partner-feed": [1], "web": [1]}
    publishes = child(faked_database, channels, "-m", "tests.approvals.dst_desk", "report", public_id)["publishes"]
    assert [(op["channel"], op["status"], op["attempts"]) for op in publishes] == [
        ("partner-feed", "succeeded", 1),
        ("web", "succeeded", 1),
    ]
    for op in publishes:
        (started_at,) = op["started_at"]  # the claim's statement_timestamp(): never before T
        assert datetime.datetime.fromisoformat(started_at) >= t, publishes
