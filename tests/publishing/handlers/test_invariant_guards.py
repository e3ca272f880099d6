"""docs/invariants.md#i3 on the worker's own path: publish intents drained by the real worker against the real
reference target (tests/reference_target.py).

docs/invariants.md#i3 has two spellings: the decision form's (approvals.selectors.get_valid_approval) and the
worker's (publishing.selectors.publish_checks.PUBLISH_CHECKS_SQL). These tests hold the worker's to the rule: an
intent the approval path never wrote (a racing or buggy path, an operator's slip) is refused by the
worker itself, and the two spellings agree on every kind of decision.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest
from django.db import transaction

from approvals.actions import check_decide_revision
from approvals.models import Approval
from approvals.selectors import get_valid_approval
from galley.reference_target import ReferenceTarget
from publishing.actions.briefs import check_create_brief
from publishing.actions.publications import do_request_publication
from publishing.actions.revisions import check_restore_revision
from publishing.models import Brief, Publication, Revision
from publishing.roles import Role
from publishing.selectors.publish_checks import get_publish_checks
from tests.publishing.handlers.test_publications import (
    application_of,
    applied,
    approve,
    assert_published,
    fresh,
    publish_op,
    run_worker,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

FIRST = "Dockers walked out at dawn."
SECOND = "Dockers walked out at dawn; the port authority called for talks on Tuesday."
TARGET_LOGGER = "galley.reference_target.http"


@contextlib.contextmanager
def requests_to(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """The requests the reference target served meanwhile, as "METHOD path", from its access log (a
    line per request, written before the answer leaves)."""
    served: list[str] = []
    with caplog.at_level(logging.DEBUG, logger=TARGET_LOGGER):
        start = len(caplog.records)
        yield served
        for record in caplog.records[start:]:
            line = record.getMessage()
            if record.name == TARGET_LOGGER and line.startswith('127.0.0.1 "'):
                method, path, _version = line.split('"')[1].split(" ")
                served.append(f"{method} {path}")


def decide(revision: Revision, decision: str, *, by) -> None:
    """An approver's decision through the decision form's action (the approval path writes its own intent)."""
    with transaction.atomic(durable=True):
        check_decide_revision(
            revision.brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=decision,
            comment="Name the union.",
            acting_user=by,
        )


def publish_without_approval(revision: Revision) -> None:
    """A publish intent for `revision` that no approval of it wrote: what a racing or buggy path would
    do, through the real enqueue action (the real key, the revision's own hash) under the brief's lock."""
    with transaction.atomic(durable=True):
        Brief.objects.select_for_update(no_key=True).get(pk=revision.brief_id)
        assert do_request_publication(revision, channel="web").created


def published_first(target: ReferenceTarget, brief: Brief, revise, approver, caplog) -> Revision:
    first = revise(brief, FIRST)
    approve(first, by=approver)
    with requests_to(caplog) as served:
        assert run_worker() == {"succeeded": 1}
    # A publish verified in its own attempt, as the access log shows it: an empty log later means that
    # nothing was asked, not that nothing was logged.
    external_id = Publication.objects.get(revision=first).external_id
    assert served == ["POST /v1/publications", f"GET /v1/publications/{external_id}", f"GET /articles/{external_id}"]
    assert_published(brief, first)
    assert applied(target) == [application_of(first)]
    return first


def assert_worker_refuses(target: ReferenceTarget, revision: Revision, caplog, *, published: Revision) -> None:
    """Write a publish intent for `revision` without its approval, drain, and see it refused: dead,
    with the reason, and nothing asked of the target."""
    publish_without_approval(revision)

    with requests_to(caplog) as served:
        assert run_worker() == {"dead": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.attempts, operation.last_error_kind) == ("dead", 1, "invalid")
    assert operation.last_error_message == (
        f"no approval of revision {revision.number} with hash {revision.payload_hash[:12]}… exists; refusing to publish"
    )
    assert served == []  # not a look-up, not a send: the worker stopped before the network
    assert applied(target) == [application_of(published)]
    assert not Publication.objects.filter(revision=revision).exists()
    assert fresh(revision.brief).published_revision_number == published.number


@pytest.mark.parametrize("decision", [None, Approval.Decision.CHANGES_REQUESTED], ids=["undecided", "changes_asked"])
def test_invariant_3__publish_of_unapproved_revision_2__dead_and_nothing_sent(
    target, brief, revise, approver, make_user, caplog, decision
):
    first = published_first(target, brief, revise, approver, caplog)
    second = revise(brief, SECOND)
    if decision is not None:
        decide(second, decision, by=make_user("abe", Role.APPROVER))
    assert get_valid_approval(second) is None

    assert_worker_refuses(target, second, caplog, published=first)


def test_invariant_3__revision_with_the_content_of_an_approved_one__needs_its_own_approval(
    target, brief, revise, approver, editor, caplog
):
    first = published_first(target, brief, revise, approver, caplog)
    revise(brief, SECOND)
    with transaction.atomic(durable=True):
        third, created = check_restore_revision(brief.public_id, number=1, base_number=2, acting_user=editor)
    # The schema allows equal hashes across a brief's revisions (a restore writes one): the approval
    # binds (revision, hash), and revision 1's approval is of another revision.
    assert created and third.number == 3
    assert third.payload_hash == first.payload_hash and third.payload == first.payload

    assert_worker_refuses(target, third, caplog, published=first)


def test_invariant_3__worker_and_decision_form_agree_on_which_revision_is_approved(
    target, brief, revise, approver, make_user, editor
):
    """STYLE's "one owner per rule": the worker's SQL and the decision form's selector, held equal on
    an approved revision, one with changes requested, one restoring approved content, one with no
    decision, and a revision of another brief with the very same content."""
    first = revise(brief, FIRST)
    approve(first, by=approver)
    second = revise(brief, SECOND)
    decide(second, Approval.Decision.CHANGES_REQUESTED, by=make_user("abe", Role.APPROVER))
    with transaction.atomic(durable=True):
        third, _created = check_restore_revision(brief.public_id, number=1, base_number=2, acting_user=editor)
    fourth = revise(brief, "Dockers and the port authority meet on Tuesday.")
    with transaction.atomic(durable=True):
        other_brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    twin = revise(other_brief, FIRST)
    approve(twin, by=approver)
    assert twin.payload_hash == first.payload_hash

    revisions = [first, second, third, fourth, twin]
    worker = [get_publish_checks(r.brief.public_id, r.number, channel="web").approved for r in revisions]
    form = [get_valid_approval(r) is not None for r in revisions]

    assert worker == form == [True, False, False, False, True]
