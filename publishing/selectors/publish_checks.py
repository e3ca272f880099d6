"""What a publish checks before it sends a revision, in one statement. Reads the approvals (the valid
approval's fragment, approvals.sql): publishing.actions never imports this module, only the publish
handler does."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg.rows import dict_row

from approvals.sql import valid_approval_for_channel
from publishing.identities import PUBLISH
from publishing.models import Brief, Revision
from publishing.sql import from_row, publish_checks_sql
from workers.prepared import execute_prepared


@dataclass(frozen=True)
class PublishChecks:
    """What a publish checks before it sends revision N, read in one statement (one snapshot)."""

    revision: Revision  # with its brief's id and public id loaded
    approved: bool  # an approval of exactly this revision and its payload hash holds the channel
    newer_published: int | None  # a newer revision of the brief that has a publication on the channel
    newer_attempted: int | None  # a newer revision whose publish to the channel has made an attempt (may be there)


# The publish's hot path, with the valid approval as approvals defines it (get_valid_approval runs
# the same fragment).
PUBLISH_CHECKS_SQL = publish_checks_sql(valid_approval=valid_approval_for_channel("r", channel="%(channel)s"))


def get_publish_checks(public_id: str, number: int, *, channel: str) -> PublishChecks:
    """Revision `number` of brief `public_id` and what a publish to `channel` must know before sending
    it, in one prepared statement. Raises Revision.DoesNotExist."""
    params = {"public_id": public_id, "number": number, "publish": PUBLISH, "channel": channel}
    with execute_prepared(PUBLISH_CHECKS_SQL, params, row_factory=dict_row) as cursor:
        row = cursor.fetchone()
    if row is None:
        raise Revision.DoesNotExist(f"{public_id} has no revision {number}")
    revision = from_row(Revision, row, prefix="revision__")
    revision.brief = Brief.from_db(None, ["id", "public_id"], [revision.brief_id, public_id])
    return PublishChecks(
        revision=revision,
        approved=row["approved"],
        newer_published=row["newer_published"],
        newer_attempted=row["newer_attempted"],
    )
