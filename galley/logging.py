"""Log lines that carry Galley's identities (docs/architecture.md#identities) when a record has them, and no secret."""

from __future__ import annotations

import logging

from publishing.redaction import redact

IDENTITIES = ("job_id", "operation_key", "attempt_id", "worker_id", "fencing_token")


class IdentityFormatter(logging.Formatter):
    """Appends ` key=value` for each identity a record was logged with (via `extra=`), and cuts
    any API token or Authorization credential in the line (its traceback included) to what may be
    shown (publishing.redaction). It formats, it does not change the record: other handlers see it as logged."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = [f"{name}={getattr(record, name)}" for name in IDENTITIES if hasattr(record, name)]
        return redact(f"{line} {' '.join(pairs)}" if pairs else line)
