"""Publishing a revision: the intent (in the approval's transaction), the publication and its
verification intent (in the publish operation's finalize), and the observed verification (in
the verify operation's finalize)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from publishing.actions.resolutions import OPEN, do_close_replaced_problems
from publishing.actions.revisions import check_brief_transition, statuses_leading_to
from publishing.announcements import announce_published
from publishing.identities import PUBLICATION_KINDS, PUBLISH, VERIFY, publish_key, revision_subject_id, verify_key
from publishing.models import Brief, Publication, Revision
from workers.actions.enqueue import Enqueued, add_dependency, enqueue_operation, supersede_waiting_operation
from workers.audit import record_audit_event
from workers.models import Dependency, Operation, OperationStatus
from workers.prepared import execute_prepared


@transaction.atomic(savepoint=False)
def do_request_publication(revision: Revision) -> Enqueued:
    """Record the intent to publish `revision`, in the approval's transaction (invariant 5).

    Idempotent: a second approval of the same revision returns the same operation. Per brief,
    publishes never regress (invariant 4): an older publish that has not been claimed yet is
    superseded; one that may already be in flight becomes a prerequisite (completion edge),
    so this one is claimed only after it finished either way.

    Caller holds the brief's row lock, taken before any operation row (README, "Lock order");
    older operations are touched in id order.
    """
    public_id = revision.brief.public_id
    enqueued = enqueue_operation(
        key=publish_key(public_id, revision.number),
        kind=PUBLISH,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        subject_version=revision.number,
        arguments={"revision": revision.number},
    )
    if not enqueued.created:
        return enqueued
    older = (
        Operation.objects.unfinished()
        .for_subject("brief", public_id)
        .filter(kind=PUBLISH)
        .exclude(id=enqueued.operation.id)
        .order_by("id")
    )
    for operation in older:
        if int(operation.arguments["revision"]) >= revision.number:
            continue
        reason = f"revision {revision.number} was approved before revision {operation.arguments['revision']} was sent"
        if not supersede_waiting_operation(operation, reason=reason):
            add_dependency(enqueued.operation, prerequisite=operation, requires=Dependency.Requires.COMPLETION)
    return enqueued


# The brief's lock and the publication, in one statement: the CTE locks the brief before the insert
# reads it (README, "Lock order"), and ON CONFLICT makes a second run insert nothing. Without the
# lock the publication's foreign-key check would take the brief at COMMIT, after the operation row:
# the reverse of an approval, which holds the brief and waits for the operation. NO KEY UPDATE
# still serialises with the brief's writers.
RECORD_PUBLICATION_SQL = f"""
WITH brief AS (
    SELECT id FROM {Brief._meta.db_table} WHERE id = %(brief_id)s FOR NO KEY UPDATE
)
INSERT INTO {Publication._meta.db_table}
    (brief_id, revision_id, operation_key, payload_hash, external_id, permalink, created_at, verified_at)
SELECT brief.id, %(revision_id)s, %(key)s, %(payload_hash)s, %(external_id)s, %(permalink)s, %(now)s, NULL
FROM brief
ON CONFLICT (operation_key) DO NOTHING
RETURNING id
"""  # noqa: S608 -- table names from the models; every value is a parameter


@transaction.atomic(savepoint=False)
def do_record_publication(
    revision: Revision, *, publish_operation_id: int, external_id: str, permalink: str
) -> Publication:
    """The publication and its verification intent, in the publish operation's finalize
    transaction (invariant 5). Idempotent: the publication is keyed by the operation key.

    Locks the brief first (README, "Lock order"), before the fenced update locks the operation.
    """
    public_id = revision.brief.public_id
    key = publish_key(public_id, revision.number)
    now = timezone.now()
    params = {
        "brief_id": revision.brief_id,
        "revision_id": revision.id,
        "key": key,
        "payload_hash": revision.payload_hash,
        "external_id": external_id,
        "permalink": permalink,
        "now": now,
    }
    with execute_prepared(RECORD_PUBLICATION_SQL, params) as cursor:
        inserted = cursor.fetchone()
    if inserted is None:
        publication = Publication.objects.get(operation_key=key)
    else:
        # What was just inserted: no second round trip to read it back.
        publication = Publication(
            id=inserted[0],
            brief_id=revision.brief_id,
            revision=revision,
            operation_key=key,
            payload_hash=revision.payload_hash,
            external_id=external_id,
            permalink=permalink,
            created_at=now,
        )
        publication._state.adding = False
    publication.revision = revision
    enqueue_operation(
        key=verify_key(public_id, revision.number),
        kind=VERIFY,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=public_id,
        subject_version=revision.number,
        arguments={"revision": revision.number, "publish_key": key},
        after=[(publish_operation_id, Dependency.Requires.SUCCESS)],
    )
    if inserted is not None:
        record_audit_event(
            acting_user=None,
            event_type="publication.recorded",
            subject_type="revision",
            subject_id=revision_subject_id(public_id, revision.number),
            old_state=None,
            new_state={"external_id": external_id, "permalink": permalink, "payload_hash": revision.payload_hash},
        )
    return publication


# The verification's finalize locks the brief in a statement of its own (first: README, "Lock
# order"): a statement that waited for the lock still reads other tables as they were when it began,
# and would miss a revision the lock's holder added meanwhile.
LOCK_BRIEF_SQL = f"""
SELECT public_id, status, published_revision_number, author_id
FROM {Brief._meta.db_table} WHERE id = %(brief_id)s
FOR NO KEY UPDATE
"""  # noqa: S608 -- the table name from the model; every value is a parameter

# Then its writes in one statement: mark the publication observed, advance the brief's published
# revision (never backwards: invariant 4) and show it published when this is its latest revision
# and its status may go there (do_change_brief_status's rule). It returns the brief's new status
# (None when it did not advance), its latest revision number, the brief's stuck publications of
# older revisions (publish or verify operations in resolutions.OPEN), which this one replaces, and
# the older publishes that ended without a Publication although their worker had recorded the
# target's receipt (`result`: applied there), dead, in conflict or cancelled by an operator.
RECORD_VERIFICATION_SQL = f"""
WITH verified AS (
    UPDATE {Publication._meta.db_table} SET verified_at = %(now)s
    WHERE id = %(publication_id)s AND verified_at IS NULL
),
latest AS (
    SELECT max(number) AS number FROM {Revision._meta.db_table} WHERE brief_id = %(brief_id)s
),
shown AS (
    SELECT b.id, (SELECT number FROM latest) = %(number)s AND b.status = ANY(%(may_publish)s::text[]) AS published
    FROM {Brief._meta.db_table} b WHERE b.id = %(brief_id)s
),
advanced AS (
    UPDATE {Brief._meta.db_table} b
    SET published_revision_number = %(number)s,
        status = CASE WHEN shown.published THEN %(published)s ELSE b.status END,
        updated_at = CASE WHEN shown.published THEN %(now)s ELSE b.updated_at END
    FROM shown
    WHERE b.id = shown.id
      AND (b.published_revision_number IS NULL OR b.published_revision_number < %(number)s)
    RETURNING b.status
)
SELECT (SELECT status FROM advanced),
       (SELECT number FROM latest),
       ARRAY(SELECT o.id FROM {Operation._meta.db_table} o
             WHERE o.subject_type = 'brief' AND o.subject_id = %(public_id)s
               AND o.kind = ANY(%(kinds)s::text[]) AND o.status = ANY(%(open)s::text[])
               AND o.arguments -> 'revision' < to_jsonb(%(number)s::integer)
             ORDER BY o.id),
       ARRAY(SELECT o.id FROM {Operation._meta.db_table} o
             WHERE o.subject_type = 'brief' AND o.subject_id = %(public_id)s
               AND o.kind = %(publish)s AND o.status = ANY(%(ended)s::text[]) AND o.result ? 'external_id'
               AND o.arguments -> 'revision' < to_jsonb(%(number)s::integer)
               AND NOT EXISTS (SELECT 1 FROM {Publication._meta.db_table} p WHERE p.operation_key = o.key)
             ORDER BY o.id)
"""  # noqa: S608 -- table names from the models; every value is a parameter


def _record_replaced_applications(operation_ids: list[int], *, brief_id: int, published_number: int) -> None:
    """Every application at the target ends with a Publication and an audit record, even a replaced one.

    An older revision's publish that ended without a Publication (dead or in conflict, about to be
    cancelled for revision `published_number`, or cancelled by an operator) although its attempt
    recorded the target's receipt before its finalize (the operation's `result`:
    workers.actions.claims) was applied there. It gets its Publication now, never verified (the
    target shows the newer revision), and an audit record saying which revision superseded it. The
    brief's published revision is not touched: it only ever advances (invariant 4), and only a
    verification advances it.

    In the verification's finalize, the brief locked (README, "Lock order")."""
    if not operation_ids:  # the usual case, on every verification: not even a query to compile
        return
    for operation in Operation.objects.filter(id__in=operation_ids).order_by("id"):
        revision = Revision.objects.get(brief_id=brief_id, number=int(operation.arguments["revision"]))
        receipt = operation.result
        _publication, created = Publication.objects.get_or_create(
            operation_key=operation.key,
            defaults={
                "brief_id": brief_id,
                "revision": revision,
                "payload_hash": revision.payload_hash,
                "external_id": str(receipt["external_id"]),
                "permalink": str(receipt.get("permalink", "")),
            },
        )
        if created:
            record_audit_event(
                acting_user=None,
                event_type="publication.recorded",
                subject_type="revision",
                subject_id=revision_subject_id(operation.subject_id, revision.number),
                old_state=None,
                new_state={
                    "external_id": receipt["external_id"],
                    "permalink": receipt.get("permalink", ""),
                    "payload_hash": revision.payload_hash,
                    "superseded_by_revision": published_number,
                },
            )


@transaction.atomic(savepoint=False)
def do_record_verification(publication: Publication) -> None:
    """Record the observation (invariant 10) and advance the brief's published revision, never
    backwards (invariant 4); the brief shows "published" when this is its latest revision.

    In the verify operation's finalize: locks the brief first, then the publication, then any
    operation rows; the fenced update locks the verify operation last (README, "Lock order").
    """
    number = publication.revision.number
    with execute_prepared(LOCK_BRIEF_SQL, {"brief_id": publication.brief_id}) as cursor:
        public_id, status, published_before, author_id = cursor.fetchone()  # type: ignore[misc]
    params = {
        "brief_id": publication.brief_id,
        "publication_id": publication.id,
        "public_id": public_id,
        "number": number,
        "now": timezone.now(),
        "published": Brief.Status.PUBLISHED,
        "may_publish": statuses_leading_to(Brief.Status.PUBLISHED),
        "kinds": list(PUBLICATION_KINDS),
        "open": list(OPEN),
        "publish": PUBLISH,
        "ended": [*OPEN, OperationStatus.CANCELLED],
    }
    with execute_prepared(RECORD_VERIFICATION_SQL, params) as cursor:
        new_status, latest, replaced, unrecorded = cursor.fetchone()  # type: ignore[misc]
    if new_status is None:  # a newer revision is published already: nothing advances
        return
    if latest == number and status != Brief.Status.PUBLISHED:
        check_brief_transition(public_id, status, Brief.Status.PUBLISHED)  # raises: the finalize rolls back
    _record_replaced_applications(unrecorded, brief_id=publication.brief_id, published_number=number)
    do_close_replaced_problems(replaced, published_number=number)
    record_audit_event(
        acting_user=None,
        event_type="publication.verified",
        subject_type="brief",
        subject_id=public_id,
        old_state={"published_revision": published_before, "status": status},
        new_state={"published_revision": number, "status": new_status, "permalink": publication.permalink},
    )
    # from_db takes the loaded fields in the model's order; the rest load if ever read.
    brief = Brief.from_db(
        None,
        ["id", "public_id", "author_id", "status", "published_revision_number"],
        [publication.brief_id, public_id, author_id, new_status, number],
    )
    announce_published(brief, revision_number=number, permalink=publication.permalink)
