"""Exactly-once publishing end to end: approval → publish operation → the real reference target
(in a thread, real HTTP) → publication → read-back verification. Test names say which
invariant of docs/invariants.md they guard.

Every test asserts on Galley's tables and on the target's ledger (its record of first
applications): "applied exactly once" is a fact about the target, not about Galley's rows.
Anything that drains runs handlers on the worker pool's own connections, so those tests use
`transaction=True` (the database clock is then the real one).
"""

from __future__ import annotations

import datetime
import sqlite3
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from approvals.actions import check_decide_revision
from approvals.errors import DecisionAlreadyMade
from approvals.models import Approval
from galley.reference_target import Faults, ReferenceTarget
from publishing.actions import publications
from publishing.actions.revisions import do_create_revision
from publishing.clients import target as target_client
from publishing.clients.target import TargetClient
from publishing.hashing import payload_hash
from publishing.identities import PUBLISH, VERIFY, publish_key, verify_key
from publishing.models import Brief, Publication, Revision
from publishing.selectors.briefs import access_brief
from publishing.selectors.review import get_revision_page
from tests.late_pages import serve_pages_late
from tests.reference_target import TOKEN
from workers.actions.claims import claim_operations
from workers.actions.enqueue import enqueue_operation
from workers.actions.operator import do_retry_operation_now
from workers.attempts import run_operation
from workers.drain import drain
from workers.models import Attempt, AuditEvent, ChannelGate, Conflict, Dependency, Operation

OTHER_PAYLOAD = {"title": "Harbour strike", "body": "Not what anyone approved."}

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]


# --- fixtures and helpers ------------------------------------------------------------------------


def approve(revision: Revision, *, by: Any) -> Approval:
    """What the approval view does: one durable transaction around the action."""
    with transaction.atomic(durable=True):
        approval, _created = check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=by,
        )
    return approval


def run_worker(*, worker_id: str = "w-test", kinds: tuple[str, ...] = (PUBLISH, VERIFY), idle_wait: float = 0.5):
    """One drain of publishing's operations (other kinds, e.g. a brief's summary steps, stay put)."""
    return drain(worker_id=worker_id, kinds=list(kinds), time_budget=30, idle_wait=idle_wait)


def publish_op(revision: Revision) -> Operation:
    return Operation.objects.get(key=publish_key(revision.brief.public_id, revision.number))


def verify_op(revision: Revision) -> Operation:
    return Operation.objects.get(key=verify_key(revision.brief.public_id, revision.number))


def attempts_of(operation: Operation) -> list[Attempt]:
    return list(Attempt.objects.filter(operation=operation).order_by("number"))


def applied(target: ReferenceTarget) -> list[tuple[str, int, str]]:
    """The target's ledger as (operation key, revision, payload hash), in order of application."""
    return [(row["operation_key"], row["revision"], row["payload_hash"]) for row in target.ledger()]


def application_of(revision: Revision) -> tuple[str, int, str]:
    return (publish_key(revision.brief.public_id, revision.number), revision.number, revision.payload_hash)


def fresh(brief: Brief) -> Brief:
    return Brief.objects.get(pk=brief.pk)


def retry_delay(operation: Operation) -> float:
    """The delay the retry policy chose: next_attempt_at minus the moment the retry was scheduled (the
    operation's updated_at, stamped by the same statement on the database clock), so the value does not
    depend on how long a loaded machine took between the failure and this look."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT extract(epoch FROM next_attempt_at - updated_at) FROM {Operation._meta.db_table} WHERE id = %s",
            [operation.id],
        )
        return float(cursor.fetchone()[0])


def make_due(operation: Operation) -> None:
    """As if the time had come: the operation is due, and a pause its channel's Retry-After set has ended."""
    Operation.objects.filter(id=operation.id).update(next_attempt_at=timezone.now() - datetime.timedelta(hours=1))
    ChannelGate.objects.filter(channel=operation.channel).update(paused_until=None)


def expire_lease(operation: Operation) -> None:
    Operation.objects.filter(id=operation.id).update(lease_expires_at=timezone.now() - datetime.timedelta(hours=1))


def seed_target(target: ReferenceTarget, *, key: str, brief_id: str, revision: int, payload: dict[str, Any]) -> None:
    """Put a publication into the target directly, as another writer would."""
    with TargetClient(base_url=target.url, token=TOKEN, timeout=5) as client:
        client.publish(
            operation_key=key, brief_id=brief_id, revision=revision, payload_hash=payload_hash(payload), payload=payload
        )


def assert_published(brief: Brief, revision: Revision) -> None:
    brief = fresh(brief)
    assert (brief.published_revision_number, brief.status) == (revision.number, Brief.Status.PUBLISHED)
    publication = Publication.objects.get(revision=revision)
    assert publication.verified_at is not None
    assert publication.payload_hash == revision.payload_hash


def assert_not_published(brief: Brief) -> None:
    brief = fresh(brief)
    assert brief.published_revision_number is None
    assert brief.status != Brief.Status.PUBLISHED
    assert not Publication.objects.filter(brief=brief, verified_at__isnull=False).exists()
    assert not AuditEvent.objects.filter(event_type="publication.verified").exists()


# --- the happy path (docs/invariants.md#i5 and #i10) ------------------------------------------------


def test_done_means_observed__approve_then_drain__applied_once_verified_and_published(target, brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    outcomes = run_worker()

    # The target answers at once: the publish's own attempt reads back and sees the page.
    assert outcomes == {"succeeded": 1}
    assert applied(target) == [application_of(revision)]
    publish = publish_op(revision)
    assert (publish.kind, publish.status, publish.payload_hash) == (PUBLISH, "succeeded", revision.payload_hash)
    assert publish.result["first_application"] is True
    assert publish.result["verified_inline"] is True
    publication = Publication.objects.get()
    assert publication.operation_key == publish.key
    assert publication.permalink.startswith(f"{target.url}/articles/")
    assert publication.permalink == publish.result["permalink"]
    assert_published(brief, revision)
    recorded = AuditEvent.objects.get(event_type="publication.recorded")
    assert recorded.subject_id == f"{brief.public_id}/revision-1"
    assert recorded.new_state["payload_hash"] == revision.payload_hash
    verified = AuditEvent.objects.get(event_type="publication.verified")
    assert (verified.subject_id, verified.new_state["published_revision"]) == (brief.public_id, 1)
    assert verified.new_state["status"] == Brief.Status.PUBLISHED
    # One attempt, not ambiguous.
    assert [(a.number, a.outcome, a.ambiguous) for a in attempts_of(publish)] == [(1, "succeeded", False)]


def test_operation_identity__two_approvers_same_revision__one_operation_one_application(
    target, brief, revise, approver, approver2
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    approve(revision, by=approver2)

    run_worker()

    assert Approval.objects.filter(revision=revision, decision=Approval.Decision.APPROVED).count() == 2
    assert Operation.objects.filter(kind=PUBLISH).count() == 1
    assert publish_op(revision).attempts == 1
    assert applied(target) == [application_of(revision)]
    assert Publication.objects.count() == 1
    assert_published(brief, revision)


# --- docs/invariants.md#i5: a publication commits with its verification, or its verification intent ---


def assert_every_publication_verified_or_continued() -> None:
    """Invariant 5 over what committed: each publication is verified, or its verify operation exists."""
    for publication in Publication.objects.select_related("revision", "brief", "channel"):
        continued = Operation.objects.filter(
            key=verify_key(publication.brief.public_id, publication.revision.number, publication.channel.slug)
        ).exists()
        assert publication.verified_at is not None or continued, publication.operation_key


def drain_with_the_finalize_failing_once(monkeypatch, name: str, revision: Revision) -> Operation:
    """Drain with publishing.actions.publications.<name> raising once in the publish's finalize, as when
    the database goes away mid-commit: the publish waits to retry, with no publication and no verify
    operation committed. Returns the publish operation."""
    real = getattr(publications, name)
    failures = [RuntimeError("the database went away mid-commit")]

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(publications, name, failing_once)
    assert run_worker() == {"retry": 1}
    publish = publish_op(revision)
    assert publish.status == "retry_wait"
    assert "finalize failed: RuntimeError" in publish.last_error_message
    assert not Publication.objects.exists()
    assert not Operation.objects.filter(kind=VERIFY).exists()
    return publish


def test_invariant_5__target_answers_at_once__verified_in_the_publish_finalize_no_verify_operation(
    target, brief, revise, approver
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}

    # The publication, its verification and the brief's "published" committed with the publish's success.
    publish = publish_op(revision)
    assert publish.result["verified_inline"] is True
    assert not Operation.objects.filter(kind=VERIFY).exists()
    assert not Dependency.objects.exists()
    assert_published(brief, revision)
    assert AuditEvent.objects.filter(event_type="publication.recorded").count() == 1
    assert AuditEvent.objects.filter(event_type="publication.verified").count() == 1
    assert_every_publication_verified_or_continued()


def test_invariant_5__verification_fails_in_the_publish_finalize__publication_rolled_back_with_it(
    target, brief, revise, approver, settings, monkeypatch
):
    """The inline path never commits a publication without its verification: a verification that fails
    in the finalize takes the publication and the success with it; the retry adopts and verifies."""
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 60
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    publish = drain_with_the_finalize_failing_once(monkeypatch, "do_record_verification", revision)

    assert not AuditEvent.objects.filter(event_type__startswith="publication.").exists()
    assert_not_published(brief)

    make_due(publish)
    assert run_worker() == {"succeeded": 1}
    publish.refresh_from_db()
    assert (publish.result["first_application"], publish.result["verified_inline"]) == (False, True)
    assert applied(target) == [application_of(revision)]
    assert not Operation.objects.filter(kind=VERIFY).exists()
    assert_published(brief, revision)
    assert_every_publication_verified_or_continued()


def test_invariant_5__page_not_there_yet__publication_and_verify_intent_in_one_commit(target, brief, revise, approver):
    serve_pages_late(target)  # a CMS's cache: the permalink answers 404 at first
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}

    publication = Publication.objects.get()
    assert publication.verified_at is None
    assert publish_op(revision).result["verified_inline"] is False
    verify = verify_op(revision)
    assert verify.status == "pending"
    assert verify.arguments == {"revision": 1, "publish_key": publish_op(revision).key}
    assert Dependency.objects.filter(
        operation=verify, prerequisite=publish_op(revision), requires=Dependency.Requires.SUCCESS
    ).exists()
    assert fresh(brief).published_revision_number is None  # sent is not done (docs/invariants.md#i10)
    assert_every_publication_verified_or_continued()

    assert run_worker(kinds=(VERIFY,)) == {"succeeded": 1}
    assert_published(brief, revision)


def test_invariant_5__read_back_not_matching_in_the_publish_attempt__verify_operation_decides(
    target, brief, revise, approver, monkeypatch
):
    """The record changed at the target before the publish's own read-back: no verification inline; the
    verify operation reads back too and ends in conflict for an operator, as a verification does."""
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    real_read_back = TargetClient.read_back

    def changed_behind_galleys_back(self: TargetClient, publication_id: str) -> target_client.Receipt:
        with sqlite3.connect(target.store.path) as db:
            db.execute("DROP TRIGGER IF EXISTS publications_immutable")
            db.execute(
                "UPDATE publications SET payload_hash = ? WHERE id = ?", (payload_hash(OTHER_PAYLOAD), publication_id)
            )
        db.close()
        return real_read_back(self, publication_id)

    monkeypatch.setattr(TargetClient, "read_back", changed_behind_galleys_back)

    assert run_worker() == {"succeeded": 1, "conflict": 1}

    assert publish_op(revision).result["verified_inline"] is False
    verify = verify_op(revision)
    assert (verify.status, Conflict.objects.get(operation=verify).kind) == ("conflict", "verification_mismatch")
    assert Publication.objects.get().verified_at is None
    assert_not_published(brief)
    assert_every_publication_verified_or_continued()


def test_atomic_continuation__finalize_fails__publication_rolled_back_and_retry_replays_once(
    target, brief, revise, approver, settings, monkeypatch
):
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 60
    serve_pages_late(target, times=2)  # not there for either publish attempt: the verify operation's path
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    # The success, the publication and the verification intent rolled back together.
    publish = drain_with_the_finalize_failing_once(monkeypatch, "enqueue_operation", revision)
    assert applied(target) == [application_of(revision)]

    make_due(publish)
    assert run_worker() == {"succeeded": 2}

    publish.refresh_from_db()
    assert publish.result["first_application"] is False  # the target replayed (200), applied nothing
    assert applied(target) == [application_of(revision)]
    assert [(a.outcome, a.error_kind) for a in attempts_of(publish)] == [("retry", "unexpected"), ("succeeded", "")]
    assert_published(brief, revision)


# --- docs/invariants.md#i3: revision-bound approval -----------------------------------------------------


def test_revision_bound_approval__publish_operation_without_approval__dead_and_target_sees_nothing(
    target, brief, revise
):
    revision = revise(brief, "Dockers walked out at dawn.")
    with transaction.atomic(durable=True):
        enqueue_operation(
            key=publish_key(brief.public_id, 1),
            kind=PUBLISH,
            payload_hash=revision.payload_hash,
            subject_type="brief",
            subject_id=brief.public_id,
            subject_version=1,
            arguments={"revision": 1},
        )

    assert run_worker() == {"dead": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.attempts, operation.last_error_kind) == ("dead", 1, "invalid")
    assert operation.last_error_message == (
        f"no approval of revision 1 with hash {revision.payload_hash[:12]}… exists; refusing to publish"
    )
    assert applied(target) == []
    assert not Publication.objects.exists()
    assert_not_published(brief)


def test_revision_bound_approval__publish_operation_hash_not_the_revisions__dead_and_target_sees_nothing(
    target, brief, revise, approver
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    forged_hash = payload_hash(OTHER_PAYLOAD)
    with transaction.atomic(durable=True):
        forged = enqueue_operation(
            key=f"{publish_key(brief.public_id, 1)}:replayed",
            kind=PUBLISH,
            payload_hash=forged_hash,
            subject_type="brief",
            subject_id=brief.public_id,
            subject_version=1,
            arguments={"revision": 1},
        ).operation

    run_worker()

    forged.refresh_from_db()
    assert (forged.status, forged.attempts, forged.last_error_kind) == ("dead", 1, "invalid")
    assert forged.last_error_message == f"{forged.key} carries hash {forged_hash[:12]}…, revision 1 has another"
    # Only the approved operation reached the target, with the approved hash.
    assert applied(target) == [application_of(revision)]
    assert_published(brief, revision)


# --- docs/invariants.md#i4: no regression --------------------------------------------------------------


def test_no_regression__newer_revision_approved_before_any_drain__older_superseded_never_sent(
    target, brief, revise, approver
):
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)

    superseded = publish_op(first)
    assert (superseded.status, superseded.attempts) == ("superseded", 0)
    assert superseded.last_error_message == "revision 2 was approved before revision 1 was sent"
    assert not Dependency.objects.filter(operation=publish_op(second)).exists()

    run_worker()

    assert applied(target) == [application_of(second)]
    assert not Attempt.objects.filter(operation=superseded).exists()
    assert not Publication.objects.filter(revision=first).exists()
    assert_published(brief, second)


def test_no_regression__older_publish_in_flight__newer_waits_for_it_to_finish(target, brief, revise, approver):
    serve_pages_late(target)  # each publication verified by its verify operation, the older one's held back
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    (in_flight,) = claim_operations(worker_id="w-slow", limit=1, kinds=[PUBLISH])
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)

    edge = Dependency.objects.get(operation=publish_op(second))
    assert (edge.prerequisite_id, edge.requires) == (publish_op(first).id, Dependency.Requires.COMPLETION)
    assert publish_op(first).status == "running"
    assert claim_operations(worker_id="w-other", limit=10, kinds=[PUBLISH, VERIFY]) == []  # second is due but blocked

    assert run_operation(in_flight) == "succeeded"
    # The older publication's verification lags behind the newer one's.
    Operation.objects.filter(id=verify_op(first).id).update(
        next_attempt_at=timezone.now() + datetime.timedelta(hours=1)
    )
    assert run_worker() == {"succeeded": 2}
    assert applied(target) == [application_of(first), application_of(second)]
    assert_published(brief, second)

    make_due(verify_op(first))
    assert run_worker() == {"succeeded": 1}

    assert Publication.objects.get(revision=first).verified_at is not None
    assert_published(brief, second)  # verifying the older one never moves the brief back
    assert AuditEvent.objects.filter(event_type="publication.verified").count() == 1


def test_fencing__worker_that_lost_its_lease__sends_nothing_and_writes_nothing(target, brief, revise, approver):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    (stale,) = claim_operations(worker_id="w-partitioned", limit=1, kinds=[PUBLISH])
    expire_lease(publish_op(revision))
    (live,) = claim_operations(worker_id="w-live", limit=1, kinds=[PUBLISH])
    assert live.fencing_token == stale.fencing_token + 1

    assert run_operation(stale) == "lease_lost"

    assert applied(target) == []
    operation = publish_op(revision)
    assert (operation.status, operation.lease_owner, operation.fencing_token) == (
        "running",
        "w-live",
        live.fencing_token,
    )
    assert not Publication.objects.exists()
    assert run_operation(live) == "succeeded"
    assert applied(target) == [application_of(revision)]


def test_no_regression__target_fence_off__dead_letter_closed_when_newer_published_cannot_be_revived(
    start_target, brief, revise, approver, operator, settings
):
    target = start_target(Faults(fence_off=True))
    first = revise(brief, "Dockers walked out at dawn.")
    settings.GALLEY_TARGET_TOKEN = "revoked-token"
    approve(first, by=approver)
    assert run_worker() == {"dead": 1}  # auth failure: finished, so it orders nothing
    settings.GALLEY_TARGET_TOKEN = TOKEN
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)
    assert not Dependency.objects.filter(operation=publish_op(second)).exists()
    run_worker()
    assert_published(brief, second)

    # Publishing revision 2 ended the old dead letter: an operator can no longer revive it.
    old = publish_op(first)
    assert (old.status, old.last_error_message) == ("cancelled", "revision 2 was published instead")
    assert AuditEvent.objects.filter(event_type="operation.cancelled", subject_id=old.key, actor=None).count() == 1
    with transaction.atomic(durable=True):
        assert not do_retry_operation_now(old, acting_user=operator)
    assert run_worker() == {}
    assert applied(target) == [application_of(second)]
    assert not Publication.objects.filter(revision=first).exists()
    assert_published(brief, second)


def test_no_regression__target_fence_off__older_revision_revived_after_newer_attempted__never_sent(
    start_target, brief, revise, approver, operator, settings
):
    """The newer publish timed out (it may have been applied) and waits to retry; an operator
    revives the older dead letter: Galley must not send it, even to a target without a fence."""
    target = start_target(Faults(fence_off=True))
    first = revise(brief, "Dockers walked out at dawn.")
    settings.GALLEY_TARGET_TOKEN = "revoked-token"
    approve(first, by=approver)
    assert run_worker() == {"dead": 1}
    settings.GALLEY_TARGET_TOKEN = TOKEN
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)
    target.faults = Faults(fence_off=True, rate_hang=1.0, hang_seconds=5)
    settings.GALLEY_TARGET_TIMEOUT_SECONDS = 2.0  # ample for the commit on a loaded CPU; the hang is longer
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 600  # it waits to retry
    assert run_worker(idle_wait=0) == {"retry": 1}  # applied at the target, answer lost
    assert publish_op(second).status == "retry_wait"

    with transaction.atomic(durable=True):
        assert do_retry_operation_now(publish_op(first), acting_user=operator)
    target.faults = Faults(fence_off=True)
    assert run_worker(kinds=(PUBLISH,), idle_wait=0) == {"superseded": 1}

    old = publish_op(first)
    assert old.status == "superseded"
    assert old.last_error_message == f"revision 2 of {brief.public_id} may already be at the target"
    assert [entry[1] for entry in applied(target)] == [2]


def test_no_regression__partitioned_worker_wakes_after_newer_published__sends_and_writes_nothing(
    start_target, brief, revise, approver
):
    target = start_target(Faults(fence_off=True))
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    (partitioned,) = claim_operations(worker_id="w-partitioned", limit=1, kinds=[PUBLISH])
    expire_lease(publish_op(first))  # the worker is cut off; its lease runs out
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)

    run_worker(worker_id="w-live")  # takes the first over (ambiguous: looks up, then sends), then the second
    assert applied(target) == [application_of(first), application_of(second)]
    assert_published(brief, second)
    before = publish_op(first)

    assert run_operation(partitioned) == "lease_lost"

    assert applied(target) == [application_of(first), application_of(second)]
    after = publish_op(first)
    assert (after.status, after.fencing_token, after.result) == ("succeeded", before.fencing_token, before.result)
    stale_attempt = Attempt.objects.get(id=partitioned.attempt_id)
    assert (stale_attempt.outcome, stale_attempt.worker_id) == ("lease_lost", "w-partitioned")
    assert_published(brief, second)


def test_no_regression__target_fence_stale_revision_409__conflict_for_an_operator(target, brief, revise, approver):
    """The target already holds a newer revision that Galley knows nothing of (another writer):
    only the target's fence can refuse, and since Galley cannot account for what the target holds,
    an operator decides (docs/operations.md#settling-problems) — the brief never sits "approved" with nobody told."""
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    elsewhere = f"elsewhere:{brief.public_id}:revision-2"
    seed_target(target, key=elsewhere, brief_id=brief.public_id, revision=2, payload=OTHER_PAYLOAD)

    assert run_worker() == {"conflict": 1}

    old = publish_op(first)
    assert (old.status, old.needs_operator) == ("conflict", True)
    assert old.last_error_message == "the target already holds revision 2 of this brief"
    assert (attempts_of(old)[-1].outcome, attempts_of(old)[-1].http_status) == ("conflict", 409)
    conflict = Conflict.objects.get(operation=old)
    # Nothing is held under Galley's key for revision 2: the comparison shows only the revision.
    assert (conflict.kind, conflict.target_state) == ("stale_revision", {"revision": 2})
    assert AuditEvent.objects.filter(event_type="operation.stale_revision", subject_id=old.key).count() == 1
    assert applied(target) == [(elsewhere, 2, payload_hash(OTHER_PAYLOAD))]
    assert not Publication.objects.exists()
    assert_not_published(brief)


# --- docs/invariants.md#i2: key conflict is loud --------------------------------------------------------


def test_key_conflict_is_loud__target_holds_key_with_other_hash__conflict_never_success(
    target, brief, revise, approver
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    key = publish_key(brief.public_id, 1)
    seed_target(target, key=key, brief_id=brief.public_id, revision=1, payload=OTHER_PAYLOAD)

    assert run_worker() == {"conflict": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.needs_operator, operation.result) == ("conflict", True, None)
    conflict = Conflict.objects.get()
    assert (conflict.operation_id, conflict.source) == (operation.id, Conflict.Source.TARGET)
    assert conflict.existing_payload_hash == revision.payload_hash
    assert conflict.conflicting_payload_hash == payload_hash(OTHER_PAYLOAD)  # what the target holds
    assert conflict.resolved_at is None
    (attempt,) = attempts_of(operation)
    assert (attempt.outcome, attempt.error_kind, attempt.http_status) == ("conflict", "key_conflict", 422)
    assert AuditEvent.objects.filter(event_type="operation.key_conflict", subject_id=key).count() == 1
    assert not Publication.objects.exists()
    assert not Operation.objects.filter(kind=VERIFY).exists()
    assert applied(target) == [(key, 1, payload_hash(OTHER_PAYLOAD))]
    assert_not_published(brief)


def test_key_conflict_is_loud__ambiguous_lookup_finds_other_hash__conflict_records_what_target_holds(
    target, brief, revise, approver
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    claim_operations(worker_id="w-dead", limit=1, kinds=[PUBLISH])
    expire_lease(publish_op(revision))
    key = publish_key(brief.public_id, 1)
    seed_target(target, key=key, brief_id=brief.public_id, revision=1, payload=OTHER_PAYLOAD)

    assert run_worker() == {"conflict": 1}

    operation = publish_op(revision)
    assert operation.status == "conflict"
    assert attempts_of(operation)[-1].ambiguous
    conflict = Conflict.objects.get()
    assert conflict.source == Conflict.Source.TARGET
    assert (conflict.existing_payload_hash, conflict.conflicting_payload_hash) == (
        revision.payload_hash,
        payload_hash(OTHER_PAYLOAD),
    )
    assert not Publication.objects.exists()
    assert applied(target) == [(key, 1, payload_hash(OTHER_PAYLOAD))]


# --- docs/invariants.md#i9: retry by failure kind, against the target's fault injection ----------------


@pytest.mark.parametrize(("fault", "status"), [("rate_429", 429), ("rate_503", 503)])
def test_retry_by_failure_kind__throttled__waits_retry_after_then_applies_once(
    start_target, brief, revise, approver, fault, status
):
    target = start_target(Faults(**{fault: 1.0}, retry_after=30))
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker() == {"retry": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.last_error_kind, operation.needs_operator) == ("retry_wait", "throttled", False)
    assert 30 <= retry_delay(operation) <= 30.5  # Retry-After honoured: no sooner
    (attempt,) = attempts_of(operation)
    assert (attempt.outcome, attempt.error_kind, attempt.http_status) == ("retry", "throttled", status)
    assert "retry after 30s" in attempt.error_message
    assert applied(target) == []
    # The channel is paused for every worker until then (docs/operations.md#rate-limits-and-pauses).
    assert ChannelGate.objects.get(channel=operation.channel).paused_until >= operation.next_attempt_at

    target.faults = Faults()  # the target recovers
    make_due(operation)
    run_worker()

    assert applied(target) == [application_of(revision)]
    assert [a.ambiguous for a in attempts_of(operation)] == [False, False]  # nothing was applied before
    assert_published(brief, revision)


def test_retry_by_failure_kind__throttling_never_uses_the_attempt_budget__published_never_dead(
    start_target, brief, revise, approver, settings
):
    settings.GALLEY_MAX_ATTEMPTS = 2
    target = start_target()
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    operation = publish_op(revision)

    # Three times the attempt budget of "wait" answers: 429 and 503 with Retry-After, in turn.
    for answer in range(6):
        target.faults = Faults(**{"rate_429" if answer % 2 else "rate_503": 1.0}, retry_after=30)
        make_due(operation)
        assert run_worker() == {"retry": 1}
    operation.refresh_from_db()
    assert (operation.status, operation.needs_operator) == ("retry_wait", False)
    assert (operation.attempts, operation.waits, operation.max_attempts) == (6, 6, 2)
    assert applied(target) == []

    target.faults = Faults()  # the target stops asking to wait
    make_due(operation)
    run_worker()

    assert applied(target) == [application_of(revision)]
    assert_published(brief, revision)


def test_retry_by_failure_kind__throttled_past_the_deadline__dead_for_an_operator(
    start_target, brief, revise, approver, settings
):
    settings.GALLEY_OPERATION_DEADLINE_SECONDS = 20
    start_target(Faults(rate_429=1.0, retry_after=30))
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker() == {"dead": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.needs_operator, operation.waits) == ("dead", True, 1)
    assert operation.last_error_message.startswith("deadline ")


def test_retry_by_failure_kind__server_errors_use_the_attempt_budget__dead_for_an_operator(
    start_target, brief, revise, approver, settings
):
    settings.GALLEY_MAX_ATTEMPTS = 2
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 60
    target = start_target(Faults(rate_500=1.0))
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    operation = publish_op(revision)

    make_due(operation)
    assert run_worker() == {"retry": 1}
    make_due(operation)
    assert run_worker() == {"dead": 1}

    operation.refresh_from_db()
    assert (operation.status, operation.needs_operator, operation.attempts, operation.waits) == ("dead", True, 2, 0)
    assert operation.last_error_message.startswith("attempts exhausted (2 of 2)")
    assert applied(target) == []


def test_retry_by_failure_kind__server_error__backoff_with_jitter(start_target, brief, revise, approver, settings):
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 20
    target = start_target(Faults(rate_500=1.0))
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker() == {"retry": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.last_error_kind) == ("retry_wait", "server_error")
    assert 10 <= retry_delay(operation) <= 20  # half of 20 s fixed, half jitter
    (attempt,) = attempts_of(operation)
    assert (attempt.outcome, attempt.error_kind, attempt.http_status) == ("retry", "server_error", 500)
    assert applied(target) == []


def test_retry_by_failure_kind__server_error__attempts_exhausted_dead(start_target, brief, revise, approver, settings):
    settings.GALLEY_MAX_ATTEMPTS = 3
    target = start_target(Faults(rate_500=1.0))
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker(idle_wait=1.0) == {"retry": 2, "dead": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.attempts, operation.needs_operator) == ("dead", 3, True)
    assert operation.last_error_message.startswith("attempts exhausted (3 of 3); last: ")
    assert [(a.outcome, a.http_status) for a in attempts_of(operation)] == [
        ("retry", 500),
        ("retry", 500),
        ("dead", 500),
    ]
    assert applied(target) == []
    assert_not_published(brief)


def test_retry_by_failure_kind__invalid_400__dead_after_one_attempt(target, brief, approver, editor):
    # A payload Galley's edit form would never produce, written through do_create_revision
    # (which trusts its caller), so that the real target answers 400.
    with transaction.atomic(durable=True):
        locked = access_brief(brief.public_id, acting_user=editor, lock=True)
        revision, _ = do_create_revision(
            locked, base_number=0, payload={"title": "Harbour strike", "body": ["not", "text"]}, acting_user=editor
        )
    approve(revision, by=approver)

    assert run_worker() == {"dead": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.attempts, operation.last_error_kind) == ("dead", 1, "invalid")
    assert operation.needs_operator is False
    assert "payload.body must be a string" in operation.last_error_message
    (attempt,) = attempts_of(operation)
    assert (attempt.outcome, attempt.http_status) == ("dead", 400)
    assert applied(target) == []
    assert_not_published(brief)


def without_credentials(url: str) -> TargetClient:
    """A client that sends no Authorization header at all (the target answers 401)."""
    client = TargetClient(base_url=url, token="unused", timeout=5)
    client._auth = {}  # TargetClient always sends its token; this is a misconfigured deployment
    return client


@pytest.mark.parametrize(("credentials", "status"), [("missing", 401), ("revoked", 403)])
def test_retry_by_failure_kind__auth_401_403__dead_needs_operator(
    target, brief, revise, approver, settings, monkeypatch, credentials, status
):
    if credentials == "missing":
        monkeypatch.setattr(target_client, "shared_from_settings", lambda: without_credentials(target.url))
    else:
        settings.GALLEY_TARGET_TOKEN = "revoked-token"
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker() == {"dead": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.attempts, operation.needs_operator) == ("dead", 1, True)
    assert operation.last_error_kind == "auth"
    assert "check GALLEY_TARGET_TOKEN" in operation.last_error_message
    (attempt,) = attempts_of(operation)
    assert (attempt.outcome, attempt.error_kind, attempt.http_status) == ("dead", "auth", status)
    assert applied(target) == []


def test_retry_by_failure_kind__empty_token__dead_needs_operator_after_one_attempt(
    target, brief, revise, approver, settings
):
    settings.GALLEY_TARGET_TOKEN = ""
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    run_worker()

    operation = publish_op(revision)
    assert (operation.status, operation.attempts, operation.last_error_kind) == ("dead", 1, "auth")
    assert applied(target) == []


@pytest.mark.parametrize(
    ("faults", "kind"),
    [
        (Faults(rate_hang=1.0, hang_seconds=10), "timeout"),  # commit, then no answer in time
        (Faults(rate_drop=1.0), "connection"),  # commit, then the connection drops
    ],
    ids=["commit-then-hang", "commit-then-drop"],
)
def test_retry_by_failure_kind__ambiguous_failure__lookup_adopts_exactly_one_application(
    start_target, brief, revise, approver, settings, faults, kind
):
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 60
    target = start_target(faults)
    # The commit comes well within the timeout even on a loaded CPU; the hang (10 s) outlasts it.
    settings.GALLEY_TARGET_TIMEOUT_SECONDS = 3.0
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker() == {"retry": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.last_error_kind) == ("retry_wait", kind)
    assert applied(target) == [application_of(revision)]  # it did apply; Galley cannot know yet
    assert not Publication.objects.exists()

    # From now on every POST fails before the target even looks at the key, so the adoption
    # below can only come from the look-up by key, never from a replayed send.
    target.faults = Faults(rate_500=1.0)
    settings.GALLEY_TARGET_TIMEOUT_SECONDS = 5.0
    make_due(operation)
    assert run_worker() == {"succeeded": 1}  # adopted, then read back and verified in the same attempt

    operation.refresh_from_db()
    assert operation.result["verified_inline"] is True
    first, second = attempts_of(operation)
    assert (first.outcome, first.error_kind, first.http_status) == ("retry", kind, None)
    assert (second.outcome, second.ambiguous) == ("succeeded", True)
    assert first.id != second.id
    assert operation.result["first_application"] is False  # adopted by look-up, not sent again
    assert applied(target) == [application_of(revision)]
    assert_published(brief, revision)


# --- docs/invariants.md#i10: done means observed ---------------------------------------------------------


def test_done_means_observed__target_record_holds_other_hash__verification_conflict_brief_not_published(
    target, brief, revise, approver
):
    serve_pages_late(target)
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    publication = Publication.objects.get()
    # Someone at the target changes the stored record behind Galley's back.
    with sqlite3.connect(target.store.path) as db:
        db.execute("DROP TRIGGER publications_immutable")
        db.execute(
            "UPDATE publications SET payload_hash = ? WHERE id = ?",
            (payload_hash(OTHER_PAYLOAD), publication.external_id),
        )
    db.close()

    assert run_worker(kinds=(VERIFY,)) == {"conflict": 1}

    verify = verify_op(revision)
    assert (verify.status, verify.needs_operator) == ("conflict", True)
    assert verify.last_error_message.startswith(f"read-back of {publication.external_id} shows payload ")
    conflict = Conflict.objects.get(operation=verify)
    assert conflict.kind == "verification_mismatch"
    assert conflict.target_state is not None
    assert (conflict.target_state["id"], conflict.target_state["payload_hash"]) == (
        publication.external_id,
        payload_hash(OTHER_PAYLOAD),
    )
    publication.refresh_from_db()
    assert publication.verified_at is None
    assert fresh(brief).status == Brief.Status.APPROVED
    assert_not_published(brief)


def test_done_means_observed__permalink_shows_another_article__retried_until_it_shows_the_approved_one(
    target, brief, revise, approver, settings, monkeypatch
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    real_fetch = TargetClient.fetch_permalink

    def stale_page(self: TargetClient, url: str) -> str:
        real_fetch(self, url)
        return "Ferry timetable. Winter schedule."  # a cache still serving another article

    monkeypatch.setattr(TargetClient, "fetch_permalink", stale_page)
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 60

    assert run_worker() == {"succeeded": 1, "retry": 1}

    verify = verify_op(revision)
    assert (verify.status, verify.last_error_kind) == ("retry_wait", "server_error")
    assert "the permalink" in verify.last_error_message
    assert Publication.objects.get().verified_at is None
    assert_not_published(brief)

    monkeypatch.setattr(TargetClient, "fetch_permalink", real_fetch)
    make_due(verify)
    assert run_worker() == {"succeeded": 1}
    assert applied(target) == [application_of(revision)]
    assert_published(brief, revision)


def test_done_means_observed__page_shows_newer_published_revision__older_verify_superseded_no_operator(
    target, brief, revise, approver, monkeypatch
):
    """Any target whose page for revision 1 shows revision 2, which Galley published since (one page
    per brief): revision 1's verification is over, not retried into a dead letter."""
    serve_pages_late(target)
    first = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(first, by=approver)
    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    second = revise(brief, "The port is closed.", title="Harbour closed")
    approve(second, by=approver)
    assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    real_fetch = TargetClient.fetch_permalink

    def one_page_per_brief(self: TargetClient, url: str) -> str:
        real_fetch(self, url)
        return "Harbour closed. The port is closed."

    monkeypatch.setattr(TargetClient, "fetch_permalink", one_page_per_brief)

    assert run_worker(kinds=(VERIFY,)) == {"superseded": 1, "succeeded": 1}

    old = verify_op(first)
    assert (old.status, old.needs_operator, old.attempts) == ("superseded", False, 1)
    assert old.last_error_message.startswith(f"the target shows revision 2 of {brief.public_id}, published since")
    assert Publication.objects.get(revision=first).verified_at is None
    assert_published(brief, second)


@pytest.mark.parametrize("decision", [Approval.Decision.APPROVED, Approval.Decision.CHANGES_REQUESTED])
def test_revision_bound_approval__decision_on_a_published_revision__refused_in_plain_words(
    target, brief, revise, approver, approver2, decision
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    run_worker()
    assert_published(brief, revision)
    events = AuditEvent.objects.count()

    refused = pytest.raises(DecisionAlreadyMade, match=r"Revision 1 is already published: there is nothing left")
    with refused, transaction.atomic(durable=True):
        check_decide_revision(
            brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=decision,
            acting_user=approver2,
        )

    assert Approval.objects.filter(revision=revision).count() == 1
    assert AuditEvent.objects.count() == events
    assert_published(brief, revision)
    page = get_revision_page(fresh(brief), revision, viewer=approver2)
    assert page.may_decide is False
