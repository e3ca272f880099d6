"""Approvals' raw SQL, named, each with what it does and the invariant it serves; table names from the
models, values from their choices (rendered by workers.sql.sql_literal) or parameters. Rows come back by
column name (publishing.sql.columns and from_row).

The valid approval (docs/invariants.md#i3) is defined here once, as a fragment: approvals.selectors.get_valid_approval
runs it, and the publish's checks (publishing.selectors.publish_checks) embed it. So is the approval
policy's count (policy_shortfall, docs/policies.md): the decision that may complete a policy, the
revision page's "who is still needed", the inbox (current_shortfall) and the publish's checks all run it.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, User

from approvals.models import Approval, ApprovalChannel, ApprovalCompletion, Notification
from publishing.models import Channel, Desk, Revision
from publishing.roles import LEGAL_GROUP
from publishing.sql import columns
from workers.sql import sql_literal

_APPROVAL = Approval._meta.db_table
_APPROVAL_CHANNEL = ApprovalChannel._meta.db_table
_COMPLETION = ApprovalCompletion._meta.db_table
_CHANNEL = Channel._meta.db_table
_REVISION = Revision._meta.db_table
_USER = User._meta.db_table
_NOTIFICATION = Notification._meta.db_table
_DESK = Desk._meta.db_table
_DESK_GROUPS = Desk.required_groups.through._meta.db_table
_GROUP = Group._meta.db_table


_APPROVED = sql_literal(Approval.Decision.APPROVED)
# `up_to` for a count of every decision given so far: no approval id is larger (a bigint).
_EVERY_DECISION = "9223372036854775807"


def policy_shortfall(revision_id: str, *, approvals_required: str, required_groups: str, up_to: str) -> str:
    """What revision `revision_id` still lacks under a policy (docs/policies.md), counting its decisions
    with ids up to `up_to`: a query of one row, `missing_approvals` (approvals from distinct approvers
    still needed: `approvals_required` minus the approvals given) and `missing_groups` (the
    `required_groups`, a text[] expression, whose members' latest decision is not an approval: none
    yet, or a request for changes that blocks until the group approves). Each argument is an SQL
    expression. Every decision of a revision is of its payload hash (migration 0002) and one per
    approver (approval_one_decision_per_approver), never its author's approval (approval_not_by_author),
    so counting rows counts distinct approvers; decisions on one brief are serialised by its row lock,
    so id order is the order they were given."""
    return f"""SELECT greatest(0, {approvals_required} - count(*) FILTER (WHERE x.decision = {_APPROVED}))
               AS missing_approvals,
           ARRAY(SELECT g FROM unnest({required_groups}::text[]) g
                 WHERE (SELECT y.decision FROM {_APPROVAL} y
                        WHERE y.revision_id = {revision_id} AND y.id <= {up_to} AND g = ANY(y.approver_groups)
                        ORDER BY y.id DESC LIMIT 1) IS DISTINCT FROM {_APPROVED}
                 ORDER BY g) AS missing_groups
        FROM {_APPROVAL} x WHERE x.revision_id = {revision_id} AND x.id <= {up_to}"""  # noqa: S608 -- the model's table


def current_policy(*, desk_id: str, legal_review: str) -> tuple[str, str]:
    """The policy a decision on a brief is counted against now, as SQL (approvals.policies.get_policy in
    Python; tests/approvals/test_policy_views.py holds the two equal): (approvals_required,
    required_groups) — its desk's approvals, and the names of its desk's required groups with Legal
    added when the brief is flagged for legal review (docs/policies.md#legal), once each, in code-point
    order as Python sorts them. `desk_id` and `legal_review` are SQL expressions of the brief's columns."""
    approvals_required = f"(SELECT d.approvals_required FROM {_DESK} d WHERE d.id = {desk_id})"  # noqa: S608
    required_groups = f"""ARRAY(SELECT u.name FROM (
            SELECT g.name FROM {_DESK_GROUPS} dg JOIN {_GROUP} g ON g.id = dg.group_id WHERE dg.desk_id = {desk_id}
            UNION SELECT {sql_literal(LEGAL_GROUP)} WHERE {legal_review}) u
        ORDER BY u.name COLLATE "C")"""  # noqa: S608 -- the models' tables
    return approvals_required, required_groups


def current_shortfall(*, brief_id: str, desk_id: str, legal_review: str) -> str:
    """What a brief's current revision (its latest) still lacks under the brief's current policy
    (current_policy), counting every decision on it so far: policy_shortfall's one row,
    `missing_approvals` and `missing_groups`. The inbox reads it. Each argument is an SQL expression of
    the brief's columns; a brief with no revision gives no row."""
    approvals_required, required_groups = current_policy(desk_id=desk_id, legal_review=legal_review)
    shortfall = policy_shortfall(
        "cur.id", approvals_required=approvals_required, required_groups=required_groups, up_to=_EVERY_DECISION
    )
    return f"""SELECT s.missing_approvals, s.missing_groups
        FROM (SELECT r.id FROM {_REVISION} r WHERE r.brief_id = {brief_id} ORDER BY r.number DESC LIMIT 1) cur,
             LATERAL ({shortfall}) s"""  # noqa: S608 -- the models' tables


def valid_approval_of(revision: str, *, approval: str = "a") -> str:
    """The condition that approval row `approval` validly approves revision row `revision` (table
    aliases): it approves exactly that revision and its payload hash (docs/invariants.md#i3), and it
    completed the revision's approval policy — the policy recorded with it (ApprovalCompletion) is met
    by the revision's decisions up to it (policy_shortfall). An approval of another revision never
    counts, however similar its payload; nor does one whose policy its approvals do not meet."""
    shortfall = policy_shortfall(
        f"{revision}.id",
        approvals_required="c.approvals_required",
        required_groups="c.required_groups",
        up_to="c.approval_id",
    )
    return f"""{approval}.revision_id = {revision}.id AND {approval}.payload_hash = {revision}.payload_hash
        AND {approval}.decision = {_APPROVED}
        AND EXISTS (SELECT 1 FROM {_COMPLETION} c
            WHERE c.approval_id = {approval}.id AND c.revision_id = {revision}.id
              AND c.payload_hash = {revision}.payload_hash
              AND EXISTS (SELECT 1 FROM ({shortfall}) s
                          WHERE s.missing_approvals = 0 AND cardinality(s.missing_groups) = 0))"""  # noqa: S608


def valid_approval_for_channel(revision: str, *, channel: str) -> str:
    """Whether revision row `revision` has a valid approval whose channel set holds the channel of slug
    `channel` (an SQL expression): frozen by the approval, or added to it by an approver's "also publish
    to" (docs/invariants.md#i14). A boolean SQL expression."""
    return f"""EXISTS (SELECT 1 FROM {_APPROVAL} a
        JOIN {_APPROVAL_CHANNEL} ac ON ac.approval_id = a.id
        JOIN {_CHANNEL} ch ON ch.id = ac.channel_id
        WHERE {valid_approval_of(revision)} AND ch.slug = {channel})"""  # noqa: S608 -- the models' tables


# The revision %(revision_id)s's valid approval (docs/invariants.md#i3): the one that completed its policy and
# wrote the publish intents (there is at most one). Its columns are the approval's (from_row).
VALID_APPROVAL_SQL = f"""
SELECT {columns(Approval, "a")}
FROM {_APPROVAL} a
JOIN {_REVISION} r ON {valid_approval_of("r")}
WHERE r.id = %(revision_id)s
"""  # noqa: S608 -- table names from the models; every value is a parameter

# What revision %(revision_id)s still lacks under the policy %(approvals_required)s / %(required_groups)s,
# counting every decision given on it so far (policy_shortfall): the decision that may complete the
# policy runs it in its transaction, after its approval's insert; the revision page runs it with the
# policy as it stands.
POLICY_SHORTFALL_SQL = policy_shortfall(
    "%(revision_id)s",
    approvals_required="%(approvals_required)s",
    required_groups="%(required_groups)s",
    up_to=_EVERY_DECISION,
)

# Who is told of a publication: the brief's author and the revision's approvers, in one prepared
# statement (it runs in every verification's finalize, after the observation of docs/invariants.md#i10);
# approvals.notifications.do_notify applies its rules to them. The users' columns: id, email, is_active.
PUBLISHED_RECIPIENTS_SQL = f"""
SELECT {columns(User, "u", only=("id", "email", "is_active"))}
FROM {_USER} u
WHERE u.id = %(author_id)s
   OR u.id IN (SELECT a.approver_id
               FROM {_APPROVAL} a
               JOIN {_REVISION} r ON r.id = a.revision_id
               WHERE r.brief_id = %(brief_id)s AND r.number = %(number)s AND a.decision = %(approved)s)
ORDER BY u.id <> %(author_id)s, u.id
"""  # noqa: S608 -- table names from the models; every value is a parameter

# The coalescing write of a notification to each of %(recipients)s (approvals.notifications.do_notify):
# a recipient's unread notification of this event on this brief takes the new event (count + 1, its
# message, revision number and time) instead of a second row being added; otherwise a new one. The
# partial unique index notification_one_unread_per_brief_event is the arbiter, so two events at once
# still make one unread notification. `created` tells which rows are new (they need their email intent).
COALESCE_NOTIFICATION_SQL = f"""
INSERT INTO {_NOTIFICATION} AS n (recipient_id, event, brief_id, revision_number, message, count, created_at)
SELECT recipient_id, %(event)s::text, %(brief_id)s::bigint, %(revision_number)s::integer, %(message)s::text, 1, now()
FROM unnest(%(recipients)s::integer[]) AS recipient_id
ON CONFLICT (recipient_id, brief_id, event) WHERE read_at IS NULL DO UPDATE
SET count = n.count + 1, message = EXCLUDED.message, revision_number = EXCLUDED.revision_number,
    created_at = EXCLUDED.created_at
RETURNING n.id, n.recipient_id, n.count, (n.count = 1) AS created
"""  # noqa: S608 -- the model's table; every value is a parameter

# The approval %(approval_id)s completes revision %(revision_id)s's policy (docs/policies.md) when the revision's
# decisions up to it meet the policy %(approvals_required)s / %(required_groups)s: records the completion with the
# policy that applied, in one statement. Its unique index on the revision is the arbiter: of two approvals
# that complete the policy at the same moment, one writes the completion and the other nothing, so one
# set of publish intents is written. Returns the completion's id, or no row.
COMPLETE_POLICY_SQL = f"""
INSERT INTO {_COMPLETION}
    (revision_id, payload_hash, approval_id, desk_id, approvals_required, required_groups, created_at)
SELECT r.id, r.payload_hash, %(approval_id)s, %(desk_id)s, %(approvals_required)s, %(required_groups)s::text[], now()
FROM {_REVISION} r
WHERE r.id = %(revision_id)s
  AND EXISTS (SELECT 1 FROM ({
    policy_shortfall(
        "r.id",
        approvals_required="%(approvals_required)s",
        required_groups="%(required_groups)s",
        up_to="%(approval_id)s",
    )
}) s WHERE s.missing_approvals = 0 AND cardinality(s.missing_groups) = 0)
ON CONFLICT (revision_id) DO NOTHING
RETURNING id
"""  # noqa: S608 -- table names from the models; every value is a parameter
