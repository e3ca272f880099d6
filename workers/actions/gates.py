"""Channel gates: a channel's rate limit and its Retry-After pauses, shared by every worker on every
host through one PostgreSQL row per channel (workers.models.ChannelGate;
docs/operations.md#rate-limits-and-pauses). Waiting at a gate never counts against an operation's
attempts (docs/invariants.md#i9).
"""

from __future__ import annotations

import datetime
import logging
import time

from django.db.models.functions import Now
from psycopg.rows import dict_row

from workers.errors import FailureKind, OperationFailed
from workers.models import ChannelGate
from workers.prepared import execute_prepared
from workers.registry import ClaimedOperation
from workers.sql import PAUSE_CHANNEL_SQL, RESERVE_SEND_SQL

logger = logging.getLogger(__name__)

# A send whose slot is at most this far away sleeps in its worker until the slot; a later one hands
# its thread back (a wait, due at its slot) rather than hold it idle.
SLOT_SLEEP_SECONDS = 0.05


def reserve_send(claimed: ClaimedOperation) -> datetime.datetime | None:
    """Take a send slot on the operation's channel, immediately before the send (no transaction open).

    One statement on the database clock (RESERVE_SEND_SQL), committed on its own. Returns when the
    send may start, after sleeping at most SLOT_SLEEP_SECONDS for its slot: the slot's time on the
    database clock, or None when the channel limits nothing. Raises OperationFailed
    of a wait kind (RATE_LIMITED, CHANNEL_PAUSED) with retry_after the seconds until the operation
    should come back: nothing was sent, and the wait is not counted as an attempt. An operation
    without a channel, or a channel without a gate or a rate, sends at once.
    """
    if not claimed.channel:
        return None
    params = {"channel": claimed.channel, "bound": SLOT_SLEEP_SECONDS}
    with execute_prepared(RESERVE_SEND_SQL, params, row_factory=dict_row) as cursor:
        gate = cursor.fetchone()
    if gate is None:
        return None
    if gate["wait_seconds"] is not None:
        wait = max(0.0, float(gate["wait_seconds"]))
        if gate["paused"]:
            raise OperationFailed(
                FailureKind.CHANNEL_PAUSED,
                f"channel {claimed.channel} is paused for {wait:.1f} s more: {gate['pause_reason']}",
                retry_after=wait,
            )
        raise OperationFailed(
            FailureKind.RATE_LIMITED,
            f"channel {claimed.channel} is at its rate limit; next try in {wait:.2f} s",
            retry_after=wait,
        )
    if (sleep := float(gate["sleep_seconds"])) > 0:
        time.sleep(sleep)
    slot_at: datetime.datetime = gate["slot_at"]
    return slot_at


def pause_channel(channel: str, *, seconds: float, reason: str) -> datetime.datetime:
    """Pause `channel` for every worker until `seconds` from now (database clock), or later if it was
    already paused longer. Joins the caller's transaction (fail_operation's). Returns the pause's end."""
    params = {"channel": channel, "seconds": max(0.0, seconds), "reason": reason[:2000]}
    with execute_prepared(PAUSE_CHANNEL_SQL, params, row_factory=dict_row) as cursor:
        paused_until: datetime.datetime = cursor.fetchone()["paused_until"]  # type: ignore[index]
    logger.info("channel %s paused until %s: %s", channel, paused_until.isoformat(), reason[:200])
    return paused_until


def set_channel_rate(channel: str, *, rate_per_second: int | None, using: str = "default") -> None:
    """The channel's configured rate on its gate (None: no limit), made if missing; idempotent.

    Called by the app that owns channels when one is saved; a pause and the slots already taken stay."""
    gates = ChannelGate.objects.using(using)
    if (
        gates.filter(channel=channel)
        .exclude(rate_per_second=rate_per_second)
        .update(rate_per_second=rate_per_second, updated_at=Now())
    ):
        return
    gates.get_or_create(channel=channel, defaults={"rate_per_second": rate_per_second})
