"""What publishing announces to the apps above it: a revision submitted for review, a brief flagged
for legal review, a revision published and verified. Another app (approvals, which tells the people
concerned) registers its hooks in AppConfig.ready(), as handlers are registered with the workers;
publishing imports none of them, so its actions stay below the apps that react to them.

Each announcement calls every hook inside the action's transaction, so that the reaction (a
notification and its email intent) commits with the event or not at all (docs/invariants.md#i5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from publishing.models import Brief, Revision


class RevisionSubmittedHook(Protocol):
    def __call__(self, revision: Revision, *, acting_user: User) -> None: ...


class LegalReviewFlaggedHook(Protocol):
    def __call__(self, brief: Brief, *, acting_user: User) -> None: ...


class PublishedHook(Protocol):
    """`brief` holds only the fields the verification's finalize read (publishing.actions.publications)."""

    def __call__(self, brief: Brief, *, revision_number: int, permalink: str) -> None: ...


_revision_submitted_hooks: list[RevisionSubmittedHook] = []
_published_hooks: list[PublishedHook] = []
_legal_review_flagged_hooks: list[LegalReviewFlaggedHook] = []


def register_revision_submitted(hook: RevisionSubmittedHook) -> None:
    if hook not in _revision_submitted_hooks:
        _revision_submitted_hooks.append(hook)


def register_legal_review_flagged(hook: LegalReviewFlaggedHook) -> None:
    if hook not in _legal_review_flagged_hooks:
        _legal_review_flagged_hooks.append(hook)


def register_published(hook: PublishedHook) -> None:
    if hook not in _published_hooks:
        _published_hooks.append(hook)


def announce_revision_submitted(revision: Revision, *, acting_user: User) -> None:
    """A new revision waits for review; in the caller's transaction."""
    for hook in _revision_submitted_hooks:
        hook(revision, acting_user=acting_user)


def announce_legal_review_flagged(brief: Brief, *, acting_user: User) -> None:
    """The brief now needs Legal's approval (docs/policies.md#legal); in the caller's transaction."""
    for hook in _legal_review_flagged_hooks:
        hook(brief, acting_user=acting_user)


def announce_published(brief: Brief, *, revision_number: int, permalink: str) -> None:
    """Revision `revision_number` of `brief` is published and verified; in the caller's transaction."""
    for hook in _published_hooks:
        hook(brief, revision_number=revision_number, permalink=permalink)
