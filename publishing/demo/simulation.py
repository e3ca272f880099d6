"""A load simulation through the real actions: many briefs, revised and approved concurrently.

Each brief follows a script of rounds, run in order: "write revision k, approve it". The rounds
of all briefs are shuffled (seeded) and handed to a pool of threads, so briefs interleave while
each brief's own approvals stay in order — only the latest revision can be approved
(approvals.actions.check_decide_revision). A seeded fraction of rounds is a *stale review*: the
approver opens revision k, the editor saves k+1 meanwhile, the approval of k is refused as
stale and the approver approves k+1 instead. Every brief's last revision ends approved.

Every action runs in its own `transaction.atomic(durable=True)`, as the views do; each thread
has its own database connection (Django's connections are per thread) and closes it at the end.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import connection, transaction

from approvals.actions import check_decide_revision
from approvals.errors import StaleApproval
from approvals.models import Approval
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.errors import GalleyError
from publishing.models import Revision
from publishing.roles import Role, ensure_role_groups, has_role

DEFAULT_EDITOR = "sim-editor"
DEFAULT_APPROVER = "sim-approver"


class SimulationError(GalleyError):
    """The simulation cannot run as asked (bad numbers, a named user missing or without the role)."""


@dataclass(frozen=True)
class SimulationSummary:
    briefs: int
    revisions: int
    approvals: int
    refused_as_stale: int
    elapsed_seconds: float
    brief_ids: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"briefs={self.briefs} revisions={self.revisions} approvals={self.approvals} "
            f"refused_as_stale={self.refused_as_stale} elapsed={self.elapsed_seconds:.1f}s"
        )


@dataclass
class _Brief:
    """One brief's script and progress; `lock` keeps its rounds in order across threads."""

    index: int
    stale_rounds: set[int]
    public_id: str = ""
    written: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Tally:
    revisions: int = 0
    approvals: int = 0
    refused_as_stale: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


def ensure_simulation_user(username: str, role: Role) -> AbstractBaseUser:
    """The simulation's own user `username` in `role`'s group, created if missing (unusable password)."""
    with transaction.atomic(durable=True):
        ensure_role_groups()
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        user.groups.add(Group.objects.get(name=role.value))
    return user


def _named_user(username: str, role: Role) -> AbstractBaseUser:
    try:
        user = get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise SimulationError(f"There is no user {username!r}.") from None
    if not has_role(user, role):
        raise SimulationError(f"{username!r} is not in the {role.value} group, so cannot act as one.")
    return user


def run_simulation(
    *,
    briefs: int,
    revisions: int,
    concurrency: int = 4,
    seed: int | None = None,
    stale_rate: float = 0.0,
    editor: str | None = None,
    approver: str | None = None,
) -> SimulationSummary:
    """Create `briefs` briefs with `revisions` revisions each, approving them as described above.

    Named users must exist and hold the role; without names the simulation's own users
    (sim-editor, sim-approver) are created or reused. Must not run inside a transaction (each
    action opens its own durable one). Raises SimulationError for bad arguments, and re-raises
    the first error of any thread after all threads stopped.
    """
    if briefs < 1 or revisions < 1 or concurrency < 1:
        raise SimulationError("--briefs, --revisions and --concurrency must be at least 1.")
    if not 0.0 <= stale_rate <= 1.0:
        raise SimulationError("--stale-rate must be a probability between 0 and 1.")
    editor_user = _named_user(editor, Role.EDITOR) if editor else ensure_simulation_user(DEFAULT_EDITOR, Role.EDITOR)
    approver_user = (
        _named_user(approver, Role.APPROVER) if approver else ensure_simulation_user(DEFAULT_APPROVER, Role.APPROVER)
    )
    if editor_user.pk == approver_user.pk:
        raise SimulationError("The editor and the approver must be different users: nobody approves their own text.")

    rng = random.Random(seed)  # noqa: S311 -- reproducible load, not security
    run_tag = f"{rng.getrandbits(32):08x}"
    scripts = [_Brief(index=i, stale_rounds=_stale_rounds(rng, revisions, stale_rate)) for i in range(1, briefs + 1)]
    # One token per round of a brief; a stale round writes two revisions, so the brief has one round less.
    tokens = [script for script in scripts for _ in range(revisions - len(script.stale_rounds))]
    rng.shuffle(tokens)
    work: queue.SimpleQueue[_Brief] = queue.SimpleQueue()
    for token in tokens:
        work.put(token)

    tally = _Tally()
    failed = threading.Event()
    started = time.monotonic()

    def worker() -> None:
        try:
            users = get_user_model().objects.in_bulk([editor_user.pk, approver_user.pk])
            acting_editor, acting_approver = users[editor_user.pk], users[approver_user.pk]
            while not failed.is_set():
                try:
                    script = work.get_nowait()
                except queue.Empty:
                    return
                with script.lock:
                    _run_round(script, editor=acting_editor, approver=acting_approver, run_tag=run_tag, tally=tally)
        except BaseException:
            failed.set()
            raise
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="galley-simulate") as pool:
        futures = [pool.submit(worker) for _ in range(concurrency)]
        errors = [future.exception() for future in futures]
    for error in errors:
        if error is not None:
            raise error
    return SimulationSummary(
        briefs=sum(1 for script in scripts if script.public_id),
        revisions=tally.revisions,
        approvals=tally.approvals,
        refused_as_stale=tally.refused_as_stale,
        elapsed_seconds=time.monotonic() - started,
        brief_ids=[script.public_id for script in scripts],
    )


def _stale_rounds(rng: random.Random, revisions: int, rate: float) -> set[int]:
    """Revisions k whose review goes stale (k+1 is saved meanwhile, and approved in the same round)."""
    chosen: set[int] = set()
    k = 1
    while k < revisions:
        if rng.random() < rate:
            chosen.add(k)
            k += 2  # k+1 is approved in k's round, so it cannot start a round of its own
        else:
            k += 1
    return chosen


def _run_round(script: _Brief, *, editor: Any, approver: Any, run_tag: str, tally: _Tally) -> None:
    """The brief's next round; the caller holds `script.lock`."""
    if not script.public_id:
        with transaction.atomic(durable=True):
            # No source material, so no summary run: the simulation's editor writes every
            # revision itself, and an AI first revision would race it for number 1.
            brief = check_create_brief(
                title=f"Simulation {run_tag} #{script.index}", source_material="", acting_user=editor
            )
        script.public_id = brief.public_id
    reviewed = _write_revision(script, editor=editor, tally=tally)
    if script.written in script.stale_rounds:
        # The approver has `reviewed` open while the editor saves the next revision.
        current = _write_revision(script, editor=editor, tally=tally)
        try:
            _approve(script, reviewed, approver=approver)
        except StaleApproval:
            tally.add(refused_as_stale=1)
        else:
            raise AssertionError(f"{script.public_id}: approving a superseded revision was not refused")
        reviewed = current
    _approve(script, reviewed, approver=approver)
    tally.add(approvals=1)


def _write_revision(script: _Brief, *, editor: Any, tally: _Tally) -> Revision:
    number = script.written + 1
    with transaction.atomic(durable=True):
        revision, created = check_create_revision(
            script.public_id,
            base_number=script.written,
            title=f"Simulated article {script.index}",
            body=f"Revision {number} of {script.public_id}.\n\nEvery revision says something new.",
            acting_user=editor,
        )
    if not created or revision.number != number:
        raise AssertionError(f"{script.public_id}: expected a new revision {number}, got {revision.number}")
    script.written = number
    tally.add(revisions=1)
    return revision


def _approve(script: _Brief, revision: Revision, *, approver: Any) -> Approval:
    with transaction.atomic(durable=True):
        approval, _created = check_decide_revision(
            script.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=approver,
        )
    return approval
