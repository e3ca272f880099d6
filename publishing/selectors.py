"""Publishing's reads: every query a view, an action or a handler needs, by name."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, overload

from django.db.models import OuterRef, Q, QuerySet, Subquery

from approvals.models import Approval
from approvals.selectors import get_valid_approval, list_decisions
from publishing.errors import NotFound, PermissionRefused
from publishing.identities import PUBLISH, publish_key, step_identity, step_key, verify_key
from publishing.models import Brief, Publication, Revision, StepArtifact, SummaryRun
from publishing.roles import AnyUser, Role, can_view, has_role
from publishing.summary_rules import STEPS, SummaryStep, suggested_payload
from workers.models import Conflict, Operation, OperationStatus


def access_brief(public_id: str, *, acting_user: AnyUser, lock: bool = False) -> Brief:
    """The brief, if the user may see it; with `lock`, its row is locked until the transaction ends."""
    if not can_view(acting_user):
        raise PermissionRefused("You need the Editors, Approvers or Operators role to see briefs.")
    briefs = Brief.objects.select_related("author")
    if lock:
        briefs = briefs.select_for_update(of=("self",))
    try:
        return briefs.get(public_id=public_id)
    except Brief.DoesNotExist:
        raise NotFound(f"There is no brief {public_id}.") from None


# Newest first; the id breaks ties, so pages never overlap or skip a row. Migration 0009's
# indexes hold this order, alone and after the status.
BRIEF_LIST_ORDER = ("-created_at", "-id")


class BriefList:
    """Briefs as Paginator takes them: len() counts them, a slice reads one page of them.

    A slice is one query in two steps: first the page's ids, read from an index alone (the
    order, the status filter and the searched columns are all in it, so each row OFFSET skips
    costs an index entry, not a table row, a join and a subquery); then only those rows, with
    their author and their latest revision number (one probe each into the (brief, number)
    unique index). A plain queryset computes all of that for every row it skips.
    """

    def __init__(self, briefs: QuerySet[Brief]) -> None:
        self.briefs = briefs  # filtered and in BRIEF_LIST_ORDER; only its count and ids are read

    def __len__(self) -> int:
        return self.briefs.count()

    def __iter__(self) -> Iterator[Brief]:
        return iter(self[:])

    @overload
    def __getitem__(self, index: int) -> Brief: ...
    @overload
    def __getitem__(self, index: slice) -> list[Brief]: ...
    def __getitem__(self, index: int | slice) -> Brief | list[Brief]:
        if isinstance(index, int):
            return self[index : index + 1][0]
        latest = Revision.objects.filter(brief=OuterRef("pk")).order_by("-number").values("number")[:1]
        page = (
            Brief.objects.filter(pk__in=self.briefs.values_list("pk", flat=True)[index])
            .select_related("author")
            .annotate(latest_revision_number=Subquery(latest))
            .order_by(*BRIEF_LIST_ORDER)
        )
        return list(page)


def list_briefs(*, query: str = "", status: str = "") -> BriefList:
    """Briefs newest first whose title contains `query` or whose public id is `query`, in `status`."""
    briefs = Brief.objects.order_by(*BRIEF_LIST_ORDER)
    if query:
        # Public ids are lowercase (constraint brief_public_id_form): matching the lowered query
        # is iexact without an UPPER() of every row's id.
        briefs = briefs.filter(Q(title__icontains=query) | Q(public_id=query.strip().lower()))
    if status:
        briefs = briefs.filter(status=status)
    return BriefList(briefs)


def get_latest_revision(brief: Brief) -> Revision | None:
    return brief.revisions.select_related("author").order_by("-number").first()


def list_revisions(brief: Brief) -> QuerySet[Revision]:
    return brief.revisions.select_related("author").order_by("-number")


def get_revision(brief: Brief, number: int) -> Revision:
    try:
        return brief.revisions.select_related("author", "brief").get(number=number)
    except Revision.DoesNotExist:
        raise NotFound(f"{brief.public_id} has no revision {number}.") from None


def diff_payloads(old: dict[str, Any] | None, new: dict[str, Any], *, old_label: str, new_label: str) -> list[str]:
    """Unified diff of two payloads, field by field, as lines for display (never HTML)."""

    def lines(payload: dict[str, Any] | None) -> list[str]:
        if payload is None:
            return []
        out = [f"# title: {payload.get('title', '')}"]
        out.extend(str(payload.get("body", "")).splitlines())
        for key in sorted(set(payload) - {"title", "body"}):
            out.append(f"# {key}: {payload[key]}")
        return out

    return list(difflib.unified_diff(lines(old), lines(new), fromfile=old_label, tofile=new_label, lineterm=""))


@dataclass(frozen=True)
class PublicationState:
    """Where revision N stands on its way to the target, for display."""

    state: str  # "none" | "publishing" | "published" | "failed" | "superseded" | "cancelled"
    label: str
    publication: Publication | None
    operations: list[Operation]

    @property
    def in_progress(self) -> bool:
        return self.state == "publishing"


def get_publication_state(revision: Revision) -> PublicationState:
    public_id = revision.brief.public_id
    keys = [publish_key(public_id, revision.number), verify_key(public_id, revision.number)]
    operations = list(Operation.objects.filter(key__in=keys).prefetch_related("attempt_set").order_by("id"))
    publication = Publication.objects.filter(revision=revision).first()
    by_kind = {operation.kind: operation for operation in operations}
    if publication is not None and publication.verified_at is not None:
        return PublicationState("published", "Published", publication, operations)
    stuck = [op for op in operations if op.status in (OperationStatus.DEAD, OperationStatus.CONFLICT)]
    if stuck:
        reason = stuck[0].last_error_message or stuck[0].get_status_display()
        return PublicationState("failed", f"Publishing needs an operator: {reason}", publication, operations)
    publish = by_kind.get("publish")
    if publish is not None and publish.status in (OperationStatus.SUPERSEDED, OperationStatus.CANCELLED):
        label = publish.last_error_message or publish.get_status_display()
        return PublicationState(str(publish.status), f"Not published: {label}", publication, operations)
    if operations:
        return PublicationState("publishing", "Publishing…", publication, operations)
    return PublicationState("none", "Not published", None, [])


def list_brief_operations(brief: Brief) -> QuerySet[Operation]:
    """Every operation about this brief (publishes, verifications), oldest first, with attempts."""
    return Operation.objects.for_subject("brief", brief.public_id).prefetch_related("attempt_set").order_by("id")


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
    def in_progress(self) -> bool:
        return self.run.status == SummaryRun.Status.RUNNING and not any(
            step.state in (OperationStatus.DEAD, OperationStatus.CONFLICT) for step in self.steps
        )

    @property
    def suggestion(self) -> dict[str, str] | None:
        if not self.run.suggestion:
            return None
        return suggested_payload({s.step: s.artifact.content for s in self.steps if s.artifact is not None})


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


def get_publication(operation_key: str) -> Publication:
    """The publication the publish operation `operation_key` recorded."""
    return Publication.objects.select_related("revision", "brief").get(operation_key=operation_key)


def get_newer_published_revision(revision: Revision) -> int | None:
    """The number of a newer revision of the same brief that has a publication, if any."""
    return (
        Publication.objects.filter(brief_id=revision.brief_id, revision__number__gt=revision.number)
        .values_list("revision__number", flat=True)
        .first()
    )


def get_newer_attempted_publish(revision: Revision) -> int | None:
    """The number of a newer revision whose publish has made an attempt (so may be at the target)."""
    return (
        Operation.objects.for_subject("brief", revision.brief.public_id)
        .filter(kind=PUBLISH, arguments__revision__gt=revision.number, attempts__gt=0)
        .values_list("arguments__revision", flat=True)
        .first()
    )


@dataclass(frozen=True)
class RevisionPage:
    """Everything the revision page shows about one revision, as one viewer sees it."""

    brief: Brief
    revision: Revision
    latest: Revision | None
    is_current: bool
    diff: list[str]
    decisions: list[Approval]
    own_decision: Approval | None
    valid_approval: Approval | None
    publication_state: PublicationState
    may_decide: bool
    is_own_revision: bool

    def as_context(self) -> dict[str, Any]:
        """The fields as a template context (dataclasses.asdict would deep-copy the model instances)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def get_revision_page(brief: Brief, revision: Revision, *, viewer: AnyUser) -> RevisionPage:
    latest = get_latest_revision(brief)
    previous = get_revision(brief, revision.number - 1) if revision.number > 1 else None
    is_current = latest is not None and latest.pk == revision.pk
    decisions = list(list_decisions(revision))
    # Decisions are final (approvals.actions), so a second one would only be refused: no form.
    own_decision = next((d for d in decisions if d.approver_id == viewer.pk), None)
    return RevisionPage(
        brief=brief,
        revision=revision,
        latest=latest,
        is_current=is_current,
        diff=diff_payloads(
            previous.payload if previous else None,
            revision.payload,
            old_label=f"revision {previous.number}" if previous else "(nothing)",
            new_label=f"revision {revision.number}",
        ),
        decisions=decisions,
        own_decision=own_decision,
        valid_approval=get_valid_approval(revision),
        publication_state=get_publication_state(revision),
        may_decide=is_current
        and own_decision is None
        and brief.published_revision_number != revision.number
        and has_role(viewer, Role.APPROVER),
        is_own_revision=revision.author_id == viewer.pk,
    )


@dataclass(frozen=True)
class HeldRevision:
    """What the target holds, matched to Galley's revisions by payload hash."""

    state: dict[str, Any]
    revision: Revision | None
    approval: Approval | None


@dataclass(frozen=True)
class PublicationProblemView:
    """One publish or verify operation an operator settles: Galley's intent beside what the
    target held when the worker stopped (no network call from the admin), and which of the
    ending actions apply, each with the reason when it does not."""

    operation: Operation
    brief: Brief
    revision: Revision
    approval: Approval | None
    conflict: Conflict | None
    held: HeldRevision | None
    adoptable: Revision | None
    adopt_refusal: str
    open: bool

    @property
    def problem(self) -> str:
        if self.conflict is not None:
            return self.conflict.get_kind_display()
        if self.operation.status == OperationStatus.DEAD:
            return "Dead letter: " + (self.operation.last_error_message or "no attempt succeeded")
        return self.operation.get_status_display()


def get_publication_problem(operation: Operation) -> PublicationProblemView:
    public_id = operation.subject_id
    revision = Revision.objects.select_related("brief").get(
        brief__public_id=public_id, number=int(operation.arguments["revision"])
    )
    conflict = operation.conflicts.filter(resolved_at__isnull=True).order_by("-id").first()
    if conflict is None:
        conflict = operation.conflicts.order_by("-id").first()
    held = None
    if conflict is not None and conflict.target_state:
        state = conflict.target_state
        match = revision.brief.revisions.filter(payload_hash=state.get("payload_hash", "")).order_by("-number").first()
        held = HeldRevision(state, match, get_valid_approval(match) if match is not None else None)
    adoptable, refusal = _adoptable(operation, revision.brief, held)
    return PublicationProblemView(
        operation=operation,
        brief=revision.brief,
        revision=revision,
        approval=get_valid_approval(revision),
        conflict=conflict,
        held=held,
        adoptable=adoptable,
        adopt_refusal=refusal,
        open=operation.status in (OperationStatus.DEAD, OperationStatus.CONFLICT),
    )


def _adoptable(operation: Operation, brief: Brief, held: HeldRevision | None) -> tuple[Revision | None, str]:
    """The approved revision the target holds, if adopting it publishes nothing unapproved and
    nothing older than what is published (invariants 3, 4); otherwise why not."""
    if operation.status not in (OperationStatus.DEAD, OperationStatus.CONFLICT):
        return None, "The operation is not waiting for an operator."
    if held is None:
        if operation.status == OperationStatus.DEAD and operation.kind == PUBLISH:
            return (
                None,
                "The target was not read when this stopped: “Look up at the target” adopts what it holds "
                "under this key.",
            )
        return None, "Galley has no record of what the target holds."
    if held.revision is None:
        return None, "The target holds content that matches no revision of this brief: nothing to adopt."
    if held.approval is None:
        return None, f"The target holds revision {held.revision.number}, which nobody approved: it cannot be adopted."
    published = brief.published_revision_number
    if published is not None and held.revision.number < published:
        return None, f"The target holds revision {held.revision.number}, older than the published revision {published}."
    publish = Operation.objects.filter(key=publish_key(brief.public_id, held.revision.number)).first()
    if publish is None or publish.status in (OperationStatus.CANCELLED, OperationStatus.SUPERSEDED):
        return (
            None,
            f"The publish of revision {held.revision.number} has ended "
            f"({publish.status if publish else 'none'}); publish a newer revision instead.",
        )
    return held.revision, ""
