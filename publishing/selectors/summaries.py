"""Summary runs: a run's outcome, its steps as the pipeline view shows them, and the canonical
artifacts its steps read."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from publishing.identities import step_identity, step_key
from publishing.models import Brief, StepArtifact, SummaryRun
from publishing.summary_rules import STEPS, SummaryStep, suggested_headline, suggested_payload
from workers.models import Operation, OperationStatus

# A step operation that ended in one of these stops its run: nothing comes of the run unless an
# operator runs the step again (then it is running again) or an editor starts a new run.
STEP_STOPPED_STATUSES = (OperationStatus.DEAD, OperationStatus.CONFLICT, OperationStatus.CANCELLED)


@dataclass(frozen=True)
class RunOutcome:
    """Where a summary run stands, for display: its own status, or "stopped" when a step ended
    without success while the run was still running (a quality gate's verdict, a refused request)."""

    state: str  # "running" | "completed" | "superseded" | "stopped": a status badge's CSS name
    label: str
    step: str = ""  # the step that stopped it, in words
    reason: str = ""
    at: datetime.datetime | None = None
    needs_operator: bool = False  # workers.models.NEEDS_OPERATOR of the step that stopped it


def get_run_outcome(run: SummaryRun, step_operations: Iterable[Operation]) -> RunOutcome:
    """The outcome of `run` given its step operations (no query)."""
    if run.status != SummaryRun.Status.RUNNING:
        return RunOutcome(str(run.status), run.get_status_display())
    order = {step: index for index, step in enumerate(STEPS)}
    stopped = sorted(
        (op for op in step_operations if op.status in STEP_STOPPED_STATUSES),
        key=lambda op: order.get(op.arguments.get("step", ""), len(order)),
    )
    if not stopped:
        return RunOutcome("running", run.get_status_display())
    operation = stopped[0]
    step = operation.arguments.get("step", "")
    label = SummaryStep(step).label if step in SummaryStep.values else str(step)
    return RunOutcome(
        "stopped",
        f"Stopped at “{label}”",
        step=label,
        reason=operation.last_error_message or operation.get_status_display(),
        at=operation.finished_at,
        needs_operator=operation.needs_an_operator,
    )


@dataclass(frozen=True)
class PipelineStepView:
    step: str
    label: str
    operation: Operation | None
    artifact: StepArtifact | None

    @property
    def state(self) -> str:
        if self.artifact is not None and (self.operation is None or self.operation.status == OperationStatus.SUCCEEDED):
            return "succeeded"
        return str(self.operation.status) if self.operation is not None else "waiting"

    @property
    def tokens(self) -> int:
        if self.operation is None:
            return 0
        return sum(sum((attempt.usage or {}).values()) for attempt in self.operation.attempt_set.all())


@dataclass(frozen=True)
class PipelineView:
    run: SummaryRun
    steps: list[PipelineStepView]

    @property
    def outcome(self) -> RunOutcome:
        return get_run_outcome(self.run, [step.operation for step in self.steps if step.operation is not None])

    @property
    def suggestion(self) -> dict[str, str] | None:
        """The whole suggestion (headline as title, draft as body) of a run that found an
        editor's revision and so did not write its draft."""
        if not self.run.suggestion:
            return None
        return suggested_payload(self._artifacts())

    @property
    def suggested_headline(self) -> str | None:
        """The headline of a completed run: revisions keep the editor's title until they take it."""
        if self.run.status != SummaryRun.Status.COMPLETED:
            return None
        return suggested_headline(self._artifacts())

    def _artifacts(self) -> dict[str, dict[str, Any]]:
        return {s.step: s.artifact.content for s in self.steps if s.artifact is not None}


def get_pipeline_view(brief: Brief) -> PipelineView | None:
    """The latest summary run of the brief, step by step: operation, attempts, tokens, artifact."""
    run = brief.summary_runs.order_by("-number").first()
    if run is None:
        return None
    keys = {step_key(brief.public_id, run.number, step): step for step in STEPS}
    operations = {
        keys[operation.key]: operation
        for operation in Operation.objects.filter(key__in=keys).prefetch_related("attempt_set")
    }
    identities = {step_identity(brief.public_id, run.source_hash, step): step for step in STEPS}
    artifacts = {identities[a.identity]: a for a in StepArtifact.objects.filter(identity__in=identities)}
    return PipelineView(
        run=run,
        steps=[
            PipelineStepView(step, SummaryStep(step).label, operations.get(step), artifacts.get(step)) for step in STEPS
        ],
    )


def get_canonical_artifacts(run: SummaryRun) -> dict[str, dict[str, Any]]:
    """The stored artifacts of this run's source version, by step: the only inputs steps use."""
    stored = StepArtifact.objects.filter(brief_id=run.brief_id, source_hash=run.source_hash)
    return {artifact.step: artifact.content for artifact in stored}
