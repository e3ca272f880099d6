"""Refusals an action can raise. Each carries a message meant for the person who asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from publishing.models import Revision


class GalleyError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PermissionRefused(GalleyError):
    pass


class NotFound(GalleyError):
    pass


class InvalidInput(GalleyError):
    pass


class RevisionConflict(GalleyError):
    """The editor edited revision `base_number`, but `newer` has been written since; nothing was saved."""

    def __init__(self, *, newer: Revision | None, base_number: int) -> None:
        current = newer.number if newer is not None else 0
        if base_number > current:
            message = f"Revision {base_number} does not exist; the latest revision is {current}."
        else:
            message = (
                f"Revision {current} was saved while you were editing revision {base_number}. "
                "Nothing was saved: your text is kept below; review what changed, then overwrite it with "
                "your version or start again from the newer revision."
            )
        super().__init__(message)
        self.newer = newer
        self.base_number = base_number
