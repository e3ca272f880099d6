"""Publishing's reads: every query a view, an action or a handler needs, by name."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, overload

from django.db import connection
from django.db.models import (
    Avg,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Now, TruncMinute, Upper

from approvals.models import Approval
from approvals.selectors import get_valid_approval, list_decisions
from publishing.diffs import PayloadDiff, diff_payloads
from publishing.errors import InvalidInput, NotFound, PermissionRefused
from publishing.identities import (
    DRIFT_CHECK,
    PUBLICATION_KINDS,
    PUBLISH,
    SUMMARY_STEP,
    VERIFY,
    publish_key,
    revision_subject_id,
    step_identity,
    step_key,
    verify_key,
)
from publishing.models import Brief, Publication, Revision, StepArtifact, SummaryRun
from publishing.roles import AnyUser, Role, can_view, has_role
from publishing.summary_rules import STEPS, SummaryStep, suggested_headline, suggested_payload
from workers.models import UNFINISHED_STATUSES, Attempt, AuditEvent, Conflict, Operation, OperationStatus
from workers.prepared import execute_prepared


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
        # The title is matched as icontains does (UPPER on both sides), against the stored
        # upper-cased title, so no row's title is folded again.
        briefs = briefs.filter(Q(title_search__contains=Upper(Value(query))) | Q(public_id=query.strip().lower()))
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


def get_revisions_by_number(brief: Brief, numbers: set[int]) -> dict[int, Revision]:
    """Those of `numbers` that are revisions of the brief, by number, in one query."""
    return {
        revision.number: revision for revision in brief.revisions.select_related("author").filter(number__in=numbers)
    }


def list_revision_numbers(brief: Brief) -> list[int]:
    """Every revision number of the brief, newest first. Revisions are numbered 1, 2, 3… with no gap
    and never deleted (constraints and trigger of migration 0002), so the latest number says them all."""
    latest = brief.revisions.order_by("-number").values_list("number", flat=True).first()
    return list(range(latest or 0, 0, -1))


def get_restored_number(revision: Revision) -> int | None:
    """The revision whose content `revision` restored, as its creation's audit record says, if any."""
    state = (
        AuditEvent.objects.filter(
            subject_type="revision",
            subject_id=revision_subject_id(revision.brief.public_id, revision.number),
            event_type="revision.created",
        )
        .values_list("new_state", flat=True)
        .first()
    )
    restores = (state or {}).get("restores_revision")
    return restores if isinstance(restores, int) else None


def diff_revisions(old: Revision | None, new: Revision) -> PayloadDiff:
    return diff_payloads(
        old.payload if old is not None else None,
        new.payload,
        old_label=f"revision {old.number}" if old is not None else "(nothing)",
        new_label=f"revision {new.number}",
    )


@dataclass(frozen=True)
class RevisionComparison:
    """Two revisions of one brief side by side (the compare page); `diff` is None when there is
    nothing to compare yet (fewer than two revisions)."""

    brief: Brief
    old: Revision | None
    new: Revision | None
    diff: PayloadDiff | None
    numbers: list[int]  # every revision number of the brief, newest first, for the compare form


def get_revision_comparison(brief: Brief, *, from_number: int | None, to_number: int | None) -> RevisionComparison:
    """Revision `from_number` against `to_number`: by default the latest against the one before it.

    Raises InvalidInput, saying why, for equal numbers or a number that is no revision of the brief.
    """
    numbers = list_revision_numbers(brief)
    if from_number is None and to_number is None and len(numbers) < 2:
        return RevisionComparison(brief, None, None, None, numbers)
    new_number = to_number if to_number is not None else (numbers[0] if numbers else 0)
    old_number = from_number if from_number is not None else new_number - 1
    if old_number == new_number:
        raise InvalidInput(f"Both sides are revision {new_number}: pick two different revisions to compare.")
    missing = [number for number in (old_number, new_number) if number not in numbers]
    if missing:
        held = f"its revisions are 1 to {numbers[0]}" if numbers else "it has no revision yet"
        raise InvalidInput(f"{brief.public_id} has no revision {missing[0]}: {held}.")
    found = get_revisions_by_number(brief, {old_number, new_number})
    old, new = found[old_number], found[new_number]
    return RevisionComparison(brief, old, new, diff_revisions(old, new), numbers)


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


def _publication_ended(operations: Sequence[Operation]) -> tuple[str, str] | None:
    """The state and label of a revision's publication that ended without being published, from its
    publish and verify operations (in id order): stuck for an operator, or cancelled or superseded.
    None while it is not over (or never began). The revision page and the brief's badge both ask this."""
    stuck = [op for op in operations if op.status in (OperationStatus.DEAD, OperationStatus.CONFLICT)]
    if stuck:
        reason = stuck[0].last_error_message or stuck[0].get_status_display()
        return "failed", f"Publishing needs an operator: {reason}"
    # An ended verification (a newer revision shown, an operator's settlement) ends it as well as an
    # ended publish: it is not still publishing.
    for kind in (PUBLISH, VERIFY):
        ended = next((op for op in operations if op.kind == kind), None)
        if ended is not None and ended.status in (OperationStatus.SUPERSEDED, OperationStatus.CANCELLED):
            return str(ended.status), f"Not published: {ended.last_error_message or ended.get_status_display()}"
    return None


def get_publication_state(revision: Revision) -> PublicationState:
    public_id = revision.brief.public_id
    keys = [publish_key(public_id, revision.number), verify_key(public_id, revision.number)]
    operations = list(Operation.objects.filter(key__in=keys).prefetch_related("attempt_set").order_by("id"))
    publication = Publication.objects.filter(revision=revision).first()
    if publication is not None and publication.verified_at is not None:
        return PublicationState("published", "Published", publication, operations)
    ended = _publication_ended(operations)
    if ended is not None:
        return PublicationState(*ended, publication, operations)
    if operations:
        return PublicationState("publishing", "Publishing…", publication, operations)
    return PublicationState("none", "Not published", None, [])


@dataclass(frozen=True)
class BriefBadge:
    """The brief's status as its pages show it."""

    status: str  # a status badge's CSS name
    label: str
    note: str = ""  # why, when the badge is not the brief's own status


# `key = ANY(array)` runs even for an empty array (`key__in=[]` would skip the query), keeping the
# count constant; the key is unique, so each key is one index probe.
BADGE_OPERATIONS_SQL = f"SELECT * FROM {Operation._meta.db_table} WHERE key = ANY(%s) ORDER BY id"  # noqa: S608 -- the model's table


def list_brief_badges(briefs: Iterable[tuple[Brief, int | None]]) -> dict[int, BriefBadge]:
    """Each brief's badge, by brief id, given its latest revision number: its own status, except an
    approved brief whose publish ended without publishing (an operator cancelled it, a newer intent
    replaced it, or it needs an operator) — "Approved" alone would promise a publication that is not
    coming. One statement for the approved ones' publish and verify operations, whether there are
    any or not: a page's query count does not depend on what it lists."""
    briefs = list(briefs)
    keys: dict[str, int] = {}
    for brief, number in briefs:
        if brief.status == Brief.Status.APPROVED and number is not None:
            keys.update({publish_key(brief.public_id, number): brief.pk, verify_key(brief.public_id, number): brief.pk})
    operations: dict[int, list[Operation]] = {}
    for operation in Operation.objects.raw(BADGE_OPERATIONS_SQL, [sorted(keys)]):
        operations.setdefault(keys[operation.key], []).append(operation)
    badges = {}
    for brief, _number in briefs:
        ended = _publication_ended(operations.get(brief.pk, []))
        if ended is None:
            badges[brief.pk] = BriefBadge(str(brief.status), brief.get_status_display())
        else:
            state, label = ended
            shown = "Approved, publishing needs an operator" if state == "failed" else "Approved, not published"
            badges[brief.pk] = BriefBadge(state, shown, label)
    return badges


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


_REVISION_FIELDS = ["id", "brief_id", "number", "payload", "payload_hash", "author_id", "created_at"]
_PUBLICATION_FIELDS = [
    "id",
    "brief_id",
    "revision_id",
    "operation_key",
    "payload_hash",
    "external_id",
    "permalink",
    "created_at",
    "verified_at",
]

PUBLICATION_SQL = f"""
SELECT {", ".join(f"p.{name}" for name in _PUBLICATION_FIELDS)}, {", ".join(f"r.{name}" for name in _REVISION_FIELDS)}
FROM {Publication._meta.db_table} p
JOIN {Revision._meta.db_table} r ON r.id = p.revision_id
WHERE p.operation_key = %(key)s
"""  # noqa: S608 -- column and table names from the models; every value is a parameter


def _revision_from_row(values: Sequence[Any]) -> Revision:
    """A Revision from _REVISION_FIELDS read by a raw cursor."""
    values = list(values)
    # Django's adapters load jsonb as text and leave decoding to the field; a raw cursor must decode it.
    payload = values[3]
    values[3] = json.loads(payload) if isinstance(payload, str) else payload
    return Revision.from_db(None, _REVISION_FIELDS, values)


def get_publication(operation_key: str) -> Publication:
    """The publication the publish operation `operation_key` recorded, with its revision (a verify's
    first read: a prepared statement). Raises Publication.DoesNotExist."""
    with execute_prepared(PUBLICATION_SQL, {"key": operation_key}) as cursor:
        row = cursor.fetchone()
    if row is None:
        raise Publication.DoesNotExist(f"no publication has the key {operation_key}")
    publication = Publication.from_db(None, _PUBLICATION_FIELDS, row[: len(_PUBLICATION_FIELDS)])
    publication.revision = _revision_from_row(row[len(_PUBLICATION_FIELDS) :])
    return publication


def list_newer_sent_revisions(publication: Publication, *, public_id: str) -> list[Revision]:
    """The revisions of the publication's brief newer than its own that Galley has published (each has
    a publication: the target applied it) or sent (its publish has made an attempt, and may just not be
    recorded yet), newest first. A verification that finds the target showing one of them is over
    (superseded), not failed. Two queries; only on a verification's failure path."""
    sent = [
        int(number)
        for number in Operation.objects.filter(
            subject_type="brief", subject_id=public_id, kind=PUBLISH, attempts__gt=0
        ).values_list("arguments__revision", flat=True)
    ]
    return list(
        Revision.objects.filter(brief_id=publication.brief_id, number__gt=publication.revision.number)
        .filter(Q(publication__isnull=False) | Q(number__in=sent))
        .order_by("-number")
    )


@dataclass(frozen=True)
class DueDriftCheck:
    """A published revision to check for drift, and what an operator accepted its target showing."""

    public_id: str
    number: int
    payload_hash: str
    accepted_hash: str  # "" when no drift of it was accepted


def list_due_drift_checks(*, limit: int, interval: datetime.timedelta) -> list[DueDriftCheck]:
    """At most `limit` briefs' published revisions to check for drift, those checked longest ago first
    (never checked first), none checked within `interval` (database clock). A brief with a publication
    operation under way or waiting for an operator is left out: its own verification, republish or check
    speaks for it. Two queries whatever the limit."""
    busy = Operation.objects.filter(
        subject_type="brief",
        subject_id=OuterRef("brief__public_id"),
        kind__in=PUBLICATION_KINDS,
        status__in=(*UNFINISHED_STATUSES, OperationStatus.DEAD, OperationStatus.CONFLICT),
    )
    last_checked = (
        Operation.objects.filter(subject_type="brief", subject_id=OuterRef("brief__public_id"), kind=DRIFT_CHECK)
        .order_by()
        .values("subject_id")
        .annotate(last=Max("created_at"))
        .values("last")
    )
    due = list(
        Publication.objects.filter(verified_at__isnull=False, brief__published_revision_number=F("revision__number"))
        .exclude(Exists(busy))
        .annotate(last_checked=Subquery(last_checked))
        .filter(Q(last_checked__isnull=True) | Q(last_checked__lte=Now() - interval))
        .order_by(F("last_checked").asc(nulls_first=True), "id")
        .values_list("brief__public_id", "revision__number", "payload_hash")[:limit]
    )
    accepted: dict[tuple[str, int], str] = {}
    drifts = (
        Conflict.objects.filter(
            kind=Conflict.Kind.DRIFT, operation__subject_type="brief", operation__subject_id__in={row[0] for row in due}
        )
        .order_by("id")
        .values_list("operation__subject_id", "operation__arguments", "accepted_payload_hash")
    )
    # The latest drift of each revision says what is accepted: a republish after an acceptance ends it.
    for public_id, arguments, digest in drifts:
        accepted[(public_id, int(arguments["revision"]))] = digest
    return [
        DueDriftCheck(public_id, number, digest, accepted.get((public_id, number), ""))
        for public_id, number, digest in due
    ]


@dataclass(frozen=True)
class PublishChecks:
    """What a publish checks before it sends revision N, read in one statement (one snapshot)."""

    revision: Revision  # with its brief's id and public id loaded
    approved: bool  # an approval of exactly this revision and its payload hash exists
    newer_published: int | None  # a newer revision of the brief that has a publication
    newer_attempted: int | None  # a newer revision whose publish has made an attempt (may be at the target)


# One statement on the publish's hot path instead of four ORM queries: the revision, and the three
# facts a publish must check before it sends it. The approval test is get_valid_approval's (exactly
# this revision, its hash, approved); `newer_attempted` compares the arguments' revision as jsonb,
# as the ORM's `arguments__revision__gt` does.
PUBLISH_CHECKS_SQL = f"""
SELECT {", ".join(f"r.{name}" for name in _REVISION_FIELDS)},
       EXISTS (
           SELECT 1 FROM {Approval._meta.db_table} a
           WHERE a.revision_id = r.id AND a.payload_hash = r.payload_hash AND a.decision = %(approved)s
       ) AS approved,
       (SELECT newer.number
        FROM {Publication._meta.db_table} p
        JOIN {Revision._meta.db_table} newer ON newer.id = p.revision_id
        WHERE p.brief_id = r.brief_id AND newer.number > r.number
        LIMIT 1) AS newer_published,
       (SELECT (o.arguments ->> 'revision')::integer
        FROM {Operation._meta.db_table} o
        WHERE o.subject_type = 'brief' AND o.subject_id = b.public_id AND o.kind = %(publish)s
          AND o.arguments -> 'revision' > to_jsonb(r.number) AND o.attempts > 0
        LIMIT 1) AS newer_attempted
FROM {Revision._meta.db_table} r
JOIN {Brief._meta.db_table} b ON b.id = r.brief_id
WHERE b.public_id = %(public_id)s AND r.number = %(number)s
"""  # noqa: S608 -- table names from the models; every value is a parameter


def get_publish_checks(public_id: str, number: int) -> PublishChecks:
    """Revision `number` of brief `public_id` and what a publish must know before sending it, in one
    prepared statement. Raises Revision.DoesNotExist."""
    params = {"public_id": public_id, "number": number, "approved": Approval.Decision.APPROVED, "publish": PUBLISH}
    with execute_prepared(PUBLISH_CHECKS_SQL, params) as cursor:
        row = cursor.fetchone()
    if row is None:
        raise Revision.DoesNotExist(f"{public_id} has no revision {number}")
    revision = _revision_from_row(row[: len(_REVISION_FIELDS)])
    revision.brief = Brief.from_db(None, ["id", "public_id"], [revision.brief_id, public_id])
    approved, published, attempted = row[len(_REVISION_FIELDS) :]
    return PublishChecks(revision=revision, approved=approved, newer_published=published, newer_attempted=attempted)


@dataclass(frozen=True)
class RevisionPage:
    """Everything the revision page shows about one revision, as one viewer sees it."""

    brief: Brief
    revision: Revision
    latest: Revision | None
    is_current: bool
    # What this revision changes against the previous one (None when the diffs were not asked for).
    previous_diff: PayloadDiff | None
    # The revision verified at the target, and what this revision changes against it, unless it
    # is this revision or the previous one (whose diff is shown already).
    published: Revision | None
    published_diff: PayloadDiff | None
    restores: int | None
    numbers: list[int]  # every revision number of the brief, newest first, for the compare form
    decisions: list[Approval]
    own_decision: Approval | None
    valid_approval: Approval | None
    publication_state: PublicationState
    may_decide: bool
    may_restore: bool
    is_own_revision: bool

    def as_context(self) -> dict[str, Any]:
        """The fields as a template context (dataclasses.asdict would deep-copy the model instances)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def get_revision_page(brief: Brief, revision: Revision, *, viewer: AnyUser, with_diffs: bool = True) -> RevisionPage:
    """The revision page's data. Without `with_diffs` (a live poll, which shows no diff) the word
    diffs, the costly part for long texts, are not computed."""
    latest = get_latest_revision(brief)
    published_number = brief.published_revision_number
    # The previous and the published revision in one query, whatever the number of revisions.
    found = get_revisions_by_number(brief, {revision.number - 1, published_number or 0} - {0})
    previous = found.get(revision.number - 1)
    published = found.get(published_number) if published_number is not None else None
    is_current = latest is not None and latest.pk == revision.pk
    decisions = list(list_decisions(revision))
    # Decisions are final (approvals.actions), so a second one would only be refused: no form.
    own_decision = next((d for d in decisions if d.approver_id == viewer.pk), None)
    valid_approval = get_valid_approval(revision)
    return RevisionPage(
        brief=brief,
        revision=revision,
        latest=latest,
        is_current=is_current,
        previous_diff=diff_revisions(previous, revision) if with_diffs else None,
        published=published,
        published_diff=diff_revisions(published, revision)
        if with_diffs and published is not None and published.number not in (revision.number, revision.number - 1)
        else None,
        restores=get_restored_number(revision),
        numbers=list(range(latest.number, 0, -1)) if latest is not None else [],
        decisions=decisions,
        own_decision=own_decision,
        valid_approval=valid_approval,
        publication_state=get_publication_state(revision),
        # Once another approver approved it, a request for changes would be refused and another
        # approval adds nothing: the form is gone (a live page replaces it with a notice).
        may_decide=is_current
        and own_decision is None
        and valid_approval is None
        and brief.published_revision_number != revision.number
        and has_role(viewer, Role.APPROVER),
        may_restore=not is_current and has_role(viewer, Role.EDITOR),
        is_own_revision=revision.author_id == viewer.pk,
    )


# A publication problem's phases, by its operation's status: it waits for an operator; an operator's
# retry or look-up is queued (or running) and its outcome is not known yet; or it is over.
PROBLEM_OPEN = (OperationStatus.DEAD, OperationStatus.CONFLICT)
PROBLEM_QUEUED = (OperationStatus.PENDING, OperationStatus.RETRY_WAIT, OperationStatus.RUNNING)
OPERATOR_RETRIES = {
    "operation.retry_now": "a retry after a fix",
    "operation.reconcile_requested": "a look-up at the target (adopting what it holds under the key)",
}


@dataclass(frozen=True)
class HeldRevision:
    """What the target holds, matched to Galley's revisions by payload hash."""

    state: dict[str, Any]
    revision: Revision | None
    approval: Approval | None


@dataclass(frozen=True)
class DriftNotice:
    """For editors, on the brief page: the site stopped showing the published revision (a drift), and
    whether an operator has ended it and how (`outcome`, the ending operation's reason)."""

    revision_number: int
    found_at: datetime.datetime
    open: bool
    outcome: str


def get_drift_notice(brief: Brief) -> DriftNotice | None:
    """The brief's latest drift, unless a newer revision than the drifted one is published (one query,
    none for a brief that has nothing at the target to drift: neither published nor approved)."""
    if brief.published_revision_number is None and brief.status != Brief.Status.APPROVED:
        return None
    conflict = (
        Conflict.objects.filter(
            kind=Conflict.Kind.DRIFT, operation__subject_type="brief", operation__subject_id=brief.public_id
        )
        .select_related("operation")
        .order_by("-id")
        .first()
    )
    if conflict is None:
        return None
    operation = conflict.operation
    number = int(operation.arguments["revision"])
    if brief.published_revision_number is not None and brief.published_revision_number > number:
        return None
    is_open = conflict.resolved_at is None and operation.status in (OperationStatus.DEAD, OperationStatus.CONFLICT)
    return DriftNotice(
        revision_number=number,
        found_at=conflict.created_at,
        open=is_open,
        outcome="" if is_open else (operation.last_error_message or conflict.resolution),
    )


@dataclass(frozen=True)
class DriftShown:
    """What the site shows instead of the approved revision, as the worker read it (the WordPress
    plugin's live content: raw title, body and excerpt, status), with its word diff from the approved
    revision and the revision of the brief with exactly this content, if any."""

    title: str
    body: str
    excerpt: str
    status: str
    hash: str
    modified_gmt: str
    diff: PayloadDiff
    revision: Revision | None


def _drift_shown(conflict: Conflict | None, revision: Revision) -> DriftShown | None:
    live = (conflict.target_state or {}).get("live") if conflict is not None else None
    if conflict is None or conflict.kind != Conflict.Kind.DRIFT or not isinstance(live, dict):
        return None
    shown = {"title": str(live.get("title", "")), "body": str(live.get("body", ""))}
    return DriftShown(
        title=shown["title"],
        body=shown["body"],
        excerpt=str(live.get("excerpt", "")),
        status=str(live.get("status", "")),
        hash=str(live.get("hash", "")),
        modified_gmt=str(live.get("modified_gmt", "")),
        diff=diff_payloads(
            revision.payload, shown, old_label=f"revision {revision.number} (approved)", new_label="the site now"
        ),
        revision=revision.brief.revisions.filter(payload_hash=str(live.get("hash", ""))).first(),
    )


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
    # The operator's retry or look-up that is queued (PROBLEM_QUEUED), None otherwise.
    queued_by: AuditEvent | None = None
    # Galley's publication of the revision once the operation succeeded (what a look-up adopted, or
    # what the retry published): what the target holds now, where the conflict told what it held then.
    publication: Publication | None = None
    # "Publish as the next revision" (a stale revision): the number the approved content would be
    # written as, or None and why not.
    next_revision_number: int | None = None
    next_revision_refusal: str = ""

    # A drift: what the site shows instead of the approved revision (None for every other problem).
    drift: DriftShown | None = None

    @property
    def queued(self) -> bool:
        return self.operation.status in PROBLEM_QUEUED

    @property
    def status_label(self) -> str:
        """The operation's status as an operator reads it: a retry they asked for is queued, not settled."""
        if self.operation.status == OperationStatus.RUNNING:
            return "Retrying now"
        if self.queued:
            return "Retry queued"
        return self.operation.get_status_display()

    @property
    def queued_action(self) -> str:
        return OPERATOR_RETRIES.get(self.queued_by.event_type, "a retry") if self.queued_by else "a retry"

    @property
    def problem(self) -> str:
        if self.conflict is not None:
            return self.conflict.get_kind_display()
        if self.operation.status == OperationStatus.DEAD:
            return "Dead letter: " + (self.operation.last_error_message or "no attempt succeeded")
        return self.status_label


def get_publication_problem(operation: Operation) -> PublicationProblemView:
    public_id = operation.subject_id
    revision = Revision.objects.select_related("brief").get(
        brief__public_id=public_id, number=int(operation.arguments["revision"])
    )
    conflict = operation.conflicts.filter(resolved_at__isnull=True).order_by("-id").first()
    if conflict is None:
        conflict = operation.conflicts.order_by("-id").first()
    approval = get_valid_approval(revision)
    held = None
    if conflict is not None and conflict.target_state:
        state = conflict.target_state
        match = revision.brief.revisions.filter(payload_hash=state.get("payload_hash", "")).order_by("-number").first()
        held = HeldRevision(state, match, get_valid_approval(match) if match is not None else None)
    adoptable, refusal = _adoptable(operation, revision.brief, held)
    if conflict is not None and conflict.kind == Conflict.Kind.DRIFT:
        adoptable, refusal = (
            None,
            "The target's record is the approved revision; what its site shows, and how to end that, is above.",
        )
    publication = None
    if operation.status == OperationStatus.SUCCEEDED:
        publication = Publication.objects.filter(revision=revision).first()
        if publication is not None:
            state = {
                "revision": revision.number,
                "payload_hash": publication.payload_hash,
                "id": publication.external_id,
                "operation_key": publication.operation_key,
                "permalink": publication.permalink,
            }
            held = HeldRevision(state, revision, approval)
    # When the target holds an approved revision to adopt, adopting ends it: no second way is offered.
    next_revision_number, next_revision_refusal = (
        (None, "") if adoptable else _publishable_as_next_revision(operation, revision, approval, conflict)
    )
    queued_by = None
    if operation.status in PROBLEM_QUEUED:
        queued_by = (
            AuditEvent.objects.filter(
                subject_type="operation", subject_id=operation.key, event_type__in=OPERATOR_RETRIES
            )
            .select_related("actor")
            .order_by("-created_at", "-id")
            .first()
        )
    return PublicationProblemView(
        operation=operation,
        brief=revision.brief,
        revision=revision,
        approval=approval,
        conflict=conflict,
        held=held,
        adoptable=adoptable,
        adopt_refusal=refusal,
        open=operation.status in PROBLEM_OPEN,
        queued_by=queued_by,
        publication=publication,
        next_revision_number=next_revision_number,
        next_revision_refusal=next_revision_refusal,
        drift=_drift_shown(conflict, revision),
    )


def _publishable_as_next_revision(
    operation: Operation, revision: Revision, approval: Approval | None, conflict: Conflict | None
) -> tuple[int | None, str]:
    """Whether the approved content of a publish the target's fence refused (a stale revision) can be
    written again as the brief's next revision, which the fence accepts once it is above the one the
    target holds; the new revision needs its own approval (invariant 3). Otherwise, why not.

    Galley numbers a brief's revisions 1, 2, 3… with no gap, so the next one is the latest + 1: it is
    offered only when that is above the target's revision, and only while the refused revision is the
    latest (a newer one is the editors' work, to approve instead)."""
    if operation.status not in PROBLEM_OPEN or operation.kind != PUBLISH:
        return None, ""
    if conflict is None or conflict.kind != Conflict.Kind.STALE_REVISION:
        return None, ""
    held = (conflict.target_state or {}).get("revision")
    if not isinstance(held, int) or isinstance(held, bool):
        return None, "Galley has no record of the revision number the target holds."
    if approval is None:
        return None, f"Revision {revision.number} is not approved: there is no approved content to publish again."
    latest = revision.brief.revisions.order_by("-number").values_list("number", flat=True).first() or 0
    if latest + 1 <= held:
        return None, (
            f"The target holds revision {held}, and Galley's next revision would be {latest + 1}, which its fence "
            "refuses too (Galley numbers revisions without gaps). Have the target's record of this brief "
            "fixed, then retry; or cancel with a reason."
        )
    if latest > revision.number:
        instead = f"approve and publish revision {latest}" if latest > held else "publish a newer revision"
        return None, (
            f"Revision {latest} is newer than revision {revision.number}, and the editors' newer work is not "
            f"overwritten: {instead} instead (the target accepts only revisions above {held})."
        )
    return latest + 1, ""


def _adoptable(operation: Operation, brief: Brief, held: HeldRevision | None) -> tuple[Revision | None, str]:
    """The approved revision the target holds, if adopting it publishes nothing unapproved and
    nothing older than what is published (invariants 3, 4); otherwise why not."""
    if operation.status not in PROBLEM_OPEN:
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


# --- approval → published latency (the ops page and /metrics) -----------------------------------


def _approval_to_published() -> ExpressionWrapper:
    """From the revision's first approval (the one that wrote the publish intent) to the read-back
    that showed it published (`verified_at`, invariant 10)."""
    first_approval = (
        Approval.objects.filter(revision=OuterRef("revision"), decision=Approval.Decision.APPROVED)
        .order_by("created_at", "id")
        .values("created_at")[:1]
    )
    return ExpressionWrapper(F("verified_at") - Subquery(first_approval), output_field=DurationField())


@dataclass(frozen=True)
class LatencyMinute:
    minute: datetime.datetime
    publications: int
    mean: datetime.timedelta
    longest: datetime.timedelta


def list_publish_latency_per_minute(*, since: datetime.datetime) -> list[LatencyMinute]:
    """Publications verified since `since`, per minute of verification: how many, and their mean
    and longest approval → published latency. One statement."""
    rows = (
        Publication.objects.filter(verified_at__gte=since)
        .order_by()
        .alias(latency=_approval_to_published())
        .annotate(minute=TruncMinute("verified_at"))
        .values("minute")
        .annotate(publications=Count("id"), mean=Avg("latency"), longest=Max("latency"))
        .order_by("minute")
    )
    return [LatencyMinute(**row) for row in rows]


@dataclass(frozen=True)
class LatencyHistogram:
    """Cumulative counts, as Prometheus reads a histogram: `buckets` pairs each upper bound (seconds)
    with the number of publications at most that slow."""

    buckets: list[tuple[float, int]]
    count: int
    sum_seconds: float


def get_publish_latency_histogram(*, bounds: Sequence[float]) -> LatencyHistogram:
    """Every verified publication's approval → published latency, bucketed by `bounds` (seconds,
    ascending) in one statement."""
    measured = Q(latency__isnull=False)
    figures = (
        Publication.objects.filter(verified_at__isnull=False)
        .annotate(latency=_approval_to_published())
        .aggregate(
            count=Count("id", filter=measured),
            total=Sum("latency", filter=measured),
            **{
                f"le_{index}": Count("id", filter=Q(latency__lte=datetime.timedelta(seconds=bound)))
                for index, bound in enumerate(bounds)
            },
        )
    )
    total = figures["total"] or datetime.timedelta()
    return LatencyHistogram(
        buckets=[(bound, figures[f"le_{index}"]) for index, bound in enumerate(bounds)],
        count=figures["count"],
        sum_seconds=total.total_seconds(),
    )


@dataclass(frozen=True)
class TokenTotal:
    step: str
    model: str  # "" when the step stored no artifact (its attempts failed)
    kind: str  # "prompt", "completion": the usage counter's name without "_tokens"
    tokens: int


# Every AI token the kept attempts of summary steps recorded (README, "How the AI summary works"),
# by step, the model of the artifact the step stored, and kind of token. One statement.
AI_TOKENS_SQL = f"""
SELECT o.arguments ->> 'step', coalesce(s.model, ''), left(u.key, -length('_tokens')), sum(u.value::bigint)
FROM {Attempt._meta.db_table} a
JOIN {Operation._meta.db_table} o ON o.id = a.operation_id
LEFT JOIN {StepArtifact._meta.db_table} s ON s.identity = o.result ->> 'artifact'
CROSS JOIN LATERAL jsonb_each_text(a.usage) u
WHERE o.kind = %(kind)s AND right(u.key, length('_tokens')) = '_tokens'
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
"""  # noqa: S608 -- table names from the models; every value is a parameter


def list_ai_token_totals() -> list[TokenTotal]:
    """AI tokens used, summed over the attempts kept (retention purges finished operations' attempts)."""
    with connection.cursor() as cursor:
        cursor.execute(AI_TOKENS_SQL, {"kind": SUMMARY_STEP})
        return [TokenTotal(step, model, kind, int(tokens)) for step, model, kind, tokens in cursor.fetchall()]
