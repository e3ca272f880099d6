"""One attempt: a claimed operation run to an outcome (`run_operation`).

The handler of the operation's kind runs with no database transaction open: the claim committed
before, and the outcome the handler returns or raises is written after, by workers.actions.claims.
"""

from __future__ import annotations

import logging
import time

from django.db import InternalError

from workers.actions.claims import (
    complete_operation,
    fail_operation,
    record_lease_lost,
    supersede_running_operation,
)
from workers.crashpoints import crash_point
from workers.errors import FailureKind, LeaseLost, OperationFailed, Superseded
from workers.outages import DATABASE_UNAVAILABLE, drop_broken_connections, session_ended
from workers.registry import ClaimedOperation, get_handler

logger = logging.getLogger(__name__)

# After these an attempt records no outcome of its own: a lost lease leaves it to the new owner, a
# lost database (whose last commit may or may not have happened) to the lease's expiry.
NO_OUTCOME: tuple[type[Exception], ...] = (LeaseLost, *DATABASE_UNAVAILABLE)


def run_operation(claimed: ClaimedOperation) -> str:
    """Run one claimed operation to an outcome; returns the outcome's name. Never raises.

    If the database goes away meanwhile, the attempt writes nothing more (a write under way
    committed or rolled back with the session): an unfinished operation stays running under this
    lease, and once the lease has expired a new claim takes it over as ambiguous (looking the key
    up first), as after a crash.
    """
    # No connection health check per job: a connection the database dropped fails the thread's
    # next claim, which writes nothing, and the thread reconnects before it claims again.
    started = time.monotonic()
    try:
        return _attempt(claimed, started=started)
    except DATABASE_UNAVAILABLE as problem:
        drop_broken_connections(problem, f"running {claimed.key}, left to its lease", extra=claimed.log_extra())
        return "database_unavailable"
    except InternalError as problem:
        # Recording a failure after the session was ended for idling: an outage, not a worker's death.
        if not session_ended(problem):
            raise
        drop_broken_connections(problem, f"running {claimed.key}, left to its lease", extra=claimed.log_extra())
        return "database_unavailable"


def _attempt(claimed: ClaimedOperation, *, started: float) -> str:
    extra = claimed.log_extra()
    try:
        try:
            success = get_handler(claimed.kind)(claimed)
        except OperationFailed as failure:
            decision = fail_operation(claimed, failure, started=started)
            logger.info(
                "attempt failed: %s (%s) -> %s",
                failure.message,
                failure.kind,
                decision.disposition,
                extra=extra,
            )
            return str(decision.disposition)
        except Superseded as superseded:
            supersede_running_operation(claimed, str(superseded), started=started)
            logger.info("superseded: %s", superseded, extra=extra)
            return "superseded"
        except NO_OUTCOME:
            raise
        except Exception as exc:  # a handler bug must not kill the worker or lose the intent
            logger.exception("handler raised unexpectedly", extra=extra)
            unexpected = OperationFailed(FailureKind.UNEXPECTED, f"{type(exc).__name__}: {exc}")
            return str(fail_operation(claimed, unexpected, started=started).disposition)
        crash_point("before_finalize", kind=claimed.kind)
        try:
            complete_operation(claimed, success, started=started)
        except NO_OUTCOME:
            raise
        except Exception as exc:  # the domain's finalize write failed and rolled back with the success
            logger.exception("finalize failed", extra=extra)
            unexpected = OperationFailed(FailureKind.UNEXPECTED, f"finalize failed: {type(exc).__name__}: {exc}")
            return str(fail_operation(claimed, unexpected, started=started).disposition)
        crash_point("after_finalize", kind=claimed.kind)
        logger.info("succeeded", extra=extra)
        return "succeeded"
    except LeaseLost:
        logger.warning("lease lost: another worker owns %s now; wrote nothing", claimed.key, extra=extra)
        record_lease_lost(claimed, started=started)
        return "lease_lost"
