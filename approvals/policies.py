"""Approval policies as the decision, the revision page, the inbox and the API read them (docs/policies.md).

A brief's policy is its desk's — approvals from distinct approvers, and groups each of which must
approve — plus Legal when the brief is flagged for legal review. What a revision still lacks is counted
by one SQL rule, approvals.sql.policy_shortfall, which the publish's checks embed too; this module runs
it and says it in words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import User
from psycopg.rows import dict_row

from approvals.models import Approval, ApprovalCompletion
from approvals.sql import POLICY_SHORTFALL_SQL
from publishing.models import Brief, Desk, Revision
from publishing.roles import LEGAL_GROUP
from workers.prepared import execute_prepared, the_row


@dataclass(frozen=True)
class Policy:
    """What a revision of a brief needs before it is published."""

    desk: Desk
    approvals_required: int
    required_groups: tuple[str, ...]  # by name, sorted; Legal among them when the brief is flagged
    legal_review: bool = False

    def describe(self) -> str:
        """The policy in a sentence, e.g. "2 approvals from distinct approvers, one of them from Legal"."""
        count = "1 approval" if self.approvals_required == 1 else f"{self.approvals_required} approvals"
        said = f"{count} from distinct approvers"
        if self.required_groups:
            said += ", including one from " + _and(self.required_groups)
        return said


def _and(names: tuple[str, ...] | list[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def get_policy(brief: Brief) -> Policy:
    """The policy a decision on `brief` is counted against now: its desk's, with Legal when it is flagged."""
    desk = brief.desk
    groups = set(desk.required_groups.values_list("name", flat=True))
    if brief.legal_review:
        groups.add(LEGAL_GROUP)
    return Policy(desk, desk.approvals_required, tuple(sorted(groups)), brief.legal_review)


def recorded_policy(completion: ApprovalCompletion) -> Policy:
    """The policy that applied when `completion`'s approval completed it."""
    groups = tuple(sorted(completion.required_groups))
    return Policy(completion.desk, completion.approvals_required, groups, LEGAL_GROUP in groups)


def get_shortfall(revision: Revision, policy: Policy) -> tuple[int, tuple[str, ...]]:
    """What `revision` still lacks under `policy`, counting every decision on it so far: (approvals still
    needed, required groups still to approve). One prepared statement (approvals.sql.policy_shortfall)."""
    params = {
        "revision_id": revision.pk,
        "approvals_required": policy.approvals_required,
        "required_groups": list(policy.required_groups),
    }
    with execute_prepared(POLICY_SHORTFALL_SQL, params, row_factory=dict_row) as cursor:
        row = the_row(cursor)
    return row["missing_approvals"], tuple(row["missing_groups"])


@dataclass(frozen=True)
class PolicyProgress:
    """Where revision N stands under its policy: the policy as it stands (or, once completed, the one that
    applied), who has approved, and who is still needed."""

    policy: Policy
    approvals: list[Approval]  # the approvals given, oldest first
    missing_approvals: int
    missing_groups: tuple[str, ...]
    blocked_by: dict[str, str] = field(default_factory=dict)  # group → who of it requested changes
    completion: ApprovalCompletion | None = None
    decided_by: frozenset[int] = frozenset()  # every approver who decided, either way

    @property
    def complete(self) -> bool:
        return self.completion is not None

    @property
    def completed_by(self) -> User | None:
        """Whose approval completed the policy (None until one did)."""
        if self.completion is None:
            return None
        return next((a.approver for a in self.approvals if a.pk == self.completion.approval_id), None)

    @property
    def met(self) -> bool:
        """The approvals given meet the policy (completed, or met since the policy was loosened)."""
        return self.missing_approvals == 0 and not self.missing_groups

    def still_needed(self) -> str:
        """Who is still needed, in words ("" once complete)."""
        if self.complete:
            return ""
        parts = []
        if self.missing_approvals:
            more = "1 more approval" if self.missing_approvals == 1 else f"{self.missing_approvals} more approvals"
            parts.append(more)
        for group in self.missing_groups:
            blocker = self.blocked_by.get(group)
            said = f"an approval from {group}"
            if blocker:
                said += f" ({blocker} of {group} requested changes: it blocks until {group} approves)"
            parts.append(said)
        if not parts:
            return "the approvals given meet the policy as it stands now: the next approval publishes"
        return _and(parts)

    def counts_for(self, user: User, *, revision: Revision, groups: frozenset[str]) -> bool:
        """Whether an approval by `user` (a member of `groups`) would count towards the policy now: they
        did not write the revision nor decide on it, and it still needs an approver or one of their groups."""
        if self.complete or user.pk == revision.author_id or user.pk in self.decided_by:
            return False
        return self.missing_approvals > 0 or bool(groups & set(self.missing_groups)) or self.met


def get_policy_progress(revision: Revision, *, decisions: list[Approval] | None = None) -> PolicyProgress:
    """Where `revision` stands under its policy (three queries: its decisions, its completion, the count;
    two when the caller has read the decisions already, `decisions`, with their approvers)."""
    if decisions is None:
        approvals = list(revision.approvals.select_related("approver").order_by("id"))
    else:
        # Id order is the order they were given (decisions on a brief are serialised by its row lock).
        approvals = sorted(decisions, key=lambda approval: approval.pk)
    completion = ApprovalCompletion.objects.filter(revision=revision).select_related("desk").first()
    policy = recorded_policy(completion) if completion is not None else get_policy(revision.brief)
    missing_approvals, missing_groups = get_shortfall(revision, policy)
    blocked_by = {}
    for group in missing_groups:
        latest = next((a for a in reversed(approvals) if group in a.approver_groups), None)
        if latest is not None and latest.decision == Approval.Decision.CHANGES_REQUESTED:
            blocked_by[group] = latest.approver.get_username()
    return PolicyProgress(
        policy=policy,
        approvals=[a for a in approvals if a.decision == Approval.Decision.APPROVED],
        missing_approvals=missing_approvals,
        missing_groups=missing_groups,
        blocked_by=blocked_by,
        completion=completion,
        decided_by=frozenset(a.approver_id for a in approvals),
    )
