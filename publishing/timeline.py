"""The brief page's timeline: everything that happened to one brief, as one list, newest first.

An AI summary run is one entry ("AI summary: ready"), its steps folded inside it; an operation (a
publish, its read-back check) is one entry, its tries folded inside it, told plainly
(publishing.trouble); workers, tokens, keys and hashes are its engineer detail.

A selector module: eight queries whatever the number of revisions, runs, operations, attempts,
decisions or comments (each kind is read once, with what its entries name joined in)."""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass

from django.urls import reverse

from approvals.models import Approval, Assignment, Comment
from publishing.identities import DRIFT_CHECK, PUBLISH, REPUBLISH, RETRACT, SUMMARY_STEP, VERIFY
from publishing.models import Brief, Publication, Revision, SummaryRun
from publishing.roles import AnyUser, Role, has_role
from publishing.selectors.summaries import RunOutcome, get_run_outcome
from publishing.story import correction_note
from publishing.summary_rules import SummaryStep
from publishing.trouble import OPERATION_OUTCOME, tell_attempt
from workers.models import Attempt, Operation, OperationStatus

# Who did it, when no person did: the pipeline and the publisher run in workers.
GALLEY = "Galley"


@dataclass(frozen=True)
class TimelineStep:
    """One step inside an entry (an AI run's steps, an operation's attempts), shown folded."""

    at: datetime.datetime | None
    description: str
    status: str = ""
    status_label: str = ""
    text: str = ""


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime.datetime
    kind: str  # revision | summary_run | operation | decision | comment | assignment | publication
    actor: str
    description: str
    status: str = ""  # a status badge (its CSS name) and its label, if the entry has one
    status_label: str = ""
    link: str = ""
    link_label: str = ""
    text: str = ""  # a decision's or comment's own words
    # Engineer detail (hashes, fencing tokens, worker ids, operation keys): folded away unless
    # the viewer is an operator.
    detail: tuple[tuple[str, str], ...] = ()
    # What it was made of, in plain words (an AI run's steps, an operation's attempts): folded.
    steps: tuple[TimelineStep, ...] = ()
    steps_label: str = ""


@dataclass(frozen=True)
class Timeline:
    entries: list[TimelineEntry]  # newest first
    detail_open: bool


def _revision_url(public_id: str, number: int) -> str:
    return reverse("publishing:revision", args=[public_id, number])


def _operation_label(operation: Operation) -> tuple[str, str]:
    """What the operation (not a summary step: those are inside their run's entry) does, in words,
    and the revision page it concerns (if any)."""
    number = operation.subject_version
    if operation.kind in (PUBLISH, VERIFY, DRIFT_CHECK, REPUBLISH, RETRACT) and isinstance(number, int):
        verb = {
            PUBLISH: "Publish",
            VERIFY: "Read-back check",
            DRIFT_CHECK: "Drift check",
            REPUBLISH: "Republish",
            RETRACT: f"Retraction on {operation.channel}",
        }
        return f"{verb[operation.kind]} of revision {number}", _revision_url(operation.subject_id, number)
    return operation.kind.replace("_", " ").capitalize(), ""


def _attempt_steps(operation: Operation) -> tuple[tuple[TimelineStep, ...], tuple[tuple[str, str], ...]]:
    """An operation's attempts: in plain words (the steps) and as engineer detail (worker, token, timings)."""
    steps, detail = [], []
    attempt: Attempt
    for attempt in operation.attempt_set.all():
        finished = attempt.finished_at is not None or bool(attempt.outcome)
        said = tell_attempt(outcome=attempt.outcome, error_kind=attempt.error_kind, finished=finished)
        steps.append(
            TimelineStep(
                at=attempt.started_at,
                description=f"Try {attempt.number}: {said}",
                status=attempt.outcome or "running",
                status_label=attempt.get_outcome_display() or "Running",
            )
        )
        machine = f"worker {attempt.worker_id}, fencing token {attempt.fencing_token}"
        if attempt.error_kind:
            machine += f", {attempt.error_kind}{f' {attempt.http_status}' if attempt.http_status else ''}"
        if attempt.duration_ms is not None:
            machine += f", {attempt.duration_ms} ms"
        if attempt.error_message:
            machine += f": {attempt.error_message[:300]}"
        detail.append((f"Attempt {attempt.number}", machine))
    return tuple(steps), tuple(detail)


def _operation_entry(operation: Operation) -> TimelineEntry:
    """One entry per operation, at the time it was queued (its outcome is the entry's status; the
    publication it made is an entry of its own, after it), its attempts folded inside it."""
    label, link = _operation_label(operation)
    steps, attempts_detail = _attempt_steps(operation)
    outcome = OPERATION_OUTCOME.get(operation.status, operation.get_status_display().lower())
    if operation.needs_operator:
        outcome += ", needs an operator"
    tries = len(steps)
    return TimelineEntry(
        at=operation.created_at,
        kind="operation",
        actor=GALLEY,
        description=f"{label}: {outcome}" + (f" after {tries} tries" if tries > 1 else ""),
        status=str(operation.status),
        status_label=operation.get_status_display(),
        link=link,
        link_label="the revision" if link else "",
        text=operation.last_error_message if operation.needs_operator else "",
        detail=(
            ("Operation key", operation.key),
            ("Payload hash", operation.payload_hash),
            ("Attempts", f"{operation.attempts} of {operation.max_attempts}"),
            *attempts_detail,
        ),
        steps=steps,
        steps_label=f"{tries} tr{'y' if tries == 1 else 'ies'}",
    )


def _revision_entry(public_id: str, revision: Revision) -> TimelineEntry:
    note = correction_note(revision.payload)
    what = f"revision {revision.number}, a correction" if note else f"revision {revision.number}"
    return TimelineEntry(
        at=revision.created_at,
        kind="revision",
        actor=revision.author.get_username(),
        description=f"Wrote {what}: “{revision.title}”",
        link=_revision_url(public_id, revision.number),
        link_label=f"Revision {revision.number}",
        text=note,
        detail=(("Payload hash", revision.payload_hash),),
    )


# An AI run's outcome, after "AI summary: ".
_RUN_SAID = {"running": "working", "completed": "ready", "superseded": "replaced by a newer run"}


def _run_entry(public_id: str, run: SummaryRun, outcome: RunOutcome, step_operations: list[Operation]) -> TimelineEntry:
    """One entry per AI summary run, at its latest change; its steps (and their tries) folded inside."""
    said = _RUN_SAID.get(outcome.state, outcome.label.lower())
    if outcome.state == "stopped":
        said = f"failed at step “{outcome.step}”" + ("" if run.revision_id else "; no revision came of it")
    steps = [TimelineStep(at=run.created_at, description="Started on the source material")]
    detail: list[tuple[str, str]] = [("Source hash", run.source_hash)]
    latest = run.finished_at or outcome.at or run.created_at
    for operation in step_operations:
        step = (operation.arguments or {}).get("step", "")
        label = SummaryStep(step).label if step in SummaryStep.values else str(step)
        tries = operation.attempt_set.all()
        result = OPERATION_OUTCOME.get(operation.status, operation.get_status_display().lower())
        if len(tries) > 1:
            result += f" after {len(tries)} tries"
        steps.append(
            TimelineStep(
                at=operation.updated_at,
                description=f"{label}: {result}",
                status=str(operation.status),
                status_label=operation.get_status_display(),
                text=operation.last_error_message if operation.status != OperationStatus.SUCCEEDED else "",
            )
        )
        latest = max(latest, operation.updated_at)
        detail.append(
            (f"Step “{label}”", f"{operation.key}, {operation.attempts} of {operation.max_attempts} attempts")
        )
    return TimelineEntry(
        at=latest,
        kind="summary_run",
        actor=GALLEY,
        description=f"AI summary: {said}",
        status=outcome.state,
        status_label=outcome.label,
        link=_revision_url(public_id, run.revision.number) if run.revision is not None else "",
        link_label=f"Revision {run.revision.number}" if run.revision is not None else "",
        text=outcome.reason if outcome.state == "stopped" else "",
        detail=tuple(detail),
        steps=tuple(steps),
        steps_label=f"{len(steps) - 1} step{'' if len(steps) == 2 else 's'}",
    )


def _decision_entry(public_id: str, approval: Approval) -> TimelineEntry:
    number = approval.revision.number
    verb = "Approved" if approval.decision == Approval.Decision.APPROVED else "Requested changes on"
    return TimelineEntry(
        at=approval.created_at,
        kind="decision",
        actor=approval.approver.get_username(),
        description=f"{verb} revision {number}",
        status=str(approval.decision),
        status_label=approval.get_decision_display(),
        link=_revision_url(public_id, number),
        link_label=f"Revision {number}",
        text=approval.comment,
        detail=(("Payload hash reviewed", approval.payload_hash),),
    )


def _comment_entry(public_id: str, comment: Comment) -> TimelineEntry:
    number = comment.revision.number
    return TimelineEntry(
        at=comment.created_at,
        kind="comment",
        actor=comment.author.get_username(),
        description=f"{'Replied in a thread' if comment.parent_id else 'Started a thread'} on revision {number}",
        link=f"{_revision_url(public_id, number)}#comment-{comment.parent_id or comment.pk}",
        link_label="The thread",
        text=comment.body,
    )


def _assignment_entry(assignment: Assignment) -> TimelineEntry:
    return TimelineEntry(
        at=assignment.created_at,
        kind="assignment",
        actor=assignment.assigned_by.get_username(),
        description=f"Assigned the review to {assignment.assignee_name}",
    )


def _publication_entry(public_id: str, publication: Publication, *, published_number: int | None) -> TimelineEntry:
    number = publication.revision.number
    if publication.verified_at is not None:
        corrected = correction_note(publication.revision.payload)
        what = f"Correction (revision {number})" if corrected else f"Revision {number}"
        description, status, label = f"{what} published, read back and verified", "published", "Published"
    elif published_number is not None and published_number > number:
        # Applied at the target but never finalized before a newer revision was published (recorded
        # when that one's verification closed this one's publish): it will never be verified.
        description = f"Revision {number} applied at the target, superseded: revision {published_number} is published"
        status, label = "superseded", "Superseded"
    else:
        description, status, label = f"Revision {number} applied at the target", "publishing", "Verifying"
    return TimelineEntry(
        at=publication.verified_at or publication.created_at,
        kind="publication",
        actor=GALLEY,
        description=description,
        status=status,
        status_label=label,
        link=publication.permalink,
        link_label=publication.permalink,
        detail=(
            ("External id", publication.external_id),
            ("Payload hash", publication.payload_hash),
            ("Operation key", publication.operation_key),
        ),
    )


def _retraction_entry(publication: Publication) -> TimelineEntry:
    """A publication taken down, observed (docs/retractions.md): an entry of its own beside the publication's."""
    return TimelineEntry(
        at=publication.retracted_at or publication.created_at,
        kind="publication",
        actor=GALLEY,
        description=f"Revision {publication.revision.number} retracted on {publication.channel.name}: read back "
        "as retracted, its permalink gone",
        status="retracted",
        status_label="Retracted",
        detail=(("External id", publication.external_id), ("Permalink", publication.permalink)),
    )


def get_brief_timeline(brief: Brief, *, viewer: AnyUser) -> Timeline:
    """Every revision, summary run, operation and attempt, decision, comment, assignment and
    publication of the brief, newest first (ties: the order they are listed here, reversed).
    Eight queries, whatever the brief's history."""
    public_id = brief.public_id
    entries: list[TimelineEntry] = []
    entries += [_revision_entry(public_id, r) for r in brief.revisions.select_related("author")]
    operations = list(
        Operation.objects.for_subject("brief", public_id)
        # A drift check that found the site as approved is routine, a few a day: only one that found
        # something is the brief's history.
        .exclude(kind=DRIFT_CHECK, status=OperationStatus.SUCCEEDED)
        .prefetch_related("attempt_set")
        .order_by("id")
    )
    steps_by_run: dict[object, list[Operation]] = defaultdict(list)
    for operation in operations:
        if operation.kind == SUMMARY_STEP:
            steps_by_run[(operation.arguments or {}).get("run")].append(operation)
    for run in brief.summary_runs.select_related("revision"):
        run_steps = steps_by_run[run.number]
        entries.append(_run_entry(public_id, run, get_run_outcome(run, run_steps), run_steps))
    entries += [_operation_entry(op) for op in operations if op.kind != SUMMARY_STEP]
    approvals = Approval.objects.filter(revision__brief=brief).select_related("approver", "revision")
    entries += [_decision_entry(public_id, approval) for approval in approvals]
    comments = Comment.objects.filter(revision__brief=brief).select_related("author", "revision")
    entries += [_comment_entry(public_id, comment) for comment in comments]
    assignments = Assignment.objects.filter(brief=brief).select_related("assignee", "group", "assigned_by")
    entries += [_assignment_entry(assignment) for assignment in assignments]
    publications = Publication.objects.filter(brief=brief).select_related("revision", "channel")
    published_number = brief.published_revision_number
    entries += [_publication_entry(public_id, p, published_number=published_number) for p in publications]
    entries += [_retraction_entry(p) for p in publications if p.retracted_at is not None]
    # Stable sort: entries with the same time keep the order above (a revision before its decision).
    ordered = sorted(enumerate(entries), key=lambda pair: (pair[1].at, pair[0]), reverse=True)
    return Timeline(
        entries=[entry for _, entry in ordered],
        detail_open=has_role(viewer, Role.OPERATOR),
    )
