"""What a handler raises to tell the machinery how an attempt ended (docs/invariants.md#i9).

Handlers never decide retry timing themselves: they classify the failure with a kind, and
workers.policy decides (retry with backoff, honour Retry-After, dead letter, conflict).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from psycopg import errors as pg_errors


class FailureKind(StrEnum):
    TIMEOUT = "timeout"  # ambiguous: the side effect may have happened
    CONNECTION = "connection"  # ambiguous likewise
    THROTTLED = "throttled"  # 429/503: retry after Retry-After
    SERVER_ERROR = "server_error"  # 5xx: exponential backoff with jitter
    IN_PROGRESS = "in_progress"  # the target is applying this key right now: retry soon
    # Galley's own gate held the send back (workers.actions.gates), nothing was sent: retry at the slot
    RATE_LIMITED = "rate_limited"  # the channel's rate limit: its next send slot is later
    CHANNEL_PAUSED = "channel_paused"  # the channel answered 429/503 with Retry-After to another send
    INVALID = "invalid"  # 400/422: terminal, dead letter with the reason
    QUALITY_GATE = "quality_gate"  # terminal, never retried
    AUTH = "auth"  # 401/403: terminal, an operator must fix credentials
    KEY_CONFLICT = "key_conflict"  # same key, other payload: conflict, operator's call
    STALE_REVISION = "stale_revision"  # the target holds a revision Galley cannot account for: conflict
    VERIFICATION_MISMATCH = "verification_mismatch"  # the read-back shows other content: conflict
    DRIFT = "drift"  # the target holds Galley's record but shows other live content (an edit there): conflict
    UNEXPECTED = "unexpected"  # a bug or an unforeseen error: bounded retries, then dead


# Kinds the machinery records itself (no handler raises them): a lease that ran out before its
# attempt's outcome (the worker died or stalled), and an operator's request to look the key up first.
LEASE_EXPIRED = "lease_expired"
RECONCILE_REQUESTED = "reconcile_requested"

# Kinds after which the next attempt must look the operation up before acting again.
AMBIGUOUS_KINDS = frozenset({FailureKind.TIMEOUT, FailureKind.CONNECTION, LEASE_EXPIRED, RECONCILE_REQUESTED})


class OperationFailed(Exception):
    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        retry_after: float | None = None,
        http_status: int | None = None,
        conflicting_payload_hash: str = "",
        target_state: dict[str, Any] | None = None,
        usage: dict[str, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        self.http_status = http_status
        self.conflicting_payload_hash = conflicting_payload_hash
        # What the target holds, recorded with a conflict for the operator who resolves it.
        self.target_state = target_state
        self.usage = usage or {}


class Superseded(Exception):
    """The intent is obsolete (a newer one replaced it before this one had any effect)."""


class LeaseLost(Exception):
    """A fenced write matched no row: another worker owns the operation now. Write nothing else."""


def is_lock_timeout(error: BaseException) -> bool:
    """Whether `error` is PostgreSQL's lock_timeout (GALLEY_LOCK_TIMEOUT_SECONDS): a row lock another
    session held for longer. Nothing was written (the transaction is rolled back), and the same write
    may simply be tried again. Django wraps psycopg's error in its own OperationalError."""
    return isinstance(error, pg_errors.LockNotAvailable) or isinstance(error.__cause__, pg_errors.LockNotAvailable)
