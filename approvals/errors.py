from __future__ import annotations

from publishing.errors import GalleyError


class StaleApproval(GalleyError):
    """The decision names a revision or hash that is not the brief's current one; nothing was written."""

    def __init__(self, message: str, *, current_number: int, current_hash: str) -> None:
        super().__init__(message)
        self.current_number = current_number
        self.current_hash = current_hash


class SelfApproval(GalleyError):
    pass


class DecisionAlreadyMade(GalleyError):
    pass


class ScheduleFired(DecisionAlreadyMade):
    """A reschedule or cancel came after a worker had claimed a channel's publish: nothing was changed."""
