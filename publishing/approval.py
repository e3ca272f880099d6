"""A revision's valid approval as publishing's actions and the selectors below them ask for it.

The rule is the approvals app's (docs/invariants.md#i3: approvals.sql.valid_approval_of), and approvals imports
publishing, never the reverse: approvals registers its selector here when it is ready (approvals.apps),
as the domain apps register their handlers with the workers. So an operator's settlement of a
publication problem (publishing.actions.resolutions) checks the approval without importing approvals.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db.models import Model

from publishing.models import Revision

ValidApproval = Callable[[Revision], Model | None]

_selectors: dict[str, ValidApproval] = {}


def register_valid_approval(selector: ValidApproval) -> None:
    _selectors["valid_approval"] = selector


def get_valid_approval(revision: Revision) -> Model | None:
    """The approval of exactly this revision and its payload hash, or None (approvals.selectors)."""
    try:
        selector = _selectors["valid_approval"]
    except KeyError:
        raise LookupError("No valid-approval selector is registered: the approvals app registers it") from None
    return selector(revision)
