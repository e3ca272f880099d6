"""Corrections (docs/editorial.md#corrections): which channels hold a brief, so a correction reaches each of
them (docs/invariants.md#i16), and the brief's corrections as its page and the API list them.

A channel **holds** a brief once a revision of it was applied there: it has a Publication of it (applied,
verified or still being read back). That is what a reader of that channel may be reading, so that is
where a correction must go. A channel an earlier revision is still on its way to (its publish not yet
applied, neither superseded nor cancelled) counts too: it is about to hold the text being corrected, and
the correction's own publish there supersedes that one (publishing.actions.publications).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.contrib.postgres.aggregates import JSONBAgg
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import JSONObject
from django.utils.dateparse import parse_datetime

from publishing.identities import PRIMARY_CHANNEL, PUBLISH
from publishing.models import Brief, Channel, Publication, Revision
from publishing.story import correction_note
from workers.models import Operation, OperationStatus


@dataclass(frozen=True)
class Holder:
    """A channel holding the brief, the newest earlier revision applied there (or on its way there), and
    whether that one is applied already."""

    channel: Channel
    revision: int
    applied: bool

    @property
    def holds(self) -> str:
        """What it holds, in words: "holds revision 1", "is being sent revision 1"."""
        return f"{'holds' if self.applied else 'is being sent'} revision {self.revision}"


def channel_order(slug: str) -> tuple[bool, str]:
    """How channel sets are listed everywhere: the primary channel first, then by slug."""
    return (slug != PRIMARY_CHANNEL, slug)


def has_publication(brief: Brief) -> bool:
    """Whether any channel holds the brief (a correction is only a correction of something published)."""
    return Publication.objects.filter(brief=brief).exists()


def list_holding_channels(brief: Brief, *, before: int) -> list[Holder]:
    """The channels holding a revision of `brief` numbered below `before` (or to which one is on its way),
    each with the newest such revision, the primary channel first. One query; disabled channels too (they
    still show the old text)."""
    applied = Publication.objects.filter(brief=brief, channel=OuterRef("pk"), revision__number__lt=before)
    on_its_way = Operation.objects.for_subject("brief", brief.public_id).filter(
        kind=PUBLISH, channel=OuterRef("slug"), subject_version__lt=before
    )
    rows = (
        Channel.objects.annotate(
            held=Subquery(applied.order_by("-revision__number").values("revision__number")[:1]),
            sent=Subquery(
                on_its_way.exclude(status__in=[OperationStatus.SUPERSEDED, OperationStatus.CANCELLED])
                .order_by("-subject_version")
                .values("subject_version")[:1]
            ),
        )
        .filter(Q(held__isnull=False) | Q(sent__isnull=False))
        .order_by()
    )
    holders = []
    for row in rows:
        held, sent = getattr(row, "held"), getattr(row, "sent")  # noqa: B009 -- annotations
        newest = max(number for number in (held, sent) if number is not None)
        holders.append(Holder(channel=row, revision=newest, applied=held == newest))
    return sorted(holders, key=lambda holder: channel_order(holder.channel.slug))


def get_newer_sent_correction(brief: Brief, number: int) -> int | None:
    """The newest correction of `brief` after revision `number` that an approval sent somewhere, if any:
    revision `number` must then reach no new channel, which would show the text it corrects."""
    publishes = Operation.objects.for_subject("brief", brief.public_id).filter(kind=PUBLISH)
    sent = publishes.filter(subject_version=OuterRef("number"))
    newer = Revision.objects.filter(brief=brief, number__gt=number, payload__correction=True).filter(Exists(sent))
    return newer.order_by("-number").values_list("number", flat=True).first()


@dataclass(frozen=True)
class Reached:
    """A channel a correction was applied on: where, and since when it was read back (None: not yet)."""

    channel: str
    name: str
    permalink: str
    published_at: datetime.datetime | None
    verified_at: datetime.datetime | None


@dataclass(frozen=True)
class Correction:
    revision: int
    note: str
    created_at: datetime.datetime
    author: str
    channels: list[Reached]  # the channels it reached: the primary one first, then by slug; empty until one applied it


def _when(value: str | None) -> datetime.datetime | None:
    return parse_datetime(value) if value else None


def list_corrections(brief: Brief) -> list[Correction]:
    """The brief's corrections, newest first, each with the channels it reached. One query, whatever the
    number of corrections and channels (the publications aggregated as JSON beside each revision)."""
    reached = JSONBAgg(
        JSONObject(
            channel=F("publications__channel__slug"),
            name=F("publications__channel__name"),
            permalink=F("publications__permalink"),
            published_at=F("publications__created_at"),
            verified_at=F("publications__verified_at"),
        ),
        filter=Q(publications__isnull=False),
        default=[],
    )
    rows = (
        Revision.objects.filter(brief=brief, payload__correction=True)
        .annotate(reached=reached, author_name=F("author__username"))
        .order_by("-number")
    )
    corrections = []
    for row in rows:
        channels = [
            Reached(
                channel=item["channel"],
                name=item["name"],
                permalink=item["permalink"],
                published_at=_when(item["published_at"]),
                verified_at=_when(item["verified_at"]),
            )
            for item in getattr(row, "reached")  # noqa: B009 -- an annotation
        ]
        corrections.append(
            Correction(
                revision=row.number,
                note=correction_note(row.payload),
                created_at=row.created_at,
                author=str(getattr(row, "author_name")),  # noqa: B009 -- an annotation
                channels=sorted(channels, key=lambda item: channel_order(item.channel)),
            )
        )
    return corrections
