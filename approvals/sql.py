"""Approvals' raw SQL, named, each with what it does and the invariant it serves; table names from the
models, values from their choices (rendered by workers.sql.sql_literal) or parameters. Rows come back by
column name (publishing.sql.columns and from_row).

The valid approval (docs/invariants.md#i3) is defined here once, as a fragment: approvals.selectors.get_valid_approval
runs it, and the publish's checks (publishing.selectors.publish_checks) embed it.
"""

from __future__ import annotations

from django.contrib.auth.models import User

from approvals.models import Approval, ApprovalChannel, Notification
from publishing.models import Channel, Revision
from publishing.sql import columns
from workers.sql import sql_literal

_APPROVAL = Approval._meta.db_table
_APPROVAL_CHANNEL = ApprovalChannel._meta.db_table
_CHANNEL = Channel._meta.db_table
_REVISION = Revision._meta.db_table
_USER = User._meta.db_table
_NOTIFICATION = Notification._meta.db_table


def valid_approval_of(revision: str, *, approval: str = "a") -> str:
    """The condition that approval row `approval` validly approves revision row `revision` (table
    aliases): it approves exactly that revision and its payload hash (docs/invariants.md#i3). An approval of
    another revision never counts, however similar its payload."""
    return (
        f"{approval}.revision_id = {revision}.id AND {approval}.payload_hash = {revision}.payload_hash"
        f" AND {approval}.decision = {sql_literal(Approval.Decision.APPROVED)}"
    )


def valid_approval_for_channel(revision: str, *, channel: str) -> str:
    """Whether revision row `revision` has a valid approval whose channel set holds the channel of slug
    `channel` (an SQL expression): frozen by the approval, or added to it by an approver's "also publish
    to" (docs/invariants.md#i14). A boolean SQL expression."""
    return f"""EXISTS (SELECT 1 FROM {_APPROVAL} a
        JOIN {_APPROVAL_CHANNEL} ac ON ac.approval_id = a.id
        JOIN {_CHANNEL} ch ON ch.id = ac.channel_id
        WHERE {valid_approval_of(revision)} AND ch.slug = {channel})"""  # noqa: S608 -- the models' tables


# The revision %(revision_id)s's valid approval, the first one given (docs/invariants.md#i3): the one that wrote
# the publish intent. Its columns are the approval's (from_row).
VALID_APPROVAL_SQL = f"""
SELECT {columns(Approval, "a")}
FROM {_APPROVAL} a
JOIN {_REVISION} r ON {valid_approval_of("r")}
WHERE r.id = %(revision_id)s
ORDER BY a.created_at, a.id
LIMIT 1
"""  # noqa: S608 -- table names from the models; every value is a parameter

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
