"""The `summary_step` handler: one step of a summary run (outline → draft → headline → quality gate).

Each step is an operation `summary:<brief>:run-<n>:<step>` with the previous step's operation as
a durable prerequisite (docs/invariants.md#i7). A step whose artifact is already stored makes no provider
call; otherwise the provider is asked with no transaction open, and the proposal goes to
publishing.actions.summaries.do_finish_summary_step in the fenced finalize, where the stored
winner (not the proposal) decides what follows (docs/invariants.md#i6).
"""

from __future__ import annotations

from publishing.actions.summaries import do_finish_summary_step
from publishing.clients import ai
from publishing.handlers.failures import call_service
from publishing.identities import SUMMARY_STEP, step_identity
from publishing.models import StepArtifact, SummaryRun
from publishing.selectors.summaries import get_canonical_artifacts
from publishing.summary_rules import INSTRUCTIONS, Proposal, SummaryStep, quality_problems
from workers.crashpoints import crash_point
from workers.errors import FailureKind, OperationFailed, Superseded
from workers.registry import ClaimedOperation, Success


def handle_summary_step(claimed: ClaimedOperation) -> Success:
    step = SummaryStep(claimed.arguments["step"])
    run = SummaryRun.objects.select_related("brief").get(
        brief__public_id=claimed.subject_id, number=claimed.arguments["run"]
    )
    if run.status == SummaryRun.Status.SUPERSEDED or run.brief.source_hash != run.source_hash:
        raise Superseded(f"the source material changed after run {run.number} began")
    identity = step_identity(claimed.subject_id, run.source_hash, step)
    if StepArtifact.objects.filter(identity=identity).exists():
        # An accepted step is never regenerated: no provider call, the stored artifact goes on.
        return Success(
            result={"artifact": identity, "reused": True},
            finalize=lambda: do_finish_summary_step(run, step, proposal=None, step_operation_id=claimed.operation_id),
        )
    inputs = get_canonical_artifacts(run)
    if step == SummaryStep.QUALITY_GATE:
        problems = quality_problems(inputs)
        if problems:
            raise OperationFailed(FailureKind.QUALITY_GATE, "quality gate: " + "; ".join(problems))
        proposal = Proposal({"passed": True}, provider="galley", model="quality-gate-1")
    else:
        proposal = _ask_provider(claimed, run, step, inputs)
    crash_point("after_provider_response", kind=SUMMARY_STEP)
    return Success(
        result={"artifact": identity, "reused": False},
        usage=proposal.usage,
        finalize=lambda: do_finish_summary_step(run, step, proposal=proposal, step_operation_id=claimed.operation_id),
    )


def _ask_provider(
    claimed: ClaimedOperation, run: SummaryRun, step: SummaryStep, inputs: dict[str, dict[str, object]]
) -> Proposal:
    system, source_step = INSTRUCTIONS[step]
    material = run.brief.source_material if source_step is None else str(inputs[source_step]["text"])
    provider = ai.provider_from_settings()
    completion = call_service(
        lambda: provider.complete(
            system=system, prompt=f"{system}\n\n{material}", seed=f"{claimed.key}:attempt-{claimed.attempt_number}"
        )
    )
    return Proposal({"text": completion.text.strip()}, provider.name, completion.model, completion.usage)
