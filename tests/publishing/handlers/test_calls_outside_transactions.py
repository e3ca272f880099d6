"""docs/invariants.md#i8: "no database transaction is held open across a network call", asserted at every call
a worker makes to a target or the AI provider: the real handlers, drained by the real worker, against
the reference target, a real WordPress, the offline provider and an OpenAI-compatible server
(tests/fake_openai.py).

The guard (publishing.clients.http.refuse_in_transaction) runs at every request of every client and
at every offline completion; here it is watched: each call it checked is recorded with the
transactions open at that moment, so a test sees that every kind of call was checked and that none
was made inside a transaction (one that was is refused, and the drain's outcome shows it too).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from django.db import transaction

from publishing.clients import http
from publishing.clients.target import check_configured_target
from publishing.identities import PUBLISH
from publishing.models import Publication, SummaryRun
from tests.fake_openai import FakeOpenAI
from tests.publishing.handlers.test_publications import approve, assert_published, publish_op, run_worker
from tests.publishing.handlers.test_summaries import create_brief, run_pipeline
from tests.publishing.handlers.test_wordpress_publishing import forget_galley_briefs, use_wordpress
from workers import registry
from workers.actions.claims import claim_operations
from workers.models import Operation

pytestmark = pytest.mark.django_db(transaction=True)

FAKE_OPENAI_KEY = "fake-openai-key-for-guards"


@pytest.fixture
def checked(monkeypatch) -> list[tuple[str, list[str]]]:
    """Every call the guard checks, as (call, the database aliases with a transaction open then);
    the guard itself still runs (and refuses) after the record is made."""
    seen: list[tuple[str, list[str]]] = []
    guard = http.refuse_in_transaction

    def watched(call: str) -> None:
        seen.append((call, http.open_transactions()))
        guard(call)

    monkeypatch.setattr(http, "refuse_in_transaction", watched)
    return seen


def kinds_of(checked: list[tuple[str, list[str]]], *, ids: dict[str, str]) -> set[str]:
    """The calls as "METHOD path", each path segment that is a key of `ids` named by its value (a
    URL's host and query left out)."""
    found = set()
    for call, _open in checked:
        method, _, url = call.partition(" ")
        segments = urlsplit(url).path.split("/")
        found.add(f"{method} {'/'.join(ids.get(segment, segment) for segment in segments)}")
    return found


def assert_none_in_a_transaction(checked: list[tuple[str, list[str]]]) -> None:
    assert checked, "the guard checked no call"
    assert [(call, held) for call, held in checked if held] == []


def publish_with_an_ambiguous_first_attempt(brief, revise, approver) -> Publication:
    """Approve, let a worker claim the publish and die, and drain: the takeover looks the key up
    before it sends, then (in the same attempt) reads back and fetches the permalink."""
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    (abandoned,) = claim_operations(worker_id="w-died", limit=1, kinds=[PUBLISH])
    Operation.objects.filter(id=abandoned.operation_id).update(lease_expires_at="2000-01-01T00:00:00Z")

    assert run_worker() == {"succeeded": 1}

    assert publish_op(revision).attempts == 2
    assert_published(brief, revision)
    return Publication.objects.get(revision=revision)


def test_invariant_8__every_call_to_the_reference_target__made_with_no_transaction_open(
    target, brief, revise, approver, checked
):
    assert check_configured_target()  # what a worker asks when it starts
    publication = publish_with_an_ambiguous_first_attempt(brief, revise, approver)

    assert kinds_of(checked, ids={publication.external_id: "<id>"}) >= {
        "GET /v1/status",  # the startup check
        "GET /v1/publications",  # the look-up by key (the startup check's and the takeover's)
        "POST /v1/publications",  # the publish
        "GET /v1/publications/<id>",  # the read-back
        "GET /articles/<id>",  # the permalink
    }
    assert_none_in_a_transaction(checked)


@pytest.mark.wordpress
def test_invariant_8__every_call_to_wordpress__made_with_no_transaction_open(
    settings, wordpress, brief, revise, approver, checked
):
    forget_galley_briefs(wordpress)
    use_wordpress(settings, wordpress, wordpress.url)
    assert check_configured_target()
    publication = publish_with_an_ambiguous_first_attempt(brief, revise, approver)

    calls = kinds_of(checked, ids={publication.external_id: "<id>"})
    assert calls >= {
        "GET /wp-json/galley/v1/status",
        "GET /wp-json/galley/v1/publications",
        "POST /wp-json/galley/v1/publications",
        "GET /wp-json/galley/v1/publications/<id>",
        f"GET {urlsplit(publication.permalink).path or '/'}",
    }
    assert_none_in_a_transaction(checked)


def test_invariant_8__every_offline_ai_completion__made_with_no_transaction_open(editor, checked):
    brief = create_brief(editor)

    run_pipeline()

    assert SummaryRun.objects.get(brief=brief).status == SummaryRun.Status.COMPLETED
    # One completion per step that asks (outline, draft, headline), more if a step was retried.
    assert {call for call, _open in checked} == {"a completion by the offline AI provider"}
    assert len(checked) >= 3
    assert_none_in_a_transaction(checked)


@pytest.fixture
def fake_openai(settings) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(key=FAKE_OPENAI_KEY) as fake:
        settings.GALLEY_AI_PROVIDER = "openai"
        settings.GALLEY_AI_BASE_URL = f"{fake.url}/v1"
        settings.GALLEY_AI_API_KEY = FAKE_OPENAI_KEY
        settings.GALLEY_AI_TIMEOUT_SECONDS = 10.0
        yield fake


def test_invariant_8__every_openai_completion__made_with_no_transaction_open(editor, fake_openai, checked):
    brief = create_brief(editor)

    run_pipeline()

    assert SummaryRun.objects.get(brief=brief).status == SummaryRun.Status.COMPLETED
    assert kinds_of(checked, ids={}) == {"POST /v1/chat/completions"}
    assert len(checked) == len(fake_openai.calls()) >= 3  # every call that reached the server was checked
    assert_none_in_a_transaction(checked)


def test_invariant_8__a_handler_that_calls_the_target_inside_a_transaction__refused_nothing_sent(
    target, brief, revise, approver, settings, monkeypatch
):
    """What the guard does when the rule is broken: a publish handler run inside a transaction (as a
    careless change would) is refused at its first request, which never leaves; the attempt says why."""
    settings.GALLEY_MAX_ATTEMPTS = 1
    handle_publish = registry.get_handler(PUBLISH)

    def inside_a_transaction(claimed):
        with transaction.atomic():
            return handle_publish(claimed)

    monkeypatch.setitem(registry._handlers, PUBLISH, inside_a_transaction)
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)

    assert run_worker() == {"dead": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.last_error_kind) == ("dead", "unexpected")
    assert operation.last_error_message.endswith(
        f"TransactionOpen: POST {target.url}/v1/publications refused: a database transaction is open on default;"
        " nothing was sent"
    )
    assert target.ledger() == []
