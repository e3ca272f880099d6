from __future__ import annotations

import logging

from galley.logging import IdentityFormatter


def record(**extra: object) -> logging.LogRecord:
    item = logging.LogRecord("workers.attempts", logging.INFO, __file__, 1, "lease lost", None, None)
    item.__dict__.update(extra)
    return item


def test_log_lines_carry_the_identities_a_record_has():
    formatter = IdentityFormatter("%(levelname)s %(message)s")
    line = formatter.format(
        record(operation_key="publish:brief-042:revision-3", attempt_id="a1b2", job_id="brief-042", fencing_token=7)
    )
    assert (
        line
        == "INFO lease lost job_id=brief-042 operation_key=publish:brief-042:revision-3 attempt_id=a1b2 fencing_token=7"
    )
    assert formatter.format(record()) == "INFO lease lost"


def handlers_reached(name: str) -> list[logging.Handler]:
    """Every handler a record logged on `name` is emitted by, following propagation."""
    logger: logging.Logger | None = logging.getLogger(name)
    reached: list[logging.Handler] = []
    while logger is not None:
        reached.extend(logger.handlers)
        if not logger.propagate:
            break
        logger = logger.parent
    return reached


def test_a_server_error_is_logged_once():
    # django.request logs every 500; it must reach one handler, the root's console, and no other.
    assert handlers_reached("django.request") == logging.getLogger().handlers
