"""A publication problem as an operator settles it: Galley's intent beside what the target held,
and which ending actions apply. publishing.actions.resolutions reads it, so it asks for the valid
approval through publishing.approval and imports nothing of approvals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Model

from publishing.approval import get_valid_approval
from publishing.diffs import PayloadDiff, diff_payloads
from publishing.identities import PUBLICATION_KINDS, PUBLISH, RETRACT, publish_key, revision_number
from publishing.models import Brief, Publication, Revision
from publishing.selectors.publications import get_published_number
from publishing.story import html_paragraphs, render_story
from workers.models import AuditEvent, Conflict, Operation, OperationStatus

# A publication problem's phases, by its operation's status: it waits for an operator; an operator's
# retry or look-up is queued (or running) and its outcome is not known yet; or it is over.
PROBLEM_OPEN = (OperationStatus.DEAD, OperationStatus.CONFLICT)
# The operations whose problems an operator settles here: a publication's, and a retraction's
# (docs/retractions.md#operators), which takes only the endings that fit it: retry, look up, cancel.
PROBLEM_KINDS = (*PUBLICATION_KINDS, RETRACT)
RETRACTION_ADOPTS_NOTHING = (
    "A retraction adopts nothing: “Look up at the target” adopts a retraction it holds under this key. When "
    "the target holds a newer revision, cancel this retraction (that revision stays) or retract the brief "
    "again from its page (docs/retractions.md#race)."
)
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
    approval: Model | None


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
    # Compared as text: the site's content is HTML (the rendered body, or what an editor typed there),
    # the revision's body Markdown; each becomes the plain paragraphs a reader sees.
    approved_text = {"title": revision.title, "body": html_paragraphs(render_story(revision.payload)["content_html"])}
    shown_text = {"title": shown["title"], "body": html_paragraphs(shown["body"])}
    return DriftShown(
        title=shown["title"],
        body=shown["body"],
        excerpt=str(live.get("excerpt", "")),
        status=str(live.get("status", "")),
        hash=str(live.get("hash", "")),
        modified_gmt=str(live.get("modified_gmt", "")),
        diff=diff_payloads(
            approved_text, shown_text, old_label=f"revision {revision.number} (approved)", new_label="the site now"
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
    approval: Model | None
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
        brief__public_id=public_id, number=revision_number(operation)
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
    if operation.kind == RETRACT:
        adoptable, refusal = None, RETRACTION_ADOPTS_NOTHING
    elif conflict is not None and conflict.kind == Conflict.Kind.DRIFT:
        adoptable, refusal = (
            None,
            "The target's record is the approved revision; what its site shows, and how to end that, is above.",
        )
    publication = None
    if operation.status == OperationStatus.SUCCEEDED:
        publication = Publication.objects.filter(revision=revision, channel__slug=operation.channel).first()
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
    operation: Operation, revision: Revision, approval: Model | None, conflict: Conflict | None
) -> tuple[int | None, str]:
    """Whether the approved content of a publish the target's fence refused (a stale revision) can be
    written again as the brief's next revision, which the fence accepts once it is above the one the
    target holds; the new revision needs its own approval (docs/invariants.md#i3). Otherwise, why not.

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
    nothing older than what is published (docs/invariants.md#i3, #i4); otherwise why not."""
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
    published = get_published_number(brief, channel=operation.channel)
    if published is not None and held.revision.number < published:
        return None, f"The target holds revision {held.revision.number}, older than the published revision {published}."
    publish = Operation.objects.filter(
        key=publish_key(brief.public_id, held.revision.number, operation.channel)
    ).first()
    if publish is None or publish.status in (OperationStatus.CANCELLED, OperationStatus.SUPERSEDED):
        return (
            None,
            f"The publish of revision {held.revision.number} has ended "
            f"({publish.status if publish else 'none'}); publish a newer revision instead.",
        )
    return held.revision, ""
