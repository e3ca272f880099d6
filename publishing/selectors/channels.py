"""What people see per channel: a revision's receipt on each channel it was sent to (the brief page,
the revision page, the API), and how many of those channels publish it (the brief list's "published
on 2 of 3 channels" and its partial-publication filter).

A receipt is read from the publish and verify operations of the revision on that channel and its
publication there; the channels a revision goes to are the ones its approval wrote a publish
operation for (the frozen set, invariant 14), not the brief's channels today."""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery

from publishing.identities import PRIMARY_CHANNEL, PUBLISH, VERIFY, revision_number
from publishing.models import Brief, Channel, Publication, Revision
from publishing.selectors.overdue import get_overdue_by_key
from publishing.trouble import tell_retrying, tell_stopped
from workers.models import Operation, OperationStatus

S = OperationStatus

QUEUED, SENDING, WAITING, PUBLISHED, VERIFIED = "queued", "sending", "waiting", "published", "verified"
NEEDS_OPERATOR, SUPERSEDED, CANCELLED = "needs_operator", "superseded", "cancelled"
RECEIPT_STATES = (QUEUED, SENDING, WAITING, PUBLISHED, VERIFIED, NEEDS_OPERATOR, SUPERSEDED, CANCELLED)

# Each state's badge, as the status badges' CSS names (galley.css) and words.
_BADGE = {
    QUEUED: ("publishing", "Queued"),
    SENDING: ("publishing", "Sending…"),
    WAITING: ("publishing", "Waiting to retry"),
    PUBLISHED: ("publishing", "Published, checking"),
    VERIFIED: ("published", "Published"),
    NEEDS_OPERATOR: ("failed", "Needs an operator"),
    SUPERSEDED: ("superseded", "Not published"),
    CANCELLED: ("cancelled", "Not published"),
}


@dataclass(frozen=True)
class ChannelReceipt:
    """Where one revision stands on one channel."""

    channel: str  # the channel's slug
    name: str
    revision: int
    state: str  # one of RECEIPT_STATES
    why: str = ""  # waiting, needs_operator, superseded, cancelled: in plain words (publishing.trouble)
    until: datetime.datetime | None = None  # waiting: the next try
    permalink: str = ""  # published, verified
    verified_at: datetime.datetime | None = None
    # Who added the channel to the approval afterwards ("also publish to"), and when; "" for the
    # approval's own set (filled in by the brief page: approvals.selectors.list_added_channels).
    added_by: str = ""
    added_at: datetime.datetime | None = None
    # A schedule past GALLEY_SCHEDULE_LATENESS_SECONDS (publishing.selectors.overdue): its T, how late it is
    # ("2 min") and why it waits; "" when it is not overdue.
    scheduled_for: datetime.datetime | None = None
    overdue_by: str = ""
    overdue_why: str = ""

    @property
    def in_progress(self) -> bool:
        """It may still change by itself (a worker will act on it)."""
        return self.state in (QUEUED, SENDING, WAITING, PUBLISHED)

    @property
    def badge(self) -> str:
        return _BADGE[self.state][0]

    @property
    def label(self) -> str:
        return _BADGE[self.state][1]


def _latest_publish_revision(public_id: str | OuterRef) -> Subquery:
    """The newest revision of the brief an approval sent anywhere (a probe of operation_subject_version_idx)."""
    publishes = Operation.objects.filter(subject_type="brief", subject_id=public_id, kind=PUBLISH)
    return Subquery(publishes.order_by("-subject_version").values("subject_version")[:1])


@dataclass(frozen=True)
class _OnChannel:
    """A channel's name and the revision's publication there, if any (applied, and maybe verified)."""

    name: str
    applied: bool = False
    permalink: str = ""
    verified_at: datetime.datetime | None = None


def _receipt(slug: str, number: int, publish: Operation, verify: Operation | None, there: _OnChannel) -> ChannelReceipt:
    def receipt(state: str, **told: Any) -> ChannelReceipt:
        return ChannelReceipt(slug, there.name, number, state, **told)

    if there.verified_at is not None:
        return receipt(VERIFIED, permalink=there.permalink, verified_at=there.verified_at)
    for operation in (publish, verify):
        if operation is not None and operation.status in (S.DEAD, S.CONFLICT):
            return receipt(NEEDS_OPERATOR, why=tell_stopped(operation, place=there.name).sentence)
    for operation in (publish, verify):
        if operation is not None and operation.status in (S.SUPERSEDED, S.CANCELLED):
            fallback = "a newer revision took its place" if operation.status == S.SUPERSEDED else "cancelled"
            return receipt(str(operation.status), why=operation.last_error_message.strip() or fallback)
    if there.applied or publish.status == S.SUCCEEDED:
        return receipt(PUBLISHED, permalink=there.permalink)
    if publish.status == S.RETRY_WAIT:
        return receipt(WAITING, why=tell_retrying(publish, place=there.name), until=publish.next_attempt_at)
    return receipt(SENDING if publish.status == S.RUNNING else QUEUED)


def _on_channels(brief: Brief, number: int, slugs: list[str]) -> dict[str, _OnChannel]:
    """Each channel's name with revision `number`'s publication there, in one statement (a
    publication is one per revision and channel: constraint publication_one_per_revision_channel)."""
    there = Publication.objects.filter(channel=OuterRef("pk"), brief=brief, revision__number=number)
    rows = (
        Channel.objects.filter(slug__in=slugs)
        .annotate(
            applied=Exists(there),
            permalink=Subquery(there.values("permalink")[:1]),
            verified_at=Subquery(there.values("verified_at")[:1]),
        )
        .values_list("slug", "name", "applied", "permalink", "verified_at")
    )
    return {
        slug: _OnChannel(name, applied, permalink or "", verified_at)
        for slug, name, applied, permalink, verified_at in rows
    }


def get_channel_receipts(brief: Brief, number: int | None = None) -> list[ChannelReceipt]:
    """One receipt per channel revision `number` of the brief was sent to (default: the newest
    revision an approval sent), the primary channel first, then by name; [] when none was sent.
    Two queries (the operations; the channels with the publications) for any number of channels;
    one when nothing was sent."""
    version = number if number is not None else _latest_publish_revision(brief.public_id)
    operations = list(
        Operation.objects.filter(
            Q(subject_version=version), subject_type="brief", subject_id=brief.public_id, kind__in=(PUBLISH, VERIFY)
        ).order_by("id")
    )
    # Publish and verify operations written before channels existed name none: they were the primary's.
    publishes = {op.channel or PRIMARY_CHANNEL: op for op in operations if op.kind == PUBLISH}
    if not publishes:
        return []
    revision = revision_number(next(iter(publishes.values())))
    # The newest verify per channel: a republish after a resolved conflict verifies again.
    verifies = {op.channel or PRIMARY_CHANNEL: op for op in operations if op.kind == VERIFY}
    there = _on_channels(brief, revision, list(publishes))
    receipts = [
        _receipt(slug, revision, publish, verifies.get(slug), there.get(slug) or _OnChannel(slug))
        for slug, publish in publishes.items()
    ]
    receipts = _with_overdue(receipts, publishes)
    return sorted(receipts, key=lambda receipt: (receipt.channel != PRIMARY_CHANNEL, receipt.name, receipt.channel))


def _late(delta: datetime.timedelta) -> str:
    seconds = max(int(delta.total_seconds()), 0)
    return f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"


def _with_overdue(receipts: list[ChannelReceipt], publishes: dict[str, Operation]) -> list[ChannelReceipt]:
    """The receipts, those of an overdue schedule saying so: by the overdue rule, asked only when a
    scheduled publish is still on its way (so an unscheduled revision's page costs no query more)."""
    waiting = [publishes[r.channel].key for r in receipts if publishes[r.channel].scheduled_for and r.in_progress]
    overdue = get_overdue_by_key(waiting) if waiting else {}
    marked = []
    for receipt in receipts:
        schedule = overdue.get(publishes[receipt.channel].key)
        if schedule is not None:
            receipt = dataclasses.replace(
                receipt,
                scheduled_for=schedule.scheduled_for,
                overdue_by=_late(schedule.overdue_by),
                overdue_why=schedule.why,
            )
        marked.append(receipt)
    return marked


class _Count(Subquery):
    """A subquery's row count as a column of the outer query."""

    template = "(SELECT count(*) FROM (%(subquery)s) _counted)"
    output_field = IntegerField()


def with_publication_counts(briefs: QuerySet[Brief]) -> QuerySet[Brief]:
    """Annotate each brief with `receipt_revision` (the newest revision an approval sent, or None),
    `receipt_channels` (how many channels it was sent to) and `receipt_published` (on how many it is
    published and verified): "published on 2 of 3 channels". Columns of the outer query, each an
    index probe per brief (operation_subject_version_idx; the revision by the (brief, number) unique
    index, then its publications by their revision): no extra query, nothing per channel."""
    sent = Operation.objects.filter(
        subject_type="brief",
        subject_id=OuterRef("public_id"),
        kind=PUBLISH,
        subject_version=OuterRef("receipt_revision"),
    )
    revision = Revision.objects.filter(brief=OuterRef("pk"), number=OuterRef("receipt_revision")).values("id")[:1]
    verified = Publication.objects.filter(revision_id=OuterRef("receipt_revision_id"), verified_at__isnull=False)
    return (
        briefs.annotate(receipt_revision=_latest_publish_revision(OuterRef("public_id")))
        .annotate(receipt_revision_id=Subquery(revision))
        .annotate(receipt_channels=_Count(sent.values("id")), receipt_published=_Count(verified.values("id")))
    )


def only_partly_published(briefs: QuerySet[Brief]) -> QuerySet[Brief]:
    """The briefs whose newest sent revision is published on some of its channels but not all. Only
    briefs with a verified publication are counted (a semi-join on the publications), so the count's
    probes run for published briefs, not for every brief."""
    verified = Publication.objects.filter(verified_at__isnull=False).values("brief_id")
    counted = with_publication_counts(briefs.filter(pk__in=verified))
    return counted.filter(Q(receipt_published__gte=1) & Q(receipt_published__lt=F("receipt_channels")))


@dataclass(frozen=True)
class PublishedOn:
    published: int
    channels: int

    @property
    def partial(self) -> bool:
        return 0 < self.published < self.channels

    def __str__(self) -> str:
        noun = "channel" if self.channels == 1 else "channels"
        return f"published on {self.published} of {self.channels} {noun}"


def tally_receipts(receipts: list[ChannelReceipt]) -> PublishedOn:
    """On how many of the channels in these receipts (one revision's) it is published (verified)."""
    return PublishedOn(published=sum(r.state == VERIFIED for r in receipts), channels=len(receipts))


def count_published_on(brief: Brief) -> PublishedOn:
    """On how many of the channels its newest sent revision went to the brief is published (verified).
    Reads the annotations of with_publication_counts when the brief has them, else one query."""
    if not hasattr(brief, "receipt_channels"):
        brief = with_publication_counts(Brief.objects.filter(pk=brief.pk)).get()
    return PublishedOn(
        published=getattr(brief, "receipt_published", 0) or 0, channels=getattr(brief, "receipt_channels", 0) or 0
    )


def list_channels() -> QuerySet[Channel]:
    """Every channel, the settings' one first (Channel.Meta.ordering); its credentials are the
    caller's to leave out."""
    return Channel.objects.only("slug", "name", "kind", "enabled", "is_default", "from_settings")


def list_brief_channel_slugs(brief: Brief) -> list[str]:
    """The brief's channels (where its next approval publishes), by slug."""
    return list(brief.channels.order_by("-from_settings", "slug").values_list("slug", flat=True))
