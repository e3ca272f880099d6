"""Channel gates on real PostgreSQL: a channel's rate limit and its Retry-After pauses, shared by every
worker (docs/operations.md#rate-limits-and-pauses), and waiting at a gate never counted as an attempt
(docs/invariants.md#i9). tests/acceptance/test_rate_limit.py runs the same with worker processes."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from django.db import connection, connections
from django.utils import timezone

from tests.workers.test_operations import claim, enqueue, make_due
from tests.workers.test_sql import _plan
from workers.actions.claims import fail_operation
from workers.actions.gates import SLOT_SLEEP_SECONDS, pause_channel, reserve_send, set_channel_rate
from workers.drain import seconds_until_due
from workers.errors import FailureKind, OperationFailed
from workers.models import ChannelGate, Operation
from workers.sql import OPERATION, WAITING_DUE_SQL

pytestmark = pytest.mark.django_db


def fail_throttled(claimed, *, retry_after: float) -> None:
    failure = OperationFailed(FailureKind.THROTTLED, "429 from the channel", retry_after=retry_after, http_status=429)
    fail_operation(claimed, failure, started=time.monotonic())


def test_invariant_9__rate_limit_wait__never_counts_an_attempt():
    set_channel_rate("partner", rate_per_second=1)
    for number in range(3):
        enqueue(f"send-{number}", channel="partner", max_attempts=1)
    first, *held_back = claim(limit=3)
    reserve_send(first)  # the channel's one slot this second
    for claimed in held_back:
        with pytest.raises(OperationFailed) as waited:
            reserve_send(claimed)
        assert waited.value.kind == FailureKind.RATE_LIMITED
        fail_operation(claimed, waited.value, started=time.monotonic())
    rows = Operation.objects.filter(key__in=["send-1", "send-2"]).order_by("key")
    assert [(row.status, row.attempts - row.waits, row.last_error_kind) for row in rows] == [
        ("retry_wait", 0, "rate_limited"),
        ("retry_wait", 0, "rate_limited"),
    ]
    # Told to come back one slot apart, from the next free slot on: a backlog returns one per slot.
    gate = ChannelGate.objects.get(channel="partner")
    returns = [row.next_attempt_at for row in rows]
    assert returns[1] - returns[0] == pytest.approx(
        datetime.timedelta(seconds=1), abs=datetime.timedelta(milliseconds=50)
    )
    # (next_attempt_at is on the test transaction's clock, which stood still since the test began.)
    assert abs(returns[0] - gate.next_send_at) < datetime.timedelta(milliseconds=500)
    assert gate.waits == 2
    # Back again at its slot with no attempt left to fail: it waits once more, still not dead.
    make_due(key="send-1")
    (again,) = claim(limit=1)
    with pytest.raises(OperationFailed) as waited:
        reserve_send(again)
    fail_operation(again, waited.value, started=time.monotonic())
    assert Operation.objects.values_list("status", "attempts", "waits").get(key="send-1") == ("retry_wait", 2, 2)


def test_rate_limit__a_slot_within_the_bound__sleeps_for_it_and_sends():
    set_channel_rate("partner", rate_per_second=40)  # a slot every 25 ms, within the bound
    assert SLOT_SLEEP_SECONDS > 1 / 40
    for number in range(2):
        enqueue(f"send-{number}", channel="partner")
    first, second = claim(limit=2)
    started = time.monotonic()
    reserve_send(first)
    reserve_send(second)
    assert time.monotonic() - started >= 0.02


def test_rate_limit__no_gate_or_no_rate__sends_at_once_and_writes_nothing():
    enqueue("send-0", channel="web")
    enqueue("send-1", channel="")
    for claimed in claim(limit=2):
        reserve_send(claimed)
    set_channel_rate("web", rate_per_second=None)
    before = ChannelGate.objects.values_list("next_send_at", "waits", "updated_at").get(channel="web")
    enqueue("send-2", channel="web")
    (claimed,) = claim(limit=1)
    reserve_send(claimed)
    assert ChannelGate.objects.values_list("next_send_at", "waits", "updated_at").get(channel="web") == before


def test_rate_limit__set_channel_rate__idempotent_and_keeps_a_pause():
    set_channel_rate("partner", rate_per_second=5)
    paused_until = pause_channel("partner", seconds=30, reason="503")
    set_channel_rate("partner", rate_per_second=5)
    set_channel_rate("partner", rate_per_second=2)
    gate = ChannelGate.objects.get(channel="partner")
    assert (gate.rate_per_second, gate.paused_until, gate.pauses) == (2, paused_until, 1)


def test_invariant_9__retry_after_on_a_channel__pauses_it_for_every_worker_and_counts_no_attempt():
    enqueue("a-0", channel="partner", max_attempts=1)
    (throttled,) = claim("w1", limit=1)
    enqueue("a-1", channel="partner", max_attempts=1)
    enqueue("b-0", channel="web", max_attempts=1)
    fail_throttled(throttled, retry_after=60)
    gate = ChannelGate.objects.get(channel="partner")
    assert gate.paused_until > timezone.now() + datetime.timedelta(seconds=50)
    assert gate.pauses == 1
    assert "429" in gate.pause_reason
    make_due()
    # Another worker claims only the other channel's operation, the paused channel's stay queued.
    assert [c.key for c in claim("w2", limit=3)] == ["b-0"]
    row = Operation.objects.get(key="a-0")
    assert (row.status, row.attempts - row.waits) == ("retry_wait", 0)


def test_channel_pause__a_shorter_retry_after_never_shortens_it():
    first = pause_channel("partner", seconds=60, reason="long")
    assert pause_channel("partner", seconds=1, reason="short") == first
    gate = ChannelGate.objects.get(channel="partner")
    assert (gate.pause_reason, gate.pauses) == ("long", 2)
    assert pause_channel("partner", seconds=120, reason="longer") > first


def test_channel_pause__ended__the_channel_is_claimed_again():
    enqueue("a-0", channel="partner")
    pause_channel("partner", seconds=60, reason="429")
    assert claim(limit=1) == []
    ChannelGate.objects.filter(channel="partner").update(paused_until=timezone.now() - datetime.timedelta(hours=1))
    assert [c.key for c in claim(limit=1)] == ["a-0"]


def test_channel_pause__a_drain_sleeps_until_the_pause_ends_not_until_the_due_time():
    enqueue("a-0", channel="partner")
    make_due()
    assert seconds_until_due() == 0
    pause_channel("partner", seconds=30, reason="429")
    assert 25 < seconds_until_due() <= 30
    pause_channel("other", seconds=10, reason="429 with nothing waiting on it")
    assert 25 < seconds_until_due() <= 30


def test_channel_pause__claimed_before_the_pause__the_send_waits_until_its_end():
    enqueue("a-0", channel="partner")
    (claimed,) = claim(limit=1)
    pause_channel("partner", seconds=30, reason="429 to another worker")
    with pytest.raises(OperationFailed) as waited:
        reserve_send(claimed)
    assert waited.value.kind == FailureKind.CHANNEL_PAUSED
    assert 25 < waited.value.retry_after <= 30


def test_atomic_claim__the_paused_channel_check__keeps_the_claim_on_its_index():
    waiting = f"SELECT o.id FROM {OPERATION} o WHERE {WAITING_DUE_SQL} ORDER BY o.next_attempt_at, o.id LIMIT 2"
    assert "operation_due_idx" in _plan(waiting)
    pause_channel("partner", seconds=30, reason="429")
    assert "operation_due_idx" in _plan(waiting)


@pytest.mark.django_db(transaction=True)
def test_rate_limit__concurrent_senders__no_second_holds_more_sends_than_the_rate_plus_one():
    rate, senders, sends_each = 10, 6, 5
    set_channel_rate("partner", rate_per_second=rate)
    for number in range(senders * sends_each):
        enqueue(f"send-{number:02d}", channel="partner")
    claimed = claim(limit=senders * sends_each)
    sent: list[float] = []
    lock = threading.Lock()

    def sender(mine) -> None:
        try:
            for operation in mine:
                while True:
                    try:
                        slot_at = reserve_send(operation)
                    except OperationFailed as wait:
                        time.sleep(wait.retry_after or 0)
                        continue
                    # The slot the gate gave it, on the database clock: a thread a loaded machine runs late
                    # after its sleep sends late, which says nothing of the gate.
                    assert slot_at is not None
                    with lock:
                        sent.append(slot_at.timestamp())
                    break
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sender, args=(claimed[n::senders],)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    sent.sort()
    assert len(sent) == senders * sends_each
    busiest = max(sum(1 for t in sent if start <= t < start + 1) for start in sent)
    assert busiest <= rate + 1
    # And the limit is used, not merely respected: the sends spread over about (n - 1) / rate seconds.
    assert sent[-1] - sent[0] < (len(sent) - 1) / rate + 2
    connection.close()
