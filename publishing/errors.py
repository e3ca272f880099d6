"""Refusals an action can raise. Each carries a message meant for the person who asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from publishing.models import Draft, Revision


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


class DraftConflict(GalleyError):
    """The editor's draft save started from an older version of the draft: `draft` is what was saved
    meanwhile (another tab, another editor, a submission); nothing was saved."""

    def __init__(self, draft: Draft) -> None:
        super().__init__(
            f"The draft was saved meanwhile by {draft.updated_by} (version {draft.version}). Nothing of yours "
            "was saved: your text is kept; take theirs, or keep yours and save it over theirs."
        )
        self.draft = draft


class DraftHeld(GalleyError):
    """Another editor holds the draft (their edit page is open and saving); nothing was saved until
    this editor takes over."""

    def __init__(self, holder: User) -> None:
        super().__init__(
            f"{holder} is editing this draft. Nothing of yours was saved: your text is kept; "
            "take over editing to save it."
        )
        self.holder = holder
