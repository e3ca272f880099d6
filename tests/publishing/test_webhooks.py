"""Signed event webhooks (docs/webhooks.md): each event is recorded with its delivery intents in the
transaction of what it tells, delivered by a worker with no transaction open, signed as documented,
and every redelivery carries the same event id and body. A subscriber that is down never holds back a
publication. Test names say which invariant they guard."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.db import transaction
from django.utils import timezone

from approvals.models import Approval
from publishing.actions.resolutions import check_cancel_publication
from publishing.actions.webhooks import do_emit_event, do_save_webhook_subscriber
from publishing.clients import webhooks
from publishing.credentials import SealedValueUnreadable, seal, unseal
from publishing.handlers.failures import call_service
from publishing.identities import PUBLISH, VERIFY, WEBHOOK, publish_key, webhook_key
from publishing.models import Brief, WebhookEvent, WebhookEventType, WebhookSubscriber
from tests.processes import free_port
from tests.publishing.handlers.test_publications import approve
from tests.webhook_subscriber import verify
from tests.workers.test_admin import operator_client, staff_operator
from workers.actions.operator import do_retry_operation_now
from workers.drain import drain
from workers.errors import FailureKind, OperationFailed
from workers.models import AuditEvent, Operation, OperationStatus
from workers.registry import OperatorNeeded, operator_needed

SECRET = "whsec-test-secret"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]


@pytest.fixture(autouse=True)
def _webhook_timeout(settings):
    settings.GALLEY_WEBHOOK_TIMEOUT_SECONDS = 2.0


@dataclass
class Subscriber:
    """An in-process subscriber: answers each POST with the next of `statuses` (then 200), records it;
    with `hang_seconds`, it reads each request and answers only that much later."""

    url: str
    statuses: list[int] = field(default_factory=list)
    received: list[dict[str, object]] = field(default_factory=list)
    hang_seconds: float = 0.0


@pytest.fixture
def subscriber() -> Iterator[Subscriber]:
    port = free_port()
    state = Subscriber(url=f"http://127.0.0.1:{port}/hooks")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append({"headers": dict(self.headers), "body": body})
            time.sleep(state.hang_seconds)
            self.send_response(state.statuses.pop(0) if state.statuses else 200)
            self.send_header("Retry-After", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def register(url: str, *, by, events: list[str] | None = None, enabled: bool = True) -> WebhookSubscriber:
    with transaction.atomic(durable=True):
        return do_save_webhook_subscriber(
            WebhookSubscriber(name="newsletter", url=url, events=events or [], enabled=enabled),
            secret=SECRET,
            acting_user=by,
        )


def emit(**data) -> WebhookEvent:
    with transaction.atomic(durable=True):
        event = do_emit_event(WebhookEventType.REVISION_APPROVED, brief_public_id="brief-001", data=data)
    assert event is not None
    return event


def deliver(**kwargs) -> object:
    return drain(worker_id="w-hooks", kinds=[WEBHOOK], time_budget=30, idle_wait=0.3, **kwargs)


def webhook_ops() -> list[Operation]:
    return list(Operation.objects.filter(kind=WEBHOOK).order_by("id"))


# --- the signature -------------------------------------------------------------------------------


def test_signature__documented_scheme__verifies_and_refuses_other_body_secret_or_stale_time():
    body = b'{"id":"e1","type":"revision.approved"}'
    now = int(time.time())
    header = webhooks.signature(SECRET, timestamp=now, body=body)

    assert header.startswith(f"t={now},v1=")
    assert verify(SECRET, body, header)
    assert not verify(SECRET, body + b" ", header)
    assert not verify("another-secret", body, header)
    assert not verify(SECRET, body, webhooks.signature(SECRET, timestamp=now - 3600, body=body))


def test_delivery__headers_carry_event_id_as_idempotency_key__body_as_signed():
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    client = webhooks.WebhookClient(transport=httpx.MockTransport(answer))
    body = b'{"data":{},"id":"e-1","type":"revision.approved"}'

    assert client.deliver("http://subscriber.invalid/h", event_id="e-1", body=body, secret=SECRET) == 204
    (request,) = seen
    assert request.headers["Idempotency-Key"] == request.headers["Galley-Event-Id"] == "e-1"
    assert request.headers["Galley-Signature"].startswith(f"t={request.headers['Galley-Timestamp']},v1=")
    assert request.content == body
    assert verify(SECRET, request.content, request.headers["Galley-Signature"])


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (500, FailureKind.SERVER_ERROR),
        (502, FailureKind.SERVER_ERROR),
        (408, FailureKind.TIMEOUT),
        (429, FailureKind.THROTTLED),
        (503, FailureKind.THROTTLED),
        (400, FailureKind.INVALID),
        (404, FailureKind.INVALID),
        (410, FailureKind.INVALID),
        (301, FailureKind.INVALID),
        (401, FailureKind.AUTH),
    ],
)
def test_retry_by_failure_kind__subscriber_answers__mapped_as_documented(status, kind):
    client = webhooks.WebhookClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(status, headers={"Retry-After": "7"}))
    )
    with pytest.raises(OperationFailed) as failed:
        call_service(lambda: client.deliver("http://subscriber.invalid/h", event_id="e", body=b"{}", secret=SECRET))
    assert failed.value.kind == kind
    if kind == FailureKind.THROTTLED:
        assert failed.value.retry_after == 7


# --- the intent, in the caller's transaction -------------------------------------------------------


def test_atomic_continuation__event_emitted_in_rolled_back_transaction__writes_nothing(operator, subscriber):
    register(subscriber.url, by=operator)

    with pytest.raises(RuntimeError), transaction.atomic(durable=True):
        do_emit_event(WebhookEventType.REVISION_APPROVED, brief_public_id="brief-001", data={"revision": 1})
        assert WebhookEvent.objects.count() == 1 and len(webhook_ops()) == 1
        raise RuntimeError("the caller's write failed")

    assert WebhookEvent.objects.count() == 0
    assert webhook_ops() == []


def test_operation_identity__one_delivery_per_enabled_subscriber_that_wants_the_type(operator, subscriber):
    everything = register(subscriber.url, by=operator)
    problems_only = register(subscriber.url, by=operator, events=[WebhookEventType.PUBLICATION_PROBLEM])
    register(subscriber.url, by=operator, enabled=False)

    event = emit(revision=1)

    (operation,) = webhook_ops()
    assert (
        operation.key == webhook_key(str(event.id), everything.id) == f"webhook:{event.id}:subscriber-{everything.id}"
    )
    assert operation.channel == ""
    assert not Operation.objects.filter(key=webhook_key(str(event.id), problems_only.id)).exists()


def test_append_only__stored_event__database_refuses_change(operator, subscriber):
    register(subscriber.url, by=operator)
    event = emit(revision=1)

    with pytest.raises(Exception, match="immutable"), transaction.atomic():
        WebhookEvent.objects.filter(id=event.id).update(data={"revision": 2})


# --- delivery and replays ----------------------------------------------------------------------------


def test_replay__server_error_then_success__same_event_id_and_body_each_signature_verifies(operator, subscriber):
    register(subscriber.url, by=operator)
    subscriber.statuses = [500, 503]
    event = emit(revision=1)

    deliver()

    (operation,) = webhook_ops()
    assert operation.status == OperationStatus.SUCCEEDED
    assert len(subscriber.received) == 3
    bodies = {request["body"] for request in subscriber.received}
    assert len(bodies) == 1
    body = json.loads(bodies.pop())
    assert body == {
        "id": str(event.id),
        "type": "revision.approved",
        "created_at": event.created_at.isoformat(),
        "data": {"brief": "brief-001", "revision": 1},
    }
    for request in subscriber.received:
        headers = request["headers"]
        assert headers["Idempotency-Key"] == headers["Galley-Event-Id"] == str(event.id)
        assert verify(SECRET, request["body"], headers["Galley-Signature"])


def test_replay__dead_letter_retried_by_operator__same_event_id_and_body(operator, subscriber):
    register(subscriber.url, by=operator)
    subscriber.statuses = [400]
    event = emit(revision=1)
    deliver()
    (operation,) = webhook_ops()
    assert operation.status == OperationStatus.DEAD

    with transaction.atomic(durable=True):
        assert do_retry_operation_now(operation, acting_user=operator)
    deliver()

    operation.refresh_from_db()
    assert operation.status == OperationStatus.SUCCEEDED
    first, replay = subscriber.received
    assert first["body"] == replay["body"]
    assert first["headers"]["Idempotency-Key"] == replay["headers"]["Idempotency-Key"] == str(event.id)


def test_unreadable_secret__delivery_dead_letter_for_an_operator__nothing_sent(operator, subscriber, settings):
    register(subscriber.url, by=operator)
    current = settings.SECRET_KEY
    settings.SECRET_KEY = "the-key-before-a-rotation"
    WebhookSubscriber.objects.update(secret_sealed=seal(SECRET))
    settings.SECRET_KEY = current
    emit(revision=1)

    deliver()

    (operation,) = webhook_ops()
    assert (operation.status, operation.last_error_kind, operation.needs_operator) == (
        OperationStatus.DEAD,
        FailureKind.AUTH,
        True,
    )
    assert "set it in the admin" in operation.last_error_message
    assert subscriber.received == []


def test_subscriber_deleted_before_delivery__delivery_superseded__nothing_sent(operator, subscriber):
    registered = register(subscriber.url, by=operator)
    emit(revision=1)
    registered.delete()

    deliver()

    (operation,) = webhook_ops()
    assert operation.status == OperationStatus.SUPERSEDED
    assert subscriber.received == []


# --- the lifecycle's events -------------------------------------------------------------------------


def test_approve_and_publish__revision_approved_then_verified_on_the_channel__delivered(
    operator, approver, brief, revise, target, subscriber
):
    register(subscriber.url, by=operator)
    revision = revise(brief, "Dockers walked out at dawn.")

    approve(revision, by=approver)
    drain(worker_id="w-pub", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5)
    deliver()

    bodies = [json.loads(request["body"]) for request in subscriber.received]
    assert [body["type"] for body in bodies] == ["revision.approved", "publication.verified"]
    approved, verified = (body["data"] for body in bodies)
    assert approved == {
        "brief": brief.public_id,
        "revision": revision.number,
        "payload_hash": revision.payload_hash,
        "approver": approver.username,
    }
    publication = brief.publications.get()
    assert verified == {
        "brief": brief.public_id,
        "channel": "web",
        "revision": revision.number,
        "payload_hash": revision.payload_hash,
        "permalink": publication.permalink,
    }


def test_down_subscriber__does_not_delay_publishing__publish_verifies_while_deliveries_retry(
    operator, approver, brief, revise, target, settings
):
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 5.0
    register(f"http://127.0.0.1:{free_port()}/nobody-listens", by=operator)
    revision = revise(brief, "Dockers walked out at dawn.")

    approve(revision, by=approver)
    # One worker for every kind, the webhooks' first: their failures never hold back the publication.
    drain(worker_id="w-all", kinds=[WEBHOOK, PUBLISH, VERIFY], time_budget=10, idle_wait=0.5)

    brief = Brief.objects.get(pk=brief.pk)
    assert (brief.status, brief.published_revision_number) == (Brief.Status.PUBLISHED, revision.number)
    operations = webhook_ops()
    assert len(operations) == 2  # approved, verified
    assert all(op.status == OperationStatus.RETRY_WAIT for op in operations)
    assert all(op.last_error_kind == FailureKind.CONNECTION for op in operations)


def test_hanging_subscriber__does_not_delay_publishing__verified_before_its_delivery_times_out(
    operator, approver, brief, revise, target, subscriber, settings
):
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 30.0
    settings.GALLEY_WEBHOOK_TIMEOUT_SECONDS = 8.0
    subscriber.hang_seconds = 12.0
    register(subscriber.url, by=operator, events=[WebhookEventType.REVISION_APPROVED])
    revision = revise(brief, "Dockers walked out at dawn.")
    emit(revision=1)  # an earlier event: its delivery is due before the publish is

    approve(revision, by=approver)
    drain(worker_id="w-all", kinds=[WEBHOOK, PUBLISH, VERIFY], time_budget=40, idle_wait=0.5)

    publication = brief.publications.get()
    operation = webhook_ops()[0]
    (attempt,) = operation.attempt_set.all()
    assert attempt.error_kind == FailureKind.TIMEOUT
    assert publication.verified_at is not None and publication.verified_at < attempt.finished_at


def test_publication_problem_and_resolution__events_name_the_channel(operator, approver, brief, revise, subscriber):
    register(subscriber.url, by=operator)
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    publish = Operation.objects.get(key=publish_key(brief.public_id, revision.number))

    with transaction.atomic(durable=True):
        Operation.objects.filter(id=publish.id).update(
            status=OperationStatus.DEAD, needs_operator=True, finished_at=timezone.now()
        )
        operator_needed(
            OperatorNeeded(
                operation_id=publish.id,
                kind=PUBLISH,
                subject_type="brief",
                subject_id=brief.public_id,
                subject_version=revision.number,
                arguments={},
                status=OperationStatus.DEAD,
                message="the target refused our credentials",
            )
        )
    with transaction.atomic(durable=True):
        assert check_cancel_publication(publish, reason="wrong site", acting_user=operator).changed

    events = {event.type: event.data for event in WebhookEvent.objects.all()}
    assert events[WebhookEventType.PUBLICATION_PROBLEM] == {
        "brief": brief.public_id,
        "channel": "web",
        "revision": revision.number,
        "kind": PUBLISH,
        "operation_key": publish.key,
        "status": "dead",
        "message": "the target refused our credentials",
    }
    resolved = events[WebhookEventType.PUBLICATION_RESOLVED]
    assert (resolved["channel"], resolved["resolution"], resolved["operation_key"]) == ("web", "cancel", publish.key)


def test_no_subscriber__approval__records_no_event(approver, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    assert Approval.objects.filter(revision=revision).exists()
    assert WebhookEvent.objects.count() == 0 and webhook_ops() == []


# --- the secret: write-only ----------------------------------------------------------------------------


def test_credentials__sealed_at_rest__unsealed_only_by_the_same_key(settings):
    sealed = seal(SECRET)
    assert SECRET not in sealed and unseal(sealed) == SECRET
    settings.SECRET_KEY = "another-secret-key-entirely"
    with pytest.raises(SealedValueUnreadable):
        unseal(sealed)


SUBSCRIBERS = "/admin/publishing/webhooksubscriber/"


def test_write_only_secret__admin_sets_it__never_shows_logs_or_audits_it(operator_client, operator, subscriber):
    created = operator_client.post(
        f"{SUBSCRIBERS}add/",
        {
            "name": "newsletter",
            "url": subscriber.url,
            "events": ["revision.approved"],
            "enabled": "on",
            "secret": SECRET,
        },
    )
    assert created.status_code == 302, created.content.decode()[:2000]
    registered = WebhookSubscriber.objects.get()
    assert unseal(registered.secret_sealed) == SECRET and registered.events == ["revision.approved"]

    page = operator_client.get(f"{SUBSCRIBERS}{registered.pk}/change/").content.decode()
    listing = operator_client.get(SUBSCRIBERS).content.decode()
    assert SECRET not in page and SECRET not in listing and registered.secret_sealed not in page
    assert "set" in page

    # A change without a secret keeps it; a new one replaces it.
    changed = operator_client.post(
        f"{SUBSCRIBERS}{registered.pk}/change/",
        {"name": "newsletter 2", "url": subscriber.url, "enabled": "on", "secret": ""},
    )
    assert changed.status_code == 302
    registered.refresh_from_db()
    assert unseal(registered.secret_sealed) == SECRET and registered.name == "newsletter 2"
    operator_client.post(
        f"{SUBSCRIBERS}{registered.pk}/change/",
        {"name": "newsletter 2", "url": subscriber.url, "enabled": "on", "secret": "a-new-secret"},
    )
    registered.refresh_from_db()
    assert unseal(registered.secret_sealed) == "a-new-secret"
    operator_client.post(f"{SUBSCRIBERS}{registered.pk}/delete/", {"post": "yes"})
    assert not WebhookSubscriber.objects.exists()

    records = list(AuditEvent.objects.filter(subject_type="webhook_subscriber").order_by("id"))
    assert [record.event_type for record in records] == [
        "webhook_subscriber.created",
        "webhook_subscriber.changed",
        "webhook_subscriber.changed",
        "webhook_subscriber.deleted",
    ]
    assert all(record.actor == operator for record in records)
    dumped = json.dumps([[record.old_state, record.new_state] for record in records])
    assert SECRET not in dumped and "a-new-secret" not in dumped and "sealed" not in dumped
    assert records[2].new_state["secret_changed"] is True


def test_write_only_secret__new_subscriber_without_secret__refused(operator_client, subscriber):
    response = operator_client.post(f"{SUBSCRIBERS}add/", {"name": "x", "url": subscriber.url, "enabled": "on"})
    assert response.status_code == 200
    assert "Set a secret" in response.content.decode()
    assert not WebhookSubscriber.objects.exists()


def test_deliveries_admin__dead_letter_listed__retry_now_replays_it(operator_client, operator, subscriber):
    register(subscriber.url, by=operator)
    subscriber.statuses = [410]
    emit(revision=1)
    deliver()
    (operation,) = webhook_ops()

    listing = operator_client.get("/admin/publishing/webhookdelivery/?status__exact=dead").content.decode()
    assert operation.key in listing
    response = operator_client.post(
        "/admin/publishing/webhookdelivery/",
        {"action": "retry_now", "_selected_action": [str(operation.pk)], "index": "0", "select_across": "0"},
        follow=True,
    )
    assert response.status_code == 200
    deliver()
    operation.refresh_from_db()
    assert operation.status == OperationStatus.SUCCEEDED
    assert len(subscriber.received) == 2


__all__ = ["operator_client", "staff_operator"]  # fixtures, used by name
