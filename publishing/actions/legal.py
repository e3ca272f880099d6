"""A brief's legal-review flag (docs/policies.md#legal): editors and approvers raise it, only Legal
lifts it. While it is up, the brief's approval policy also requires an approval from Legal
(approvals.policies.get_policy reads the flag)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from publishing.actions.briefs import audit_brief_change
from publishing.announcements import announce_legal_review_flagged
from publishing.errors import PermissionRefused
from publishing.models import Brief
from publishing.roles import LEGAL_GROUP, AnyUser, in_legal, require_reviewer
from publishing.selectors.briefs import access_brief


def check_flag_legal_review(public_id: str, *, acting_user: AnyUser) -> bool:
    """Flag the brief as needing legal review, as an editor or approver; joins the caller's transaction.
    Locks the brief's row. Returns whether it changed (a flagged brief stays as it is, nothing written).
    Raises PermissionRefused, NotFound."""
    acting_user = require_reviewer(acting_user, to="flag a brief as needing legal review")
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    return do_set_legal_review(brief, legal_review=True, acting_user=acting_user)


def check_lift_legal_review(public_id: str, *, acting_user: AnyUser) -> bool:
    """Lift the brief's legal-review flag, as an active member of Legal; joins the caller's transaction.
    Locks the brief's row. Returns whether it changed (an unflagged brief stays as it is, nothing
    written). Raises PermissionRefused (anyone outside Legal, flagged or not), NotFound."""
    if not isinstance(acting_user, User) or not in_legal(acting_user):
        raise PermissionRefused(f"Only members of {LEGAL_GROUP} can lift a legal-review flag.")
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    return do_set_legal_review(brief, legal_review=False, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_set_legal_review(brief: Brief, *, legal_review: bool, acting_user: User) -> bool:
    """Set the flag; caller holds the brief's row lock. Audited as brief.legal_review_flagged or
    brief.legal_review_lifted (old/new {"legal_review"}); the value it has already writes nothing. A flag
    raised is announced (approvals tells Legal when a revision waits for review)."""
    if brief.legal_review == legal_review:
        return False
    brief.legal_review = legal_review
    brief.updated_at = timezone.now()
    brief.save(update_fields=["legal_review", "updated_at"])
    change = "legal_review_flagged" if legal_review else "legal_review_lifted"
    audit_brief_change(brief, change, "legal_review", not legal_review, legal_review, acting_user=acting_user)
    if legal_review:
        announce_legal_review_flagged(brief, acting_user=acting_user)
    return True
