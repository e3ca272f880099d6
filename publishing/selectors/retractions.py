"""What a retraction takes down (docs/retractions.md): per channel, the newest publication of the brief that
is not retracted yet, and each channel's retraction as the brief page and the API show it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from django.db.models import OuterRef, Subquery
from django.db.models.functions import Now

from publishing.identities import RETRACT
from publishing.models import Brief, Publication
from workers.models import Operation


@dataclass(frozen=True)
class Holding:
    """Channel `channel` holds revision `number` of the brief through `publication`."""

    channel: str
    channel_name: str
    number: int
    publication: Publication


def list_holdings(brief: Brief) -> list[Holding]:
    """Every channel holding a publication of `brief` not yet retracted, with the newest such revision
    there (the one a retraction names; the target takes its older ones down with it), by channel slug.
    A publication counts from the moment it was applied (recorded), verified or not: it is at the target."""
    newest: dict[str, Publication] = {}
    publications = (
        Publication.objects.filter(brief=brief, retracted_at__isnull=True)
        .select_related("revision", "channel")
        .order_by("channel__slug", "-revision__number")
    )
    for publication in publications:
        newest.setdefault(publication.channel.slug, publication)
    return [
        Holding(
            channel=slug,
            channel_name=publication.channel.name,
            number=publication.revision.number,
            publication=publication,
        )
        for slug, publication in sorted(newest.items())
    ]


@dataclass(frozen=True)
class ChannelRetraction:
    """A channel's retraction of the brief: which revision, its operation's status, when it is due,
    and when it was observed (None while it is not)."""

    channel: str
    number: int
    status: str
    due_at: datetime | None
    retracted_at: datetime | None
    operation_key: str
    zone: str = ""  # the zone a scheduled retraction's T was given in (docs/retractions.md#request)
    server_now: datetime | None = None  # the database's clock when read: the countdown runs on it

    @property
    def due_local(self) -> datetime | None:
        """T in the zone it was given in."""
        if self.due_at is None or not self.zone:
            return self.due_at
        return self.due_at.astimezone(ZoneInfo(self.zone))

    @property
    def waiting(self) -> bool:
        """Scheduled and not yet claimed: the countdown shows."""
        return self.due_at is not None and self.status == "pending" and self.retracted_at is None

    @property
    def label(self) -> str:
        if self.retracted_at is not None:
            return f"Retracted (revision {self.number})"
        if self.status in ("conflict", "dead"):
            return f"Retraction of revision {self.number} needs an operator"
        if self.status in ("cancelled", "superseded"):
            return f"Retraction of revision {self.number} {self.status}"
        return f"Retraction of revision {self.number} under way"


def list_channel_retractions(brief: Brief) -> list[ChannelRetraction]:
    """The brief's retraction operations, one per channel and revision, by channel then revision, with
    when each was observed there (the publication's retracted_at). One query; none for a brief never
    retracted (every retraction request sets its fence first), so the brief page of every other brief
    pays nothing."""
    if brief.retracted_revision_number is None:
        return []
    observed = Publication.objects.filter(
        brief=brief, channel__slug=OuterRef("channel"), revision__number=OuterRef("subject_version")
    ).values("retracted_at")[:1]
    operations = (
        Operation.objects.filter(subject_type="brief", subject_id=brief.public_id, kind=RETRACT)
        .annotate(observed_at=Subquery(observed), database_now=Now())
        .order_by("channel", "subject_version")
    )
    return [
        ChannelRetraction(
            channel=operation.channel,
            number=operation.subject_version or 0,
            status=operation.status,
            due_at=operation.scheduled_for,
            retracted_at=operation.observed_at,
            operation_key=operation.key,
            zone=str(operation.arguments.get("zone", "")),
            server_now=operation.database_now,
        )
        for operation in operations
    ]
