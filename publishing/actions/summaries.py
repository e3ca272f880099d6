"""Summary runs: starting one, finishing each step (canonical artifact + continuation), completing
the run with the first revision or a suggestion.

A step's artifact has one identity and one canonical value (docs/invariants.md#i6): the write inserts, or
reads what already won, and the continuation is built from the stored value, never the local
one. The artifact, the next step's operation (or the first revision) and the step's success
commit together in the step's fenced finalize transaction (docs/invariants.md#i5).
"""

from __future__ import annotations

import json

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from publishing.actions.revisions import do_create_revision
from publishing.identities import SUMMARY_STEP, step_identity, step_key, summary_run_key_prefix
from publishing.models import Brief, StepArtifact, SummaryRun
from publishing.selectors.summaries import get_canonical_artifacts
from publishing.sql import STORE_ARTIFACT_SQL
from publishing.summary_rules import NEXT_STEP, STEPS, Proposal, first_revision_payload
from workers.actions.enqueue import enqueue_operation, supersede_waiting_operation
from workers.audit import record_audit_event
from workers.crashpoints import crash_point
from workers.models import Dependency, Operation

PIPELINE_USERNAME = "galley-ai"


def _pipeline_user() -> User:
    """The author of AI-written revisions: a user that cannot sign in."""
    user, created = User.objects.get_or_create(username=PIPELINE_USERNAME, defaults={"is_active": False})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


@transaction.atomic(savepoint=False)
def do_start_summary_run(brief: Brief) -> SummaryRun | None:
    """Start a run over the brief's current source material, superseding older runs.

    The caller holds the brief's row lock (or has just created the brief). Writes the run and
    its first step's operation in the caller's transaction. No source material, no run.
    """
    if not brief.source_material.strip():
        return None
    for old in SummaryRun.objects.filter(brief=brief, status=SummaryRun.Status.RUNNING):
        old.status = SummaryRun.Status.SUPERSEDED
        old.finished_at = timezone.now()
        old.save(update_fields=["status", "finished_at"])
        for operation in Operation.objects.unfinished().filter(
            kind=SUMMARY_STEP, key__startswith=summary_run_key_prefix(brief.public_id, old.number)
        ):
            supersede_waiting_operation(operation, reason=f"the source material changed after run {old.number}")
    last = SummaryRun.objects.filter(brief=brief).order_by("-number").values_list("number", flat=True).first()
    run = SummaryRun.objects.create(brief=brief, number=(last or 0) + 1, source_hash=brief.source_hash)
    _enqueue_step(run, STEPS[0], after=None)
    record_audit_event(
        acting_user=None,
        event_type="summary.started",
        subject_type="brief",
        subject_id=brief.public_id,
        new_state={"run": run.number, "source_hash": run.source_hash},
    )
    return run


def _enqueue_step(run: SummaryRun, step: str, *, after: Operation | None) -> Operation:
    return enqueue_operation(
        key=step_key(run.brief.public_id, run.number, step),
        kind=SUMMARY_STEP,
        payload_hash=run.source_hash,
        subject_type="brief",
        subject_id=run.brief.public_id,
        arguments={"run": run.number, "step": step},
        after=[(after, Dependency.Requires.SUCCESS)] if after is not None else (),
    ).operation


@transaction.atomic(savepoint=False)
def do_finish_summary_step(
    run: SummaryRun, step: str, *, proposal: Proposal | None, step_operation_id: int
) -> StepArtifact:
    """Store (or read) the step's canonical artifact, then write the continuation from the stored
    value: the next step's operation, or, after the quality gate, the run's completion.

    Runs inside the step operation's fenced finalize transaction. `proposal` None means the
    artifact was already stored by an earlier attempt.
    """
    artifact = (
        do_store_artifact(run, step, proposal)
        if proposal is not None
        else StepArtifact.objects.get(identity=step_identity(run.brief.public_id, run.source_hash, step))
    )
    crash_point("after_artifact_insert", kind=SUMMARY_STEP)
    if step in NEXT_STEP:
        _enqueue_step(run, NEXT_STEP[step], after=Operation.objects.get(id=step_operation_id))
    else:
        do_complete_summary_run(run)
    crash_point("after_next_step_insert", kind=SUMMARY_STEP)
    return artifact


def do_store_artifact(run: SummaryRun, step: str, proposal: Proposal) -> StepArtifact:
    """Canonical-first: insert the proposal, or, when the identity is taken, return what won."""
    identity = step_identity(run.brief.public_id, run.source_hash, step)
    with connection.cursor() as cursor:
        cursor.execute(
            STORE_ARTIFACT_SQL,
            [
                run.brief_id,
                run.source_hash,
                step,
                identity,
                json.dumps(proposal.content),
                proposal.provider,
                proposal.model,
                json.dumps(proposal.usage),
            ],
        )
    return StepArtifact.objects.get(identity=identity)


@transaction.atomic(savepoint=False)
def do_complete_summary_run(run: SummaryRun) -> None:
    """Complete a running run from its canonical artifacts: revision 1 when the brief has no
    revision yet, otherwise a suggestion the editor may take (never over an editor's revision).
    Revision 1 keeps the brief's title, which the editor chose; the AI headline is only offered
    (publishing.actions.revisions.check_use_suggestion). A run no longer running (superseded,
    already completed) writes nothing."""
    brief = Brief.objects.select_for_update(of=("self",)).get(id=run.brief_id)
    locked_run = SummaryRun.objects.select_for_update(of=("self",)).get(id=run.id)
    if locked_run.status != SummaryRun.Status.RUNNING:
        return
    if brief.revisions.exists():
        locked_run.suggestion = True
    else:
        payload = first_revision_payload(get_canonical_artifacts(locked_run), title=brief.title)
        revision, _created = do_create_revision(brief, base_number=0, payload=payload, acting_user=_pipeline_user())
        locked_run.revision = revision
    locked_run.status = SummaryRun.Status.COMPLETED
    locked_run.finished_at = timezone.now()
    locked_run.save(update_fields=["status", "finished_at", "revision", "suggestion"])
    record_audit_event(
        acting_user=None,
        event_type="summary.completed",
        subject_type="brief",
        subject_id=brief.public_id,
        old_state={"run": locked_run.number, "status": SummaryRun.Status.RUNNING},
        new_state={
            "run": locked_run.number,
            "status": locked_run.status,
            "revision": locked_run.revision.number if locked_run.revision else None,
            "suggestion": locked_run.suggestion,
        },
    )
