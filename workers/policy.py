"""Retry by failure kind (docs/invariants.md#i9): the one place that decides what happens next."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings

from workers.errors import FailureKind


class Disposition(StrEnum):
    RETRY = "retry"
    DEAD = "dead"
    CONFLICT = "conflict"


TERMINAL_KINDS = {FailureKind.INVALID, FailureKind.QUALITY_GATE, FailureKind.AUTH}
# Galley and the target disagree: no retry can settle it, an operator decides (docs/operations.md#settling-problems).
CONFLICT_KINDS = {
    FailureKind.KEY_CONFLICT,
    FailureKind.STALE_REVISION,
    FailureKind.VERIFICATION_MISMATCH,
    FailureKind.DRIFT,
}
OPERATOR_KINDS = {FailureKind.AUTH, *CONFLICT_KINDS}
# The target asking Galley to wait (docs/invariants.md#i9): such a try never counts against max_attempts,
# so it never makes a dead letter on its own; the operation's deadline bounds the waiting.
WAIT_KINDS = {FailureKind.THROTTLED, FailureKind.IN_PROGRESS, FailureKind.RATE_LIMITED, FailureKind.CHANNEL_PAUSED}
# Waits whose Retry-After is when to come back: the target's, or the channel gate's (workers.actions.gates).
RETRY_AFTER_KINDS = {FailureKind.THROTTLED, FailureKind.RATE_LIMITED, FailureKind.CHANNEL_PAUSED}


@dataclass(frozen=True)
class Decision:
    disposition: Disposition
    delay_seconds: float = 0.0
    needs_operator: bool = False


def backoff_seconds(attempt: int, *, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: half of base·2^(attempt-1) fixed, half random, capped."""
    ceiling = min(settings.GALLEY_BACKOFF_MAX_SECONDS, settings.GALLEY_BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def decide(kind: FailureKind, *, attempt: int, retry_after: float | None = None) -> Decision:
    if kind in CONFLICT_KINDS:
        return Decision(Disposition.CONFLICT, needs_operator=True)
    if kind in TERMINAL_KINDS:
        return Decision(Disposition.DEAD, needs_operator=kind in OPERATOR_KINDS)
    if kind in RETRY_AFTER_KINDS and retry_after is not None:
        return Decision(Disposition.RETRY, delay_seconds=max(0.0, retry_after))
    if kind == FailureKind.IN_PROGRESS:
        return Decision(Disposition.RETRY, delay_seconds=retry_after if retry_after is not None else 1.0)
    return Decision(Disposition.RETRY, delay_seconds=backoff_seconds(attempt))
