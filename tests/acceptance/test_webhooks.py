"""Webhooks with real processes (docs/webhooks.md): a subscriber program (tests/webhook_subscriber.py) is
SIGKILLed while events are being delivered and restarted later; a real worker process publishes
meanwhile. Each event reaches the subscriber once by its event id (the subscriber keeps it by
Idempotency-Key, as docs/webhooks.md asks), every delivery's signature verifies with the documented
code, a redelivery carries the same event id and body, and publishing never waits for the subscriber."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import transaction

from publishing.actions.webhooks import do_save_webhook_subscriber
from publishing.identities import WEBHOOK
from publishing.models import Brief, WebhookEvent, WebhookSubscriber
from tests.acceptance.test_crash_points import Target, approve, start_target, worker_env, write_revision
from tests.processes import Child, free_port, kill, process_env, start, wait_for_http, wait_until
from workers.errors import FailureKind
from workers.models import Attempt, Operation, OperationStatus

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

__all__ = ["start_target"]  # the fixture, used by name below

SECRET = "whsec-acceptance"


class SubscriberProcess:
    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hooks"
        self.ledger = tmp_path / "deliveries.jsonl"
        self.log = tmp_path / "subscriber.log"
        self.child: Child | None = None

    def start(self) -> None:
        argv = [
            "-m",
            "tests.webhook_subscriber",
            "--port",
            str(self.port),
            "--secret",
            SECRET,
            "--log",
            str(self.ledger),
        ]
        process = start(argv, env=process_env(), log=self.log)
        self.child = Child("subscriber", process, self.log)
        wait_for_http(self.url, process=process)

    def kill(self) -> None:
        assert self.child is not None
        kill(self.child.process)

    def records(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]


@pytest.fixture
def subscriber(tmp_path: Path) -> Iterator[SubscriberProcess]:
    running = SubscriberProcess(tmp_path)
    yield running
    if running.child is not None and running.child.process.poll() is None:
        kill(running.child.process)


def deliveries() -> list[Operation]:
    return list(Operation.objects.filter(kind=WEBHOOK).order_by("id"))


def published(briefs: list[Brief]) -> bool:
    return Brief.objects.filter(id__in=[brief.id for brief in briefs], status=Brief.Status.PUBLISHED).count() == len(
        briefs
    )


def test_webhooks__subscriber_sigkilled_and_restarted__each_event_once_signed_publishing_never_waits(
    editor, approver, operator, start_target: Callable[..., Target], subscriber, spawn, settings
):
    # Deliveries to a dead subscriber fail fast (connection refused) and back off; they must outlast its
    # downtime rather than become dead letters (the enqueue, here, sets each operation's budget).
    settings.GALLEY_MAX_ATTEMPTS = 200
    target = start_target()
    subscriber.start()
    with transaction.atomic(durable=True):
        do_save_webhook_subscriber(
            WebhookSubscriber(name="newsletter", url=subscriber.url), secret=SECRET, acting_user=operator
        )
    env = worker_env(target, GALLEY_WEBHOOK_TIMEOUT_SECONDS="2")
    worker = spawn("worker", "run_worker", "--worker-id", "w-hooks", "--poll", "0.2", env=env)

    early = [write_revision(editor, title=f"Harbour strike {n}") for n in range(2)]
    for revision in early:
        approve(revision, approver)
    wait_until(lambda: subscriber.records(), timeout=60, what="a first delivery")
    subscriber.kill()

    # While the subscriber is dead: two more approvals, and all four briefs publish and verify.
    late = [write_revision(editor, title=f"Harbour strike {n}") for n in range(2, 4)]
    for revision in late:
        approve(revision, approver)
    briefs = [revision.brief for revision in early + late]
    wait_until(lambda: published(briefs), timeout=90, what="every brief published while the subscriber is down")
    assert worker.process.poll() is None, worker.output()
    refused = Attempt.objects.filter(operation__kind=WEBHOOK, error_kind=FailureKind.CONNECTION)
    assert refused.exists(), "no delivery met the dead subscriber"

    subscriber.start()
    wait_until(
        lambda: all(op.status == OperationStatus.SUCCEEDED for op in deliveries()),
        timeout=90,
        what="every delivery made after the restart",
    )

    events = {str(event.id): event for event in WebhookEvent.objects.all()}
    # Two events per brief: approved, and verified on its one channel.
    assert sorted(event.type for event in events.values()) == ["publication.verified"] * 4 + ["revision.approved"] * 4
    assert len(deliveries()) == len(events)
    records = subscriber.records()
    assert all(record["verified"] for record in records), [r for r in records if not r["verified"]]
    kept = [record for record in records if not record["duplicate"]]
    assert sorted(record["idempotency_key"] for record in kept) == sorted(events)  # each event exactly once
    bodies: dict[str, str] = {}
    for record in records:
        key = record["idempotency_key"]
        body = json.loads(record["body"])
        assert key == record["event_id"] == body["id"]
        assert body["type"] == events[key].type and body["data"] == events[key].data
        # A redelivery (after a refused connection, or an answer lost to the SIGKILL) is the same body.
        assert bodies.setdefault(key, record["body"]) == record["body"]
    assert httpx.get(subscriber.url, timeout=5).status_code == 200
