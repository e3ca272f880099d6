"""A revision's way to the target, for display (its publication state, a brief's badge), and the
publication a verification reads (its first read, and the newer revisions Galley sent)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Q
from psycopg.rows import dict_row

from publishing.identities import PRIMARY_CHANNEL, PUBLISH, VERIFY, publish_key, verify_key
from publishing.models import Brief, Publication, Revision
from publishing.sql import BADGE_OPERATIONS_SQL, PUBLICATION_SQL, from_row
from publishing.trouble import Told, tell_brief_publishing, tell_publication
from workers.models import Operation, OperationStatus
from workers.prepared import execute_prepared


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

    @property
    def badge_label(self) -> str:
        """The badge beside the told sentence (which says why a publication ended)."""
        return "Not published" if self.state in ("superseded", "cancelled") else self.label

    @property
    def told(self) -> Told:
        """The state in plain words, with the reader's next step (publishing.trouble)."""
        return tell_publication(self.state, publication=self.publication, operations=self.operations)


def _publication_ended(operations: Sequence[Operation]) -> tuple[str, str] | None:
    """The state and label of a revision's publication that ended without being published, from its
    publish and verify operations (in id order): stuck for an operator ("Needs an operator"), or
    cancelled or superseded ("Not published: " and why).
    None while it is not over (or never began). The revision page and the brief's badge both ask this."""
    stuck = [op for op in operations if op.status in (OperationStatus.DEAD, OperationStatus.CONFLICT)]
    if stuck:
        # The badge is short: why, and the next step, are publishing.trouble's sentence beside it.
        return "failed", "Needs an operator"
    # An ended verification (a newer revision shown, an operator's settlement) ends it as well as an
    # ended publish: it is not still publishing.
    for kind in (PUBLISH, VERIFY):
        ended = next((op for op in operations if op.kind == kind), None)
        if ended is not None and ended.status in (OperationStatus.SUPERSEDED, OperationStatus.CANCELLED):
            return str(ended.status), f"Not published: {ended.last_error_message or ended.get_status_display()}"
    return None


def get_publication_state(revision: Revision) -> PublicationState:
    """The revision on the primary channel (its unextended keys); each channel's own state is its
    receipt (publishing.selectors.channels)."""
    public_id = revision.brief.public_id
    keys = [publish_key(public_id, revision.number), verify_key(public_id, revision.number)]
    operations = list(Operation.objects.filter(key__in=keys).prefetch_related("attempt_set").order_by("id"))
    # The primary channel's publication, as its operations are: another channel's would show its
    # permalink as the website's, and call the revision published while the website still waits.
    publication = Publication.objects.filter(revision=revision, channel__slug=PRIMARY_CHANNEL).first()
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
    note: str = ""  # why, when the badge is not the brief's own status, or a publish under way is in trouble


def list_brief_badges(briefs: Iterable[tuple[Brief, int | None]]) -> dict[int, BriefBadge]:
    """Each brief's badge, by brief id, given its latest revision number: its own status, except an
    approved brief whose publish ended without publishing (an operator cancelled it, a newer intent
    replaced it, or it needs an operator) — "Approved" alone would promise a publication that is not
    coming. The note tells why in plain words, with the next step (publishing.trouble); for an
    approved brief whose publish is retrying after a failure, it tells that. One statement for the
    approved ones' publish and verify operations, whether there are any or not: a page's query count
    does not depend on what it lists."""
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
        own = operations.get(brief.pk, [])
        ended = _publication_ended(own)
        if ended is None:
            trouble = tell_brief_publishing(own)
            badges[brief.pk] = BriefBadge(str(brief.status), brief.get_status_display(), str(trouble or ""))
        else:
            state, label = ended
            shown = "Approved, publishing needs an operator" if state == "failed" else "Approved, not published"
            note = str(tell_publication(state, publication=None, operations=own)) if state == "failed" else label
            badges[brief.pk] = BriefBadge(state, shown, note)
    return badges


def get_publication(operation_key: str) -> Publication:
    """The publication the publish operation `operation_key` recorded, with its revision (a verify's
    first read: a prepared statement). Raises Publication.DoesNotExist."""
    with execute_prepared(PUBLICATION_SQL, {"key": operation_key}, row_factory=dict_row) as cursor:
        row = cursor.fetchone()
    if row is None:
        raise Publication.DoesNotExist(f"no publication has the key {operation_key}")
    publication = from_row(Publication, row)
    publication.revision = from_row(Revision, row, prefix="revision__")
    return publication


def list_newer_sent_revisions(publication: Publication, *, public_id: str, channel: str) -> list[Revision]:
    """The revisions of the publication's brief newer than its own that Galley has published on
    `channel` (each has a publication there: the channel applied it) or sent there (its publish has made
    an attempt, and may just not be recorded yet), newest first. A verification that finds the channel
    showing one of them is over (superseded), not failed. Two queries; only on a verification's failure
    path."""
    sent = Operation.objects.filter(
        subject_type="brief", subject_id=public_id, kind=PUBLISH, channel=channel, attempts__gt=0
    ).values_list("subject_version", flat=True)
    return list(
        Revision.objects.filter(brief_id=publication.brief_id, number__gt=publication.revision.number)
        .filter(Q(publications__channel_id=publication.channel_id) | Q(number__in=sent))
        .distinct()
        .order_by("-number")
    )


def get_published_number(brief: Brief, *, channel: str) -> int | None:
    """The highest revision of `brief` verified on `channel` (docs/invariants.md#i4 holds per channel:
    nothing older may replace it there); None before the first."""
    return (
        Publication.objects.filter(brief=brief, channel__slug=channel, verified_at__isnull=False)
        .order_by("-revision__number")
        .values_list("revision__number", flat=True)
        .first()
    )


def get_newer_sent_number(brief: Brief, number: int, *, channel: str) -> int | None:
    """The newest revision of `brief` above `number` whose publish to `channel` exists and has not been
    superseded or cancelled (it is or was on its way there); None when there is none. What an "also
    publish to" of revision `number` would regress below (docs/invariants.md#i4, per channel)."""
    return (
        Operation.objects.for_subject("brief", brief.public_id)
        .filter(kind=PUBLISH, channel=channel, subject_version__gt=number)
        .exclude(status__in=(OperationStatus.SUPERSEDED, OperationStatus.CANCELLED))
        .order_by("-subject_version")
        .values_list("subject_version", flat=True)
        .first()
    )
