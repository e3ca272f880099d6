"""Channels: where approved revisions are published (PRODUCT.md §7.8). Their credentials are
write-only (the admin) and never part of an answer."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Router, Schema

from publishing.api.common import PROBLEMS
from publishing.errors import PermissionRefused
from publishing.models import ChannelKind
from publishing.roles import can_view
from publishing.selectors.channels import RECEIPT_STATES, ChannelReceipt, list_channels

router = Router(tags=["channels"])


class ChannelOut(Schema):
    slug: str
    name: str
    kind: ChannelKind
    enabled: bool
    is_default: bool = Field(description="New briefs go to the default channels.")


class ChannelList(Schema):
    items: list[ChannelOut]


class ChannelReceiptOut(Schema):
    """Where one revision stands on one channel it was sent to."""

    channel: str = Field(description="The channel's slug.")
    name: str
    revision: int
    state: str = Field(description=" | ".join(RECEIPT_STATES))
    why: str = Field(description="In plain words: waiting, needs_operator, superseded, cancelled; else empty.")
    until: datetime | None = Field(description="waiting: the next try.")
    permalink: str = Field(description="published, verified: where it is; else empty.")
    verified_at: datetime | None


def receipt_out(receipt: ChannelReceipt) -> ChannelReceiptOut:
    return ChannelReceiptOut.model_validate(receipt, from_attributes=True)


@router.get("/channels", response={200: ChannelList, **PROBLEMS}, summary="List channels")
def get_channels(request: HttpRequest) -> ChannelList:
    """Every channel, the one the GALLEY_TARGET_* settings define first; never its credentials."""
    if not can_view(request.auth):  # type: ignore[attr-defined]
        raise PermissionRefused("You need the Editors, Approvers or Operators role to see channels.")
    return ChannelList(items=[ChannelOut.model_validate(channel, from_attributes=True) for channel in list_channels()])
