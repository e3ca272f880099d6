"""Input checks shared by every check_* action: each refusal says what to fix."""

from __future__ import annotations

from typing import Any

from publishing.errors import InvalidInput

# PostgreSQL's integer: revision numbers, draft versions and ids; a larger number names nothing stored.
MAX_DB_INT = 2**31 - 1


def clean_number(value: Any, *, minimum: int, message: str) -> int:
    """`value` as a whole number from `minimum` to MAX_DB_INT (a page's hidden field, say); else
    InvalidInput(message), which tells the person what to do."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidInput(message) from None
    if not minimum <= number <= MAX_DB_INT:
        raise InvalidInput(message)
    return number


def clean_text(value: Any, *, field: str, max_chars: int, required: bool) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text.")
    if "\x00" in value:
        raise InvalidInput(f"{field} contains a NUL character, which cannot be stored.")
    # A browser's textarea sends CRLF line ends: stored as LF, a story typed in a form and the
    # same story sent through the API hash the same.
    value = value.replace("\r\n", "\n").replace("\r", "\n").strip()
    if required and not value:
        raise InvalidInput(f"{field} is required.")
    if len(value) > max_chars:
        raise InvalidInput(f"{field} is {len(value):,} characters long; the limit is {max_chars:,}.")
    return value
