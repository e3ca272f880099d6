"""docs/invariants.md#i5, atomic continuation, under concurrency: the lock order of docs/architecture.md#lock-order.

A second approval, an editor's revision and a worker's publish finalize all write around the same
brief. Each test runs them on real, separate connections and forces the interleavings that used
to deadlock: the worker is held inside its finalize transaction while the others start and block
(or finish), then let go. PostgreSQL aborts one transaction of a lock cycle after
`deadlock_timeout`; with one lock order there is no cycle, so every transaction commits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, transaction

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.actions.publications import do_record_publication, do_record_verification
from publishing.actions.revisions import check_create_revision
from publishing.identities import PUBLISH, VERIFY
from publishing.models import Brief, Publication, Revision
from tests.concurrency import WAIT_SECONDS, Session, wait_until_blocked_or_done
from workers.actions import claims
from workers.actions.claims import claim_operations, complete_operation
from workers.models import Operation
from workers.registry import Success

pytestmark = pytest.mark.django_db(transaction=True)

# Where the worker is held inside its finalize transaction: before the domain's finalize writes
# anything, right after it, or just before COMMIT (complete_operation's last call is
# ring_doorbell), where the deferred foreign-key checks run.
HOLD_POINTS = ["finalize_start", "finalize_end", "before_commit"]


def approve(revision: Revision, *, by: Any) -> Callable[[], object]:
    """What the approval view does: one durable transaction around the action."""

    def call() -> object:
        with transaction.atomic(durable=True):
            return check_decide_revision(
                revision.brief.public_id,
                revision_number=revision.number,
                payload_hash=revision.payload_hash,
                decision=Approval.Decision.APPROVED,
                acting_user=by,
            )

    return call


def save_revision(brief: Brief, *, base: int, body: str, by: Any) -> Callable[[], object]:
    """What the edit view does."""

    def call() -> object:
        with transaction.atomic(durable=True):
            return check_create_revision(
                brief.public_id, base_number=base, title="Harbour strike", body=body, acting_user=by
            )

    return call


def record_publication(revision: Revision, operation_id: int) -> None:
    """The publish handler's finalize, after the target answered."""
    do_record_publication(
        revision,
        channel="web",
        publish_operation_id=operation_id,
        external_id="pub-1",
        permalink="https://target.example/pub-1",
    )


class HeldWorker:
    """A worker that claimed the `kind` operation and got the target's answer; its finalize
    transaction (running `finalize(operation_id)`) is held at `hold` until `release`."""

    def __init__(
        self, kind: str, finalize: Callable[[int], object], *, hold: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (self.claimed,) = claim_operations(worker_id="worker-1", limit=1, kinds=[kind])
        self.finalize = finalize
        self.hold_point = hold
        self.held = threading.Event()
        self.released = threading.Event()
        self.session = Session("worker", self._complete)
        ring_doorbell = claims.ring_doorbell

        def ring_then_hold() -> None:
            ring_doorbell()
            self._hold_at("before_commit")

        monkeypatch.setattr(claims, "ring_doorbell", ring_then_hold)

    def _hold_at(self, point: str) -> None:
        if threading.current_thread() is self.session and point == self.hold_point:
            self.held.set()
            assert self.released.wait(WAIT_SECONDS), "the worker was never released"

    def _finalize(self) -> None:
        self._hold_at("finalize_start")
        self.finalize(self.claimed.operation_id)
        self._hold_at("finalize_end")

    def _complete(self) -> None:
        complete_operation(self.claimed, Success(finalize=self._finalize), started=time.monotonic())

    def hold(self) -> Session:
        self.session.begin()
        assert self.held.wait(WAIT_SECONDS), f"the worker did not reach {self.hold_point}: {self.session.error!r}"
        return self.session

    def release(self) -> None:
        self.released.set()


def assert_all_committed(*sessions: Session) -> None:
    for session in sessions:
        session.finish()
    errors = [f"{session.name}: {session.error!r}" for session in sessions if session.error is not None]
    assert not errors, "\n".join(errors)


def assert_published_once(revision: Revision) -> None:
    (publish,) = Operation.objects.filter(kind=PUBLISH)
    assert (publish.key, publish.status) == (f"publish:{revision.brief.public_id}:revision-1", "succeeded")
    (publication,) = Publication.objects.all()
    assert (publication.revision_id, publication.operation_key) == (revision.pk, publish.key)
    assert Operation.objects.filter(kind=VERIFY).count() == 1


def can_lock(model: type[Brief] | type[Operation], pk: int) -> bool:
    """Whether this connection could lock the row (FOR NO KEY UPDATE NOWAIT) right now."""
    try:
        with transaction.atomic():
            model.objects.select_for_update(nowait=True, no_key=True).get(pk=pk)
    except OperationalError:
        return False
    return True


@pytest.fixture
def approved(brief, revise, approver) -> Revision:
    """Revision 1, approved once: its publish operation is waiting for a worker."""
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)()
    return revision


@pytest.mark.parametrize("hold", HOLD_POINTS)
def test_atomic_continuation__second_approval_and_publish_finalize_never_deadlock(
    approved, approver2, hold, monkeypatch
):
    worker = HeldWorker(PUBLISH, lambda op_id: record_publication(approved, op_id), hold=hold, monkeypatch=monkeypatch)
    worker_session = worker.hold()
    second = Session("second approval", approve(approved, by=approver2)).begin()
    wait_until_blocked_or_done(second)

    worker.release()

    assert_all_committed(worker_session, second)
    assert_published_once(approved)
    assert Approval.objects.filter(revision=approved, decision=Approval.Decision.APPROVED).count() == 2


@pytest.mark.parametrize("hold", HOLD_POINTS)
def test_atomic_continuation__revision_save_behind_an_approval_and_publish_finalize_never_deadlocks(
    approved, approver2, editor, hold, monkeypatch
):
    worker = HeldWorker(PUBLISH, lambda op_id: record_publication(approved, op_id), hold=hold, monkeypatch=monkeypatch)
    worker_session = worker.hold()
    second = Session("second approval", approve(approved, by=approver2)).begin()
    wait_until_blocked_or_done(second)
    edit = Session("revision save", save_revision(approved.brief, base=1, body="Dockers are back.", by=editor))
    edit.begin()
    wait_until_blocked_or_done(edit)

    worker.release()

    assert_all_committed(worker_session, second, edit)
    assert_published_once(approved)
    assert Approval.objects.filter(revision=approved).count() == 2
    assert list(approved.brief.revisions.values_list("number", flat=True)) == [1, 2]
    assert Brief.objects.get(pk=approved.brief_id).status == Brief.Status.IN_REVIEW


@pytest.mark.parametrize("kind", [PUBLISH, VERIFY])
def test_atomic_continuation__publish_and_verify_finalize_lock_the_brief_before_their_operation(
    approved, kind, monkeypatch
):
    if kind == VERIFY:
        (publish,) = claim_operations(worker_id="worker-0", limit=1, kinds=[PUBLISH])
        complete_operation(
            publish, Success(finalize=lambda: record_publication(approved, publish.operation_id)), started=0.0
        )
        publication = Publication.objects.get()
        finalize: Callable[[int], object] = lambda _op_id: do_record_verification(publication)  # noqa: E731
    else:
        finalize = lambda op_id: record_publication(approved, op_id)  # noqa: E731
    worker = HeldWorker(kind, finalize, hold="finalize_end", monkeypatch=monkeypatch)
    worker_session = worker.hold()

    brief_free, operation_free = can_lock(Brief, approved.brief_id), can_lock(Operation, worker.claimed.operation_id)
    worker.release()

    assert_all_committed(worker_session)
    assert (brief_free, operation_free) == (False, True)
    assert Operation.objects.get(id=worker.claimed.operation_id).status == "succeeded"


def test_atomic_continuation__verify_finalize_behind_a_revision_save__counts_the_new_revision(
    approved, editor, monkeypatch
):
    """The verification's finalize waits for the brief while an editor saves revision 2, then commits:
    revision 1 is published and verified, and the brief stays in review (revision 2 waits for its own)."""
    (publish,) = claim_operations(worker_id="worker-0", limit=1, kinds=[PUBLISH])
    complete_operation(
        publish, Success(finalize=lambda: record_publication(approved, publish.operation_id)), started=0.0
    )
    publication = Publication.objects.get()
    (verify,) = claim_operations(worker_id="worker-1", limit=1, kinds=[VERIFY])
    saved, release_edit = threading.Event(), threading.Event()

    def save_and_hold() -> None:
        with transaction.atomic(durable=True):
            check_create_revision(
                approved.brief.public_id,
                base_number=1,
                title="Harbour strike",
                body="Dockers are back.",
                acting_user=editor,
            )
            saved.set()
            assert release_edit.wait(WAIT_SECONDS), "the edit was never released"

    edit = Session("revision save", save_and_hold).begin()
    assert saved.wait(WAIT_SECONDS), f"the edit did not save: {edit.error!r}"
    finalize = Session(
        "verify finalize",
        lambda: complete_operation(verify, Success(finalize=lambda: do_record_verification(publication)), started=0.0),
    ).begin()
    wait_until_blocked_or_done(finalize)
    assert finalize.is_alive(), f"the verification did not wait for the brief: {finalize.error!r}"

    release_edit.set()

    assert_all_committed(edit, finalize)
    brief = Brief.objects.get(pk=approved.brief_id)
    assert (brief.published_revision_number, brief.status) == (1, Brief.Status.IN_REVIEW)
    assert Publication.objects.get().verified_at is not None
