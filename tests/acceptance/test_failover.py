"""Across a failover (issue #24): a primary and a streaming replica of the test's own (tests/postgres.py), a
real web server (gunicorn), two real workers and the reference target; the desk publishes, the primary's
host dies (SIGKILL of the postmaster and its children), the replica is promoted, and Galley follows through
its DATABASE_URL, which names both hosts with target_session_attrs=read-write (docs/operations.md#failover).

- Synchronous replication: every commit acknowledged was on the replica. Nothing is lost, nothing is
  duplicated: every approval is published exactly once, and the reconciliation finds nothing to adopt.
- Asynchronous replication, the replica's WAL receiver paused (SIGSTOP) before the second half of the
  approvals: those approvals, and every send's record after the pause, are lost with the old primary.
  The first half's sends are found again by key (their operations survived: resent under the same key,
  the target answers with the post it holds, no second one); what the target holds of the second half is
  found by brief by `manage.py reconcile_channels`, adopted, and counted as lost approvals.

The web and the workers ride through: no process exits, no operator acts (but for the reconciliation
run after the asynchronous failover, as docs/operations.md#failover says).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from publishing.identities import PUBLISH, publish_key
from tests import postgres
from tests.acceptance import test_crash_points as recovery
from tests.acceptance.test_crash_points import worker_env
from tests.postgres import SETUP_TIMEOUT, Replicated, run_to_end, unfinished
from tests.processes import Child, free_port, kill, manage, start, wait_for_http, wait_until

start_target = recovery.start_target
replicated = postgres.replicated

BRIEFS = 24
LEASE_SECONDS = 8  # a send cut off by the failover is taken over soon (lease > 2.5 x the target's timeout)
TIMEOUT_SECONDS = 3
FINISH_TIMEOUT = 300


@pytest.fixture
def keep(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """keep(name, argv, env=...): `python <argv>` as a child, output to tmp_path/<name>.log, killed at the end."""
    children: list[Child] = []

    def start_one(name: str, argv: list[str], *, env: dict[str, str]) -> Child:
        log = tmp_path / f"{name}.log"
        children.append(Child(name, start(argv, env=env, log=log), log))
        return children[-1]

    yield start_one
    for child in children:
        if child.process.poll() is None:
            kill(child.process)


class Newsroom:
    """Galley on the replicated pair: the web, the workers, the target, and the desk's briefs."""

    def __init__(self, pair: Replicated, *, start_target, spawn, keep, tmp_path: Path) -> None:
        self.pair, self.spawn, self.keep, self.tmp_path = pair, spawn, keep, tmp_path
        self.target = start_target()
        self.env = worker_env(self.target, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS) | {
            "DATABASE_URL": pair.url,
            "GALLEY_WORKER_CONCURRENCY": "4",
            "GALLEY_MAX_ATTEMPTS": "30",  # the failover must never make a dead letter
        }
        self.run("migrate", "manage.py", "migrate", "--no-input")
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        argv = ["-m", "gunicorn", "galley.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"]
        self.web = keep("web", argv, env=self.env)  # starting while the desk writes its briefs
        self.briefs: list[str] = json.loads(
            self.run("write", "-m", "tests.acceptance.failover_desk", "write", str(BRIEFS))
        )
        wait_for_http(f"{self.base}/readyz", process=self.web.process, timeout=SETUP_TIMEOUT)
        self.workers: list[Child] = []

    def run(self, name: str, *argv: str) -> str:
        log = self.tmp_path / f"{name}.log"
        run_to_end(start(list(argv), env=self.env, log=log), what=name, log=log)
        return log.read_text().strip().splitlines()[-1]

    def start_workers(self) -> None:
        for name in ("worker-a", "worker-b"):
            self.workers.append(self.spawn(name, "run_worker", "--worker-id", name, "--poll", "0.2", env=self.env))

    def approve(self, briefs: list[str], *, name: str) -> Child:
        return self.keep(name, ["-m", "tests.acceptance.failover_desk", "approve", *briefs], env=self.env)

    def keys(self) -> list[str]:
        return [row["operation_key"] for row in self.target.applications()]

    def duplicates(self) -> int:
        """Applications beyond one per key and beyond one per brief (each brief has one revision here)."""
        applications = self.target.applications()
        keys = {row["operation_key"] for row in applications}
        briefs = {row["brief_id"] for row in applications}
        return len(applications) - min(len(keys), len(briefs))

    def ride_through(self) -> None:
        """Until every intent on the new primary is done, with no process exiting; then the web answers."""
        deadline = time.monotonic() + FINISH_TIMEOUT
        while True:
            for child in (self.web, *self.workers):
                assert child.process.poll() is None, f"{child.name} exited\n{child.output()}"
            try:
                if not unfinished(self.pair.replica.rows):
                    break
            except psycopg.OperationalError:  # the promoted server may still be starting
                self.pair.replica.disconnect()
            assert time.monotonic() < deadline, f"operations unfinished after {FINISH_TIMEOUT} s"
            time.sleep(0.5)
        wait_until(self.web_ready, timeout=SETUP_TIMEOUT, what="the web answering from the new primary")
        for child in (self.web, *self.workers):
            assert child.process.poll() is None, f"{child.name} exited\n{child.output()}"
        for worker in self.workers:  # each met the dead primary, backed off and reconnected
            assert "database unavailable" in worker.output(), worker.output()

    def web_ready(self) -> bool:
        return httpx.get(f"{self.base}/readyz", timeout=10).status_code == 200

    def reconcile(self) -> list[str]:
        log = self.tmp_path / "reconcile.log"
        run_to_end(manage("reconcile_channels", env=self.env, log=log), what="reconcile_channels", log=log)
        return [line for line in log.read_text().splitlines() if line.startswith("web: ")]

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            assert worker.wait(timeout=120) == 0, worker.output()


def approved(desk: Child) -> list[str]:
    return [line.removeprefix("approved ") for line in desk.output().splitlines() if line.startswith("approved ")]


def summary(record_property, case: str, *, applications: int, adoptions: int, lost: int, duplicates: int) -> None:
    """The run's figures, on stdout (pytest -s) and in the JUnit report (record_property)."""
    figures = f"applications={applications} adoptions={adoptions} lost_approvals={lost} duplicates={duplicates}"
    record_property(f"failover_{case}", figures)
    print(f"\nfailover[{case}]: {figures}")


@pytest.mark.acceptance
def test_nothing_lost__synchronous_replica_promoted_under_load__every_approval_published_once(
    replicated, start_target, spawn, keep, tmp_path, record_property
):
    pair = replicated(synchronous=True)
    newsroom = Newsroom(pair, start_target=start_target, spawn=spawn, keep=keep, tmp_path=tmp_path)
    newsroom.start_workers()
    desk = newsroom.approve(newsroom.briefs, name="desk")
    wait_until(lambda: len(newsroom.keys()) >= BRIEFS // 3, timeout=SETUP_TIMEOUT, what="a third published")

    pair.fail_over()

    assert desk.wait(timeout=SETUP_TIMEOUT) == 0, desk.output()  # the desk rode through too
    assert approved(desk) == newsroom.briefs
    newsroom.ride_through()
    rows = pair.replica.rows
    # Every approval is published exactly once: one application per key at the target, each recorded
    # and verified, every brief published.
    keys = newsroom.keys()
    assert sorted(keys) == sorted(publish_key(brief, 1) for brief in newsroom.briefs)
    assert newsroom.duplicates() == 0
    # One publish per brief; a verification inline in its attempt or, where the page was late, durable.
    assert rows("SELECT status, count(*) FROM workers_operation WHERE kind = %s GROUP BY 1", (PUBLISH,)) == [
        ("succeeded", BRIEFS)
    ]
    assert rows("SELECT count(*) FROM workers_operation WHERE status <> 'succeeded'") == [(0,)]
    assert rows("SELECT count(*) FROM publishing_publication WHERE verified_at IS NOT NULL") == [(BRIEFS,)]
    assert rows("SELECT status, count(*) FROM publishing_brief GROUP BY 1") == [("published", BRIEFS)]
    # Nothing for the reconciliation to find.
    assert newsroom.reconcile() == [
        f"web: briefs={BRIEFS} held={BRIEFS} recorded={BRIEFS} adopted=0 lost_approvals=0 in_flight=0 unaccounted=0"
    ]
    newsroom.stop_workers()
    summary(record_property, "sync", applications=len(keys), adoptions=0, lost=0, duplicates=newsroom.duplicates())


@pytest.mark.acceptance
def test_nothing_lost__asynchronous_replica_lagging_promoted__sends_adopted_lost_approvals_counted(
    replicated, start_target, spawn, keep, tmp_path, record_property
):
    pair = replicated(synchronous=False)
    newsroom = Newsroom(pair, start_target=start_target, spawn=spawn, keep=keep, tmp_path=tmp_path)
    kept, lost = newsroom.briefs[: BRIEFS // 2], newsroom.briefs[BRIEFS // 2 :]
    first = newsroom.approve(kept, name="desk-kept")
    assert first.wait(timeout=SETUP_TIMEOUT) == 0, first.output()
    pair.wait_for_replay()  # the first half's approvals are on the replica
    receiver = pair.pause_replication()
    second = newsroom.approve(lost, name="desk-lost")  # committed on the primary alone
    newsroom.start_workers()  # every send, and every record of one, is the primary's alone from now on
    assert second.wait(timeout=SETUP_TIMEOUT) == 0, second.output()
    wait_until(
        lambda: len(newsroom.keys()) >= len(kept) + len(lost) // 2,
        timeout=SETUP_TIMEOUT,
        what="the first half and some of the second at the target",
    )

    pair.fail_over(paused_receiver=receiver)

    newsroom.ride_through()
    rows = pair.replica.rows
    keys = newsroom.keys()
    held_lost = sorted(key for key in keys if key in {publish_key(brief, 1) for brief in lost})
    assert held_lost, "the failover came after some of the second half was sent"
    # The approvals of the second half went with the old primary; the first half's survived, and their
    # sends, whose records were lost, were made again under the same keys: the target answered each
    # with the post it holds.
    [(approvals,)] = rows("SELECT count(*) FROM approvals_approval")
    assert approvals == len(kept)
    assert rows("SELECT status, count(*) FROM workers_operation WHERE kind = %s GROUP BY 1", (PUBLISH,)) == [
        ("succeeded", len(kept))
    ]
    assert rows("SELECT count(*) FROM workers_operation WHERE status <> 'succeeded'") == [(0,)]
    assert rows("SELECT count(*) FROM publishing_publication WHERE verified_at IS NOT NULL") == [(len(kept),)]

    lines = newsroom.reconcile()

    adopted = len(held_lost)
    assert lines == [
        f"web: briefs={BRIEFS} held={len(kept) + adopted} recorded={len(kept)} adopted={adopted} "
        f"lost_approvals={adopted} in_flight=0 unaccounted=0",
        *(f"web: approval lost: {key} is at the target, unapproved in Galley; approve it again" for key in held_lost),
    ]
    # Every application at the target is accounted for in Galley; none was made twice.
    recorded = sorted(key for (key,) in rows("SELECT operation_key FROM publishing_publication"))
    assert recorded == sorted(keys)
    assert newsroom.duplicates() == 0
    assert rows("SELECT count(*) FROM workers_auditevent WHERE event_type = 'approval.lost'") == [(adopted,)]
    # A lost approval given again publishes the post the target holds: adopted by key, not sent twice.
    again = held_lost[0].split(":")[1]
    desk = newsroom.approve([again], name="desk-again")
    assert desk.wait(timeout=SETUP_TIMEOUT) == 0, desk.output()
    newsroom.ride_through()
    assert rows("SELECT status FROM publishing_brief WHERE public_id = %s", (again,)) == [("published",)]
    assert sorted(newsroom.keys()) == sorted(keys)
    newsroom.stop_workers()
    summary(
        record_property,
        "async",
        applications=len(keys),
        adoptions=adopted,
        lost=adopted,
        duplicates=newsroom.duplicates(),
    )
