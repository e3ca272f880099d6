"""Rate limits and Retry-After pauses shared by every worker (docs/operations.md#rate-limits-and-pauses,
docs/invariants.md#i9), with real processes: four `run_worker` processes publish through the reference
target, which records when each publication request arrived (GET /_arrivals).

- A channel limited to RATE sends a second: in no one-second window does the target see more
  publication requests than RATE + 1, however many workers send.
- A 429 storm (every request answered 429 with Retry-After for a while): the first answer pauses the
  channel for every worker, so the target sees at most one request per worker during each pause, no
  worker claims the channel's operations meanwhile, and every operation ends published having
  counted no attempt but its successful one (attempts - waits = 1).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator

import pytest
from django.db import transaction

from galley.reference_target import Faults, ReferenceTarget
from publishing.actions.channels import do_sync_channel_gate
from publishing.identities import PRIMARY_CHANNEL, PUBLISH
from publishing.models import Channel, Publication
from tests.acceptance.test_crash_points import approve, write_revision
from tests.processes import Child, child_database_url, process_env, wait_until
from tests.reference_target import TOKEN
from workers.models import Attempt, ChannelGate, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WORKERS = 4
RATE = 4
BRIEFS = 16
RETRY_AFTER = 3
PUBLISHED_TIMEOUT = 120


def start_workers(spawn: Callable[..., Child], target: ReferenceTarget, *, concurrency: int) -> list[Child]:
    env = process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_TARGET_URL=target.url,
        GALLEY_TARGET_TOKEN=TOKEN,
        GALLEY_TARGET_TIMEOUT_SECONDS="5",
        GALLEY_BACKOFF_BASE_SECONDS="0.2",
        GALLEY_BACKOFF_MAX_SECONDS="1",
        GALLEY_WORKER_CONCURRENCY=str(concurrency),
        GALLEY_CRASH_POINT="",
    )
    workers = [
        spawn(f"gate-{n}", "run_worker", "--worker-id", f"gate-{n}", "--poll", "0.2", env=env) for n in range(WORKERS)
    ]
    return workers


def approve_briefs(editor, approver, count: int) -> list[str]:
    keys = []
    for number in range(count):
        revision = write_revision(editor, title=f"Harbour strike, day {number + 1}")
        approve(revision, approver)
        keys.append(revision.brief.public_id)
    return keys


def wait_until_published(briefs: list[str]) -> None:
    wait_until(
        lambda: (
            Publication.objects.filter(brief__public_id__in=briefs, verified_at__isnull=False).count() == len(briefs)
        ),
        timeout=PUBLISHED_TIMEOUT,
        what=f"{len(briefs)} publications verified",
    )


@pytest.fixture
def target(start_target) -> Iterator[ReferenceTarget]:
    yield start_target()


def set_rate(rate: int | None) -> None:
    with transaction.atomic(durable=True):
        channel = Channel.objects.get(slug=PRIMARY_CHANNEL)
        channel.rate_per_second = rate
        channel.save(update_fields=["rate_per_second"])
        do_sync_channel_gate(channel)


def test_rate_limit__four_workers__no_second_holds_more_sends_than_the_rate_plus_one(spawn, target, editor, approver):
    set_rate(RATE)
    start_workers(spawn, target, concurrency=4)
    briefs = approve_briefs(editor, approver, BRIEFS)
    wait_until_published(briefs)

    sends = [arrival["arrived_at"] for arrival in target.arrivals()]
    assert len(sends) == BRIEFS  # one publication request each: nothing sent twice, nothing refused
    busiest = max(sum(1 for t in sends if start <= t < start + 1) for start in sends)
    print(f"{len(sends)} sends over {sends[-1] - sends[0]:.2f} s; busiest second: {busiest} (rate {RATE})")
    assert busiest <= RATE + 1
    assert sends[-1] - sends[0] >= (BRIEFS - 1) / RATE - 0.1
    gate = ChannelGate.objects.get(channel=PRIMARY_CHANNEL)
    assert gate.waits > 0  # the limit held sends back, rather than the workers being slow
    for operation in Operation.objects.filter(kind=PUBLISH):
        assert (operation.status, operation.attempts - operation.waits) == ("succeeded", 1), operation.key


def test_invariant_9__429_storm_on_a_channel__pauses_it_for_every_worker_and_counts_no_attempt(
    spawn, target, editor, approver
):
    target.faults = Faults(rate_429=1.0, retry_after=RETRY_AFTER)
    # One thread per worker: each worker has at most one request in flight when the channel pauses.
    start_workers(spawn, target, concurrency=1)
    briefs = approve_briefs(editor, approver, 8)
    wait_until(
        lambda: ChannelGate.objects.filter(channel=PRIMARY_CHANNEL, pauses__gte=3).exists(),
        timeout=60,
        what="three pauses of the channel",
    )
    target.faults = Faults()  # the storm ends
    wait_until_published(briefs)

    arrivals = target.arrivals()
    throttled = [a for a in arrivals if a["status"] == 429]
    assert len(throttled) >= 3
    # Each pause begins with a 429; until it ends (less a margin for the two clocks) the target sees at
    # most the requests already under way when it began: one per worker.
    first = throttled[0]["arrived_at"]
    during = [a for a in arrivals if first <= a["arrived_at"] < first + RETRY_AFTER - 0.5]
    print(f"{len(throttled)} answered 429; {len(during)} requests during the first pause")
    assert len(during) <= WORKERS
    # And no worker claimed the channel's operations while it was paused.
    pause_start = Attempt.objects.filter(error_kind="throttled").earliest("started_at").started_at
    inside = Attempt.objects.filter(
        operation__channel=PRIMARY_CHANNEL,
        started_at__gt=pause_start + datetime.timedelta(seconds=0.5),
        started_at__lt=pause_start + datetime.timedelta(seconds=RETRY_AFTER - 0.5),
    )
    assert not inside.exists(), list(inside.values_list("operation__key", "started_at", "worker_id"))
    # Waiting never used the attempt budget: every operation counted its successful attempt alone.
    operations = Operation.objects.filter(channel=PRIMARY_CHANNEL)
    assert operations.filter(kind=PUBLISH).count() == len(briefs)
    for operation in operations:
        assert (operation.status, operation.attempts - operation.waits) == ("succeeded", 1), operation.key
    assert sum(operation.waits for operation in operations) >= len(throttled)
