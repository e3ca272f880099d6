"""Reconciling a channel after a failover lost commits (docs/operations.md#failover), with the real reference
target over HTTP: what the target holds that Galley lost is adopted by brief and by key, never sent twice,
and an approval lost with the old primary is counted and told to the operators.

A lost approval is set up as the failover leaves it: revision N exists in Galley with no approval, and the
target holds N under Galley's publish key with N's hash (sent by a worker of the old primary).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from publishing.actions.adoption import ADOPTED, APPROVAL_LOST
from publishing.clients.channels import client_for
from publishing.handlers.publications import handle_publish
from publishing.handlers.reconciliation import reconcile_channel
from publishing.hashing import payload_hash
from publishing.identities import PUBLISH, VERIFY, publish_key, revision_subject_id
from publishing.models import Brief, Publication, Revision
from publishing.story import render_story
from tests.publishing.handlers.test_superseded_applications import approve
from workers.actions.claims import claim_operations
from workers.drain import drain
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def sent_by_the_old_primary(public_id: str, number: int, payload: dict[str, Any]) -> None:
    """The target applies revision `number` of `payload` under its publish key, as a worker of the old
    primary did before the failover."""
    client_for("web").publish(
        operation_key=publish_key(public_id, number),
        brief_id=public_id,
        revision=number,
        payload_hash=payload_hash(payload),
        payload=payload,
        rendered=render_story(payload),
    )


def sent(revision: Revision) -> None:
    sent_by_the_old_primary(revision.brief.public_id, revision.number, revision.payload)


def test_nothing_lost__approval_lost_with_the_old_primary__adopted_counted_and_approved_again_without_a_second_post(
    target, brief, revise, approver, fast_retries
):
    revision = revise(brief, "Dockers walked out at dawn.")
    sent(revision)
    key = publish_key(brief.public_id, revision.number)

    found = reconcile_channel("web")

    assert (found.briefs, found.held, found.recorded, found.adopted, found.in_flight) == (1, 1, 0, 1, 0)
    assert (found.lost_approvals, found.unaccounted) == ([key], [])
    publication = Publication.objects.get(operation_key=key)
    assert (publication.revision_id, publication.verified_at) == (revision.id, None)  # recorded, not observed
    assert Brief.objects.get(pk=brief.pk).published_revision_number is None  # only a verification advances it
    events = AuditEvent.objects.filter(subject_id=revision_subject_id(brief.public_id, revision.number))
    assert sorted(events.filter(event_type__in=[ADOPTED, APPROVAL_LOST]).values_list("event_type", flat=True)) == [
        APPROVAL_LOST,
        ADOPTED,
    ]
    # Idempotent: a second run finds it recorded and tells nothing again.
    again = reconcile_channel("web")
    assert (again.recorded, again.adopted, again.lost_approvals) == (1, 0, [])

    # Approved again, its publish finds the post under its key: published, and the target applied it once.
    approve(revision, by=approver)
    drain(worker_id="w-test", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5)
    assert Brief.objects.get(pk=brief.pk).published_revision_number == revision.number
    assert [row["operation_key"] for row in target.ledger()] == [key]
    assert Publication.objects.get(operation_key=key).verified_at is not None


def test_nothing_lost__send_whose_record_was_lost__in_flight_left_to_its_operation_then_recorded(
    target, brief, revise, approver, fast_retries
):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    (claimed,) = claim_operations(worker_id="w-old-primary", limit=1, kinds=[PUBLISH])
    handle_publish(claimed)  # sent; its finalize never committed on the new primary

    found = reconcile_channel("web")
    assert (found.held, found.in_flight, found.adopted, found.lost_approvals) == (1, 1, 0, [])
    assert not Publication.objects.exists()  # the operation's own attempt adopts it, by key


def test_nothing_lost__target_holds_what_galley_has_no_revision_for__unaccounted_for_an_operator(
    target, brief, revise, capsys
):
    revise(brief, "Dockers walked out at dawn.")
    # Revision 2, written, approved and sent on the old primary, all of it lost with it.
    sent_by_the_old_primary(brief.public_id, 2, {"title": "Harbour strike", "body": "The port is closed."})

    call_command("reconcile_channels")

    key = publish_key(brief.public_id, 2)
    assert capsys.readouterr().out.splitlines() == [
        "web: briefs=1 held=1 recorded=0 adopted=0 lost_approvals=0 in_flight=0 unaccounted=1",
        f"web: unaccounted: {key} is at the target with no such revision in Galley",
    ]
    assert not Publication.objects.exists()


def test_nothing_lost__look_up_by_brief__newest_revision_held_or_none(target, brief, revise):
    client = client_for("web")
    assert client.held_of_brief(brief.public_id) is None
    first = revise(brief, "Dockers walked out at dawn.")
    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    sent(first)
    sent(second)
    held = client.held_of_brief(brief.public_id)
    assert (held.brief_id, held.revision) == (brief.public_id, 2)
    assert held.permalink.startswith(target.url)
