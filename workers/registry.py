"""Handlers per operation kind, and the two values a handler deals in: the claimed operation it
is given, and the Success it returns. Domain apps register their handlers in AppConfig.ready();
`workers` imports no domain app."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ClaimedOperation:
    """An operation as its handler sees it after the claim: identities and the lease it holds."""

    operation_id: int
    key: str
    kind: str
    payload_hash: str
    subject_type: str
    subject_id: str
    subject_version: int | None  # e.g. the brief's revision number (Operation.subject_version)
    channel: str  # the destination it acts on (Operation.channel); "" when none
    arguments: dict[str, Any]
    attempt_id: str
    attempt_number: int
    fencing_token: int
    worker_id: str
    deadline: datetime.datetime
    ambiguous: bool = False

    def log_extra(self) -> dict[str, Any]:
        return {
            "operation_key": self.key,
            "attempt_id": self.attempt_id,
            "job_id": self.subject_id,
            "worker_id": self.worker_id,
            "fencing_token": self.fencing_token,
        }


@dataclass
class Success:
    """A successful attempt. `finalize` is the domain's write: it runs inside the fenced finalize
    transaction, after the fence was read and before the fenced update (the worker's own operation
    row is locked last: docs/architecture.md#lock-order), so the domain's state change and its next intent
    commit with the operation's success (docs/invariants.md#i5) — or not at all if the lease was lost."""

    result: dict[str, Any] = field(default_factory=dict)
    finalize: Callable[[], object] | None = None
    usage: dict[str, int] = field(default_factory=dict)  # recorded on the attempt, e.g. AI tokens


Handler = Callable[[ClaimedOperation], Success]

_handlers: dict[str, Handler] = {}


def register(kind: str, handler: Handler) -> None:
    existing = _handlers.get(kind)
    if existing is not None and existing is not handler:
        raise ValueError(f"A handler for operation kind {kind!r} is already registered: {existing!r}")
    _handlers[kind] = handler


def get_handler(kind: str) -> Handler:
    try:
        return _handlers[kind]
    except KeyError:
        raise LookupError(f"No handler registered for operation kind {kind!r}") from None


# Checks a worker runs once when it starts (e.g. that the publishing target accepts Galley's
# credentials): each returns what it found or raises with what is wrong. Registered by the domain
# apps, like handlers; a failing check is logged, never fatal (the target may come up later).
StartupCheck = Callable[[], str]

_startup_checks: dict[str, StartupCheck] = {}


def register_startup_check(name: str, check: StartupCheck) -> None:
    _startup_checks[name] = check


def startup_checks() -> dict[str, StartupCheck]:
    return dict(_startup_checks)


@dataclass(frozen=True)
class OperatorNeeded:
    """An operation that has just come to need an operator: a dead letter or a conflict."""

    operation_id: int
    kind: str
    subject_type: str
    subject_id: str
    subject_version: int | None
    arguments: dict[str, Any]
    status: str
    message: str


# What a domain app does when an operation comes to need an operator (e.g. tell the people who must
# act), called inside the transaction that records it, so that the reaction commits with it or not at
# all. Registered by the domain apps, like handlers; the machinery never imports them.
OperatorNeededHook = Callable[[OperatorNeeded], None]

_operator_needed_hooks: list[OperatorNeededHook] = []


def register_operator_needed(hook: OperatorNeededHook) -> None:
    if hook not in _operator_needed_hooks:
        _operator_needed_hooks.append(hook)


def operator_needed(needed: OperatorNeeded) -> None:
    """Tell every registered hook; in the caller's transaction."""
    for hook in _operator_needed_hooks:
        hook(needed)
