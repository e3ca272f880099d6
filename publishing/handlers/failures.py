"""Every client failure mapped to a failure kind, in one place (docs/invariants.md#i9); workers.policy
decides what each kind means (retry, wait, dead letter, conflict)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from publishing.clients import http, target
from workers.errors import FailureKind, OperationFailed

T = TypeVar("T")

# Most specific first: the target's own answers, then what every service can answer.
KINDS: list[tuple[type[http.ServiceError], FailureKind]] = [
    (target.TargetInProgress, FailureKind.IN_PROGRESS),
    (target.TargetKeyMismatch, FailureKind.KEY_CONFLICT),
    (target.TargetNotFound, FailureKind.INVALID),
    (http.ServiceTimeout, FailureKind.TIMEOUT),
    (http.ServiceConnectionError, FailureKind.CONNECTION),
    (target.TargetAmbiguous, FailureKind.CONNECTION),
    (http.ServiceThrottled, FailureKind.THROTTLED),
    (http.ServiceRejected, FailureKind.INVALID),
    (http.ServiceAuthError, FailureKind.AUTH),
    (http.ServiceServerError, FailureKind.SERVER_ERROR),
    (http.ServiceInvalidResponse, FailureKind.SERVER_ERROR),
]


def call_service(call: Callable[[], T]) -> T:
    """Run one client call; its failure becomes OperationFailed of the matching kind."""
    try:
        return call()
    except target.TargetStaleRevision as exc:
        raise OperationFailed(
            FailureKind.STALE_REVISION,
            f"the target already holds revision {exc.current_revision} of this brief",
            http_status=exc.status,
            target_state={"revision": exc.current_revision},
        ) from exc
    except http.ServiceError as exc:
        kind = next((kind for cls, kind in KINDS if isinstance(exc, cls)), FailureKind.SERVER_ERROR)
        raise OperationFailed(
            kind,
            str(exc),
            retry_after=exc.retry_after if isinstance(exc, http.ServiceThrottled) else None,
            http_status=exc.status,
            usage=exc.usage,
        ) from exc
