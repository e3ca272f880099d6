"""The summary pipeline: outline → draft → headline → quality gate → the first revision.

Each step is an operation `summary:<brief>:run-<n>:<step>` of the durable machinery, with the
previous step's operation as a durable prerequisite (invariant 7). A step's artifact has one
identity, `<brief>/summary/<source-hash>/<step>`, and one canonical value (invariant 6): a step
whose artifact is already stored makes no provider call, and the write inserts or reads what
already won, the continuation being built from the stored value, never the local one. The
artifact, the next step's operation (or the first revision) and the step's success commit in
one transaction, the fenced finalize (invariant 5).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from publishing import ai_providers
from publishing.models import Brief, StepArtifact, SummaryRun, SummaryStep
from workers.actions import enqueue_operation, supersede_waiting_operation
from workers.audit import record_audit_event
from workers.crashpoints import crash_point
from workers.errors import FailureKind, OperationFailed, Superseded
from workers.models import Dependency, Operation
from workers.registry import Done, Job

logger = logging.getLogger(__name__)

SUMMARY_STEP = "summary_step"
STEPS = [SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE, SummaryStep.QUALITY_GATE]
NEXT_STEP = dict(itertools.pairwise(STEPS))
PIPELINE_USERNAME = "galley-ai"

# What each AI step is asked, and which earlier artifact (or the source) it works from.
INSTRUCTIONS = {
    SummaryStep.OUTLINE: ("You write the outline: the key points of the material, one per line.", None),
    SummaryStep.DRAFT: ("You write the draft: a short news summary from the outline.", SummaryStep.OUTLINE),
    SummaryStep.HEADLINE: ("You write the headline: one line, no trailing period.", SummaryStep.DRAFT),
}

DRAFT_MIN_CHARS = 20
DRAFT_MAX_CHARS = 20_000
HEADLINE_MAX_CHARS = 200
LEFTOVER_PROMPT = re.compile(
    r"as an ai|language model|you write the|summari[sz]e the|here is (a|the) |\{\{|\}\}|<\|"
    r"|\[insert|lorem ipsum",
    re.IGNORECASE,
)

T = TypeVar("T")


def step_identity(public_id: str, source_hash: str, step: str) -> str:
    return f"{public_id}/summary/{source_hash}/{step}"


def step_key(public_id: str, run_number: int, step: str) -> str:
    return f"summary:{public_id}:run-{run_number}:{step}"


def pipeline_user() -> Any:
    """The author of AI-written revisions: a user that cannot sign in."""
    user, created = get_user_model().objects.get_or_create(username=PIPELINE_USERNAME, defaults={"is_active": False})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


# ---------------------------------------------------------------------------------------------
# Starting runs (called by the editorial actions, in their transaction)


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
            kind=SUMMARY_STEP, key__startswith=f"summary:{brief.public_id}:run-{old.number}:"
        ):
            supersede_waiting_operation(operation, reason=f"the source material changed after run {old.number}")
    last = SummaryRun.objects.filter(brief=brief).order_by("-number").values_list("number", flat=True).first()
    run = SummaryRun.objects.create(brief=brief, number=(last or 0) + 1, source_hash=brief.source_hash)
    _enqueue_step(run, SummaryStep.OUTLINE, after=None)
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


# ---------------------------------------------------------------------------------------------
# The step handler (a worker, no transaction open)


@dataclass(frozen=True)
class Proposal:
    """What this attempt computed; the stored artifact may differ and then wins."""

    content: dict[str, Any]
    provider: str
    model: str
    usage: dict[str, int] = field(default_factory=dict)


def handle_summary_step(job: Job) -> Done:
    step = SummaryStep(job.arguments["step"])
    run = SummaryRun.objects.select_related("brief").get(brief__public_id=job.subject_id, number=job.arguments["run"])
    if run.status == SummaryRun.Status.SUPERSEDED or run.brief.source_hash != run.source_hash:
        raise Superseded(f"the source material changed after run {run.number} began")
    identity = step_identity(job.subject_id, run.source_hash, step)
    if StepArtifact.objects.filter(identity=identity).exists():
        # An accepted step is never regenerated: no provider call, the stored artifact goes on.
        return Done(result={"artifact": identity, "reused": True}, commit=lambda: continue_after(job, run, step, None))
    inputs = canonical_artifacts(run)
    if step == SummaryStep.QUALITY_GATE:
        problems = quality_problems(inputs)
        if problems:
            raise OperationFailed(FailureKind.QUALITY_GATE, "quality gate: " + "; ".join(problems))
        proposal = Proposal({"passed": True}, provider="galley", model="quality-gate-1")
    else:
        proposal = _ask_provider(job, run, step, inputs)
    crash_point("after_provider_response", kind=SUMMARY_STEP)
    return Done(
        result={"artifact": identity, "reused": False},
        usage=proposal.usage,
        commit=lambda: continue_after(job, run, step, proposal),
    )


def canonical_artifacts(run: SummaryRun) -> dict[str, dict[str, Any]]:
    """The stored artifacts of this run's source version, by step: the only inputs steps use."""
    stored = StepArtifact.objects.filter(brief_id=run.brief_id, source_hash=run.source_hash)
    return {artifact.step: artifact.content for artifact in stored}


def _ask_provider(job: Job, run: SummaryRun, step: str, inputs: dict[str, dict[str, Any]]) -> Proposal:
    system, source_step = INSTRUCTIONS[SummaryStep(step)]
    material = run.brief.source_material if source_step is None else inputs[source_step]["text"]
    provider = ai_providers.provider_from_settings()
    completion = call_provider(
        lambda: provider.complete(
            system=system, prompt=f"{system}\n\n{material}", seed=f"{job.key}:attempt-{job.attempt_number}"
        )
    )
    return Proposal({"text": completion.text.strip()}, provider.name, completion.model, completion.usage)


def call_provider(call: Callable[[], T]) -> T:
    """One provider call, its exceptions turned into failure kinds (invariant 9)."""
    try:
        return call()
    except ai_providers.AITimeout as exc:
        raise OperationFailed(FailureKind.TIMEOUT, str(exc), http_status=exc.status) from exc
    except ai_providers.AIConnectionError as exc:
        raise OperationFailed(FailureKind.CONNECTION, str(exc), http_status=exc.status) from exc
    except ai_providers.AIThrottled as exc:
        raise OperationFailed(
            FailureKind.THROTTLED, str(exc), retry_after=exc.retry_after, http_status=exc.status
        ) from exc
    except ai_providers.AIRejected as exc:
        raise OperationFailed(FailureKind.INVALID, str(exc), http_status=exc.status) from exc
    except ai_providers.AIAuthError as exc:
        raise OperationFailed(FailureKind.AUTH, str(exc), http_status=exc.status) from exc
    except (ai_providers.AIServerError, ai_providers.AIInvalidResponse) as exc:
        raise OperationFailed(FailureKind.SERVER_ERROR, str(exc), http_status=exc.status) from exc


def quality_problems(inputs: dict[str, dict[str, Any]]) -> list[str]:
    """Deterministic checks on the stored artifacts; any problem is terminal (never retried)."""
    problems = []
    outline = str(inputs.get(SummaryStep.OUTLINE, {}).get("text", "")).strip()
    draft = str(inputs.get(SummaryStep.DRAFT, {}).get("text", "")).strip()
    headline = str(inputs.get(SummaryStep.HEADLINE, {}).get("text", "")).strip()
    if not outline:
        problems.append("the outline is empty")
    if not draft:
        problems.append("the draft is empty")
    elif not DRAFT_MIN_CHARS <= len(draft) <= DRAFT_MAX_CHARS:
        problems.append(f"the draft has {len(draft)} characters; allowed {DRAFT_MIN_CHARS} to {DRAFT_MAX_CHARS}")
    if not headline:
        problems.append("the headline is missing")
    elif len(headline) > HEADLINE_MAX_CHARS or "\n" in headline:
        problems.append(f"the headline must be one line of at most {HEADLINE_MAX_CHARS} characters")
    for name, text in (("outline", outline), ("draft", draft), ("headline", headline)):
        if leftover := LEFTOVER_PROMPT.search(text):
            problems.append(f"the {name} contains leftover prompt text ({leftover.group(0)!r})")
        if "\x00" in text:
            problems.append(f"the {name} contains a NUL character")
    return problems


# ---------------------------------------------------------------------------------------------
# The continuation (inside the step's fenced finalize transaction)


@transaction.atomic(savepoint=False)
def continue_after(job: Job, run: SummaryRun, step: str, proposal: Proposal | None) -> StepArtifact:
    """Store (or read) the canonical artifact, then write the continuation from the stored value:
    the next step's operation, or, after the quality gate, the first revision."""
    identity = step_identity(job.subject_id, run.source_hash, step)
    artifact = (
        store_artifact(run, step, proposal) if proposal is not None else StepArtifact.objects.get(identity=identity)
    )
    crash_point("after_artifact_insert", kind=SUMMARY_STEP)
    if step in NEXT_STEP:
        _enqueue_step(run, NEXT_STEP[step], after=Operation.objects.get(id=job.operation_id))
    else:
        write_first_revision(run)
    crash_point("after_next_step_insert", kind=SUMMARY_STEP)
    return artifact


def store_artifact(run: SummaryRun, step: str, proposal: Proposal) -> StepArtifact:
    """Canonical-first: insert the proposal, or, when the identity is taken, return what won."""
    identity = step_identity(run.brief.public_id, run.source_hash, step)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO publishing_stepartifact
                (brief_id, source_hash, step, identity, content, provider, model, usage, created_at)
            VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s::jsonb, statement_timestamp())
            ON CONFLICT (identity) DO NOTHING
            """,
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


def write_first_revision(run: SummaryRun) -> None:
    """Turn the run's canonical artifacts into revision 1; never over or past an editor's revision."""
    from publishing.actions import do_create_revision  # the editorial actions start runs

    brief = Brief.objects.select_for_update(of=("self",)).get(id=run.brief_id)
    locked_run = SummaryRun.objects.select_for_update(of=("self",)).get(id=run.id)
    if locked_run.status != SummaryRun.Status.RUNNING:
        return
    artifacts = canonical_artifacts(locked_run)
    payload = suggested_payload(artifacts)
    if brief.revisions.exists():
        locked_run.suggestion = True
    else:
        revision, _created = do_create_revision(brief, base_number=0, payload=payload, acting_user=pipeline_user())
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


def suggested_payload(artifacts: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {
        "title": str(artifacts[SummaryStep.HEADLINE]["text"]).strip(),
        "body": str(artifacts[SummaryStep.DRAFT]["text"]).strip(),
    }
