"""Trouble in plain words (publishing.trouble): every publication state an editor can meet is one
sentence and its next step — never an operation key, a hash or an attempt count."""

from __future__ import annotations

import datetime
import re
import time

import pytest
from django.utils import timezone

from approvals.models import Approval
from publishing.identities import PUBLISH, VERIFY
from publishing.models import Publication
from publishing.trouble import ASK_AN_OPERATOR, NOTHING_TO_DO, tell_brief_publishing, tell_publication
from tests.approvals.test_approvals import decide
from tests.web import client_for
from workers.actions.claims import claim_operations, fail_operation
from workers.errors import LEASE_EXPIRED, FailureKind, OperationFailed
from workers.models import Operation, OperationStatus

AT = datetime.datetime(2026, 12, 2, 14, 5, tzinfo=datetime.UTC)
# What "engineering" looks like: an operation key, a sha256, a fencing token or an attempt count.
MACHINE_WORDS = re.compile(r"publish:|verify:|[0-9a-f]{16,}|token|attempt|lease", re.IGNORECASE)


def operation(status: str, kind: str = PUBLISH, error: str = "", message: str = "") -> Operation:
    return Operation(
        key=f"{kind}:brief-042:revision-3",
        kind=kind,
        status=status,
        last_error_kind=error,
        last_error_message=message,
        deadline=AT,
        attempts=7,
        max_attempts=8,
    )


def told(state: str, *operations: Operation, publication: Publication | None = None) -> str:
    result = tell_publication(state, publication=publication, operations=list(operations))
    assert not MACHINE_WORDS.search(result.sentence), result.sentence
    return str(result)


@pytest.mark.parametrize("error", [FailureKind.TIMEOUT, FailureKind.CONNECTION])
def test_retrying_timeouts__not_answering_until_the_deadline__nothing_to_do(error):
    assert (
        told("publishing", operation(OperationStatus.RETRY_WAIT, error=error, message="read timed out after 10 s"))
        == "The website is not answering; Galley retries until 14:05 — nothing to do"
    )


def test_retrying_server_errors_and_stalled_workers__said_so__nothing_to_do():
    assert told("publishing", operation(OperationStatus.RETRY_WAIT, error=FailureKind.SERVER_ERROR)).startswith(
        "The website is failing (a server error); Galley retries until 14:05"
    )
    assert told("publishing", operation(OperationStatus.RETRY_WAIT, error=LEASE_EXPIRED)).endswith(NOTHING_TO_DO)


def test_invariant_9__waiting_at_the_channels_gate__said_as_a_wait_not_a_failure__nothing_to_do():
    assert told("publishing", operation(OperationStatus.RETRY_WAIT, error=FailureKind.RATE_LIMITED)) == (
        "Waiting its turn: the website takes only so many stories a second; Galley retries until 14:05 — nothing to do"
    )
    assert told("publishing", operation(OperationStatus.RETRY_WAIT, error=FailureKind.CHANNEL_PAUSED)).startswith(
        "The website asked Galley to pause sending for a while;"
    )


def test_refused__the_websites_reason__ask_an_operator():
    refused = operation(OperationStatus.DEAD, error=FailureKind.INVALID, message="HTTP 422: title too long")

    assert told("failed", refused) == "The website refused the story (HTTP 422: title too long) — ask an operator"


def test_key_conflict__another_text_under_the_key__ask_an_operator():
    conflict = operation(OperationStatus.CONFLICT, error=FailureKind.KEY_CONFLICT, message="409 key_conflict: a1b2…")

    result = told("failed", conflict)

    assert result == "Needs an operator: the website holds another text under this story's key — ask an operator"


@pytest.mark.parametrize(
    "error",
    [FailureKind.STALE_REVISION, FailureKind.VERIFICATION_MISMATCH, FailureKind.DRIFT, FailureKind.AUTH, "unexpected"],
)
def test_every_stop_for_an_operator__says_ask_an_operator(error):
    result = tell_publication("failed", publication=None, operations=[operation(OperationStatus.DEAD, error=error)])

    assert result.needs_operator and result.next_step == ASK_AN_OPERATOR


def test_gave_up_on_timeouts__when_it_stopped__ask_an_operator():
    dead = operation(OperationStatus.DEAD, error=FailureKind.TIMEOUT)

    assert told("failed", dead) == "The website did not answer; Galley stopped retrying at 14:05 — ask an operator"


def test_published__checked_at_its_verification_time():
    publication = Publication(verified_at=AT.replace(minute=2), payload_hash="ab" * 32, external_id="77")

    assert told("published", publication=publication) == "Published and checked at 14:02"


def test_sending_and_verifying__plain__nothing_to_do():
    assert told("publishing", operation(OperationStatus.PENDING)) == "Sending the story to the website — nothing to do"
    verifying = told(
        "publishing", operation(OperationStatus.SUCCEEDED), operation(OperationStatus.RUNNING, kind=VERIFY)
    )
    assert verifying == "On the website; Galley is checking that it shows the approved text — nothing to do"


def test_superseded_and_cancelled__not_published_and_why__nothing_to_do():
    superseded = operation(OperationStatus.SUPERSEDED, message="revision 4 is published")
    cancelled = operation(OperationStatus.CANCELLED, message="cancelled by an operator: wrong desk")

    assert told("superseded", superseded) == "Not published: revision 4 is published — nothing to do"
    assert told("cancelled", cancelled) == "Not published: cancelled by an operator: wrong desk — nothing to do"
    assert told("cancelled", operation(OperationStatus.CANCELLED)).startswith("Not published: an operator cancelled it")


def test_not_sent__said_so__no_step():
    assert told("none") == "Nothing has been sent to the website yet"


def test_brief_status__only_a_publish_in_trouble_is_told():
    assert tell_brief_publishing([operation(OperationStatus.PENDING)]) is None
    retrying = tell_brief_publishing([operation(OperationStatus.RETRY_WAIT, error=FailureKind.TIMEOUT)])
    assert str(retrying) == "The website is not answering; Galley retries until 14:05 — nothing to do"


# --- on the pages: the sentence first, the machine's words folded under "Engineer detail" ---------------


def _visible(html: str) -> str:
    """The page without its "Engineer detail" folds."""
    return re.sub(r'<details class="engineer-detail".*?</details>', "", html, flags=re.DOTALL)


def _text(html: str) -> str:
    """The page's words as a reader sees them: no tags, one space between words."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _publish_failing(brief, revise, approver, failure: OperationFailed) -> Operation:
    revision = revise(brief, "Dockers walked out at dawn.")
    decide(revision, decision=Approval.Decision.APPROVED, by=approver)
    (claimed,) = claim_operations(worker_id="w-test", limit=1, kinds=[PUBLISH])
    fail_operation(claimed, failure, started=time.monotonic())
    return Operation.objects.get(id=claimed.operation_id)


@pytest.mark.django_db(transaction=True)
def test_pages__publish_timing_out__not_answering_with_the_deadline__key_and_attempts_folded(
    editor, approver, brief, revise
):
    publish = _publish_failing(brief, revise, approver, OperationFailed(FailureKind.TIMEOUT, "read timed out"))
    assert publish.status == OperationStatus.RETRY_WAIT
    sentence = f"The website is not answering; Galley retries until {timezone.localtime(publish.deadline):%H:%M}"
    client = client_for(editor)

    revision_page = client.get(f"/briefs/{brief.public_id}/revisions/1/").content.decode()
    brief_page = client.get(f"/briefs/{brief.public_id}/").content.decode()
    dashboard = client.get("/").content.decode()

    for html in (revision_page, brief_page, dashboard):
        assert f"{sentence} — {NOTHING_TO_DO}" in _text(html)
    assert publish.key in revision_page and publish.key not in _visible(revision_page)


@pytest.mark.django_db(transaction=True)
def test_pages__publish_refused__the_websites_reason__ask_an_operator(editor, approver, brief, revise):
    _publish_failing(brief, revise, approver, OperationFailed(FailureKind.INVALID, "HTTP 422: the title is too long"))
    client = client_for(editor)

    for path in (f"/briefs/{brief.public_id}/revisions/1/", f"/briefs/{brief.public_id}/", "/"):
        html = client.get(path).content.decode()
        told = "The website refused the story (HTTP 422: the title is too long) — ask an operator"
        assert told in _text(html), path
