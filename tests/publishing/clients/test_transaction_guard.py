"""The clients' guard of docs/invariants.md#i8 (publishing.clients.http.refuse_in_transaction): a call to the
target or the AI provider with a database transaction open on its thread is refused before anything
leaves, whichever way the transaction was opened; the services, real ones on local ports, see nothing."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from urllib.parse import quote

import pytest
from django.db import connection, transaction

from publishing.clients.ai import OfflineProvider, OpenAIProvider
from publishing.clients.http import TransactionOpen
from publishing.clients.target import TargetClient
from publishing.hashing import payload_hash
from tests.fake_openai import FakeOpenAI
from tests.reference_target import TOKEN

pytestmark = pytest.mark.django_db(transaction=True)

PAYLOAD = {"title": "Harbour strike", "body": "Dockers walked out at dawn."}
KEY = "publish:brief-001:revision-1"


def refused(call: str) -> str:
    """The refusal of `call`, as a pattern for pytest.raises."""
    return "^" + re.escape(f"{call} refused: a database transaction is open on default; nothing was sent") + "$"


@contextmanager
def atomic_holding_a_lock() -> Iterator[None]:
    """Django's atomic, with a row lock taken in it: what a call inside a finalize would hold."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM workers_operation FOR UPDATE")
        yield


@contextmanager
def autocommit_off() -> Iterator[None]:
    """Django's autocommit switched off and a query run: a transaction with no atomic block."""
    transaction.set_autocommit(False)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        yield
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)


@contextmanager
def begun_on_the_driver() -> Iterator[None]:
    """BEGIN sent on the driver's connection, behind Django's back."""
    connection.ensure_connection()
    connection.connection.execute("BEGIN")
    try:
        yield
    finally:
        connection.connection.execute("ROLLBACK")


TRANSACTIONS: dict[str, Callable[[], AbstractContextManager[object]]] = {
    "atomic_holding_a_lock": atomic_holding_a_lock,
    "atomic_before_any_query": transaction.atomic,
    "autocommit_off": autocommit_off,
    "begun_on_the_driver": begun_on_the_driver,
}


@pytest.fixture(params=sorted(TRANSACTIONS))
def open_transaction(request) -> Callable[[], AbstractContextManager[object]]:
    return TRANSACTIONS[request.param]


@pytest.fixture
def client(target) -> Iterator[TargetClient]:
    with TargetClient(base_url=target.url, token=TOKEN, timeout=5) as client:
        yield client


def publish(client: TargetClient) -> object:
    return client.publish(
        operation_key=KEY, brief_id="brief-001", revision=1, payload_hash=payload_hash(PAYLOAD), payload=PAYLOAD
    )


def test_invariant_8__target_call_in_a_transaction__refused_before_it_leaves(target, client, open_transaction):
    with open_transaction(), pytest.raises(TransactionOpen, match=refused(f"POST {target.url}/v1/publications")):
        publish(client)
    with (
        open_transaction(),
        pytest.raises(TransactionOpen, match=refused(f"GET {target.url}/v1/publications?operation_key={quote(KEY)}")),
    ):
        client.lookup(KEY)

    assert target.ledger() == []
    # The same client, with no transaction open, is let through.
    assert client.lookup(KEY) is None
    _receipt, applied = publish(client)
    assert applied and len(target.ledger()) == 1


def test_invariant_8__openai_call_in_a_transaction__refused_and_the_server_sees_nothing(open_transaction):
    with (
        FakeOpenAI(key="guard-key") as fake,
        closing(
            OpenAIProvider(base_url=f"{fake.url}/v1", api_key="guard-key", model="gpt-fake", timeout=5)
        ) as provider,
    ):
        with (
            open_transaction(),
            pytest.raises(TransactionOpen, match=refused(f"POST {fake.url}/v1/chat/completions")),
        ):
            provider.complete(system="You write the headline.", prompt="Dockers walked out.", seed="s")
        assert fake.calls() == []

        provider.complete(system="You write the headline.", prompt="Dockers walked out.", seed="s")
        assert len(fake.calls()) == 1


def test_invariant_8__offline_completion_in_a_transaction__refused(open_transaction):
    provider = OfflineProvider()
    with (
        open_transaction(),
        pytest.raises(TransactionOpen, match=refused("a completion by the offline AI provider")),
    ):
        provider.complete(system="You write the headline.", prompt="x\n\nDockers walked out at dawn.", seed="s")

    assert provider.complete(system="You write the headline.", prompt="x\n\nDockers walked out at dawn.", seed="s")


def test_invariant_8__refusal_names_the_call_without_the_urls_credentials():
    with (
        TargetClient(base_url="http://galley:s3cret-in-url@127.0.0.1:9", token=TOKEN, timeout=5) as client,
        transaction.atomic(),
        pytest.raises(TransactionOpen) as refusal,
    ):
        client.lookup(KEY)

    assert str(refusal.value).startswith("GET http://127.0.0.1:9/v1/publications?")
    assert "s3cret" not in str(refusal.value)
