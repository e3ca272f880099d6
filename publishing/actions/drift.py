"""Drift at the target (docs/wordpress.md#drift): the periodic check's intents and the
republish's continuation. The operator's ways to end a drift are in publishing.actions.resolutions.
No action calls the target: the check and the republish are operations a worker runs."""

from __future__ import annotations

import datetime

from django.db import connection, transaction

from publishing.identities import (
    DRIFT_CHECK,
    VERIFY,
    drift_check_key,
    publish_key,
    republish_verify_key,
    revision_subject_id,
)
from publishing.models import Revision
from publishing.selectors.drift import list_due_drift_checks
from publishing.sql import DRIFT_ROUND_ID_SQL, DRIFT_ROUND_LOCK_SQL
from workers.actions.enqueue import enqueue_operation
from workers.audit import record_audit_event
from workers.models import Dependency


@transaction.atomic(savepoint=False)
def do_enqueue_drift_checks(*, limit: int, interval: datetime.timedelta) -> int:
    """One round of the periodic check: a `drift_check` operation for each of at most `limit`
    published revisions not checked within `interval` (publishing.selectors.drift.list_due_drift_checks), keyed by the
    round's database time. A publication whose check is still under way is left out, so rounds never
    pile checks up, whatever their number or overlap. Returns how many it enqueued."""
    if limit <= 0:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(DRIFT_ROUND_LOCK_SQL)
        cursor.execute(DRIFT_ROUND_ID_SQL)
        (round_id,) = cursor.fetchone()
    enqueued = 0
    for due in list_due_drift_checks(limit=limit, interval=interval):
        enqueued += enqueue_operation(
            key=drift_check_key(due.public_id, due.number, round_id, due.channel),
            kind=DRIFT_CHECK,
            channel=due.channel,
            payload_hash=due.payload_hash,
            subject_type="brief",
            subject_id=due.public_id,
            subject_version=due.number,
            arguments={"revision": due.number, "accepted_hash": due.accepted_hash},
        ).created
    return enqueued


@transaction.atomic(savepoint=False)
def do_record_republication(
    revision: Revision,
    *,
    channel: str,
    republish_operation_id: int,
    republish_key: str,
    conflict_id: int,
    external_id: str,
) -> None:
    """The republish's finalize (in its fenced transaction, docs/invariants.md#i5): its verification intent, which
    reads the revision's publication back and observes the post showing it again, and the audit record.
    Idempotent: the verification is keyed by the republish. No new publication: the revision has one."""
    public_id = revision.brief.public_id
    enqueued = enqueue_operation(
        key=republish_verify_key(public_id, revision.number, conflict_id, channel),
        kind=VERIFY,
        channel=channel,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        subject_version=revision.number,
        arguments={"revision": revision.number, "publish_key": publish_key(public_id, revision.number, channel)},
        after=[(republish_operation_id, Dependency.Requires.SUCCESS)],
    )
    if enqueued.created:
        record_audit_event(
            acting_user=None,
            event_type="publication.republished",
            subject_type="revision",
            subject_id=revision_subject_id(public_id, revision.number),
            old_state=None,
            new_state={"operation": republish_key, "external_id": external_id, "payload_hash": revision.payload_hash},
        )
