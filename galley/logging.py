"""Log lines that carry Galley's identities (PRODUCT.md §3) when a record has them."""

from __future__ import annotations

import logging

IDENTITIES = ("job_id", "operation_key", "attempt_id", "worker_id", "fencing_token")


class IdentityFormatter(logging.Formatter):
    """Appends ` key=value` for each identity a record was logged with (via `extra=`)."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = [f"{name}={getattr(record, name)}" for name in IDENTITIES if hasattr(record, name)]
        return f"{line} {' '.join(pairs)}" if pairs else line
