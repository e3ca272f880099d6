from __future__ import annotations

import logging

from galley.logging import IdentityFormatter


def record(**extra: object) -> logging.LogRecord:
    item = logging.LogRecord("workers.runner", logging.INFO, __file__, 1, "lease lost", None, None)
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
