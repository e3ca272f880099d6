"""/metrics: who may read it, that it parses as Prometheus text, and that it moves with a publication."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import transaction
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from publishing.actions.briefs import check_create_brief
from publishing.identities import SUMMARY_STEP, publish_key
from publishing.models import StepArtifact
from tests.concurrency import clear_statistics_snapshot, make_dead_operation_tuples, transaction_held_open
from tests.publishing.handlers.test_publications import approve, run_worker
from tests.reference_target import TOKEN as TARGET_TOKEN
from tests.web import client_for
from workers.actions.gates import pause_channel, set_channel_rate
from workers.actions.operator import do_retry_operation_now
from workers.drain import drain
from workers.models import Attempt, ChannelGate
from workers.selectors import get_queue_health

METRICS = "/metrics"
TOKEN = "scrape-me-please"
SOURCE = (
    "The harbour authority closed the port at dawn after dockers walked out over pay. "
    "Ferries to the islands were cancelled, and the union said the strike would last three days."
)


def samples(response) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition as {(name, labels): value}, through prometheus-client's own parser."""
    assert response.status_code == 200, response.content.decode()
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(parsed, name: str, **labels: str) -> float:
    return parsed.get((name, frozenset(labels.items())), 0.0)


@pytest.mark.django_db
def test_metrics__anonymous__401_without_data():
    response = Client().get(METRICS)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "galley_" not in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["editor", "approver", "no_group"])
def test_metrics__signed_in_not_operator__403_without_data(users, role):
    response = client_for(users[role]).get(METRICS)
    assert response.status_code == 403
    assert "galley_" not in response.content.decode()


@pytest.mark.django_db
def test_metrics__operator__parses(users):
    parsed = samples(client_for(users["operator"]).get(METRICS))
    assert value(parsed, "galley_database_up") == 1
    assert value(parsed, "galley_approval_to_published_seconds_count") == 0
    assert ("galley_queue_oldest_due_age_seconds", frozenset()) in parsed


@pytest.mark.django_db
def test_metrics__token__right_one_reads_wrong_one_refused(settings):
    settings.GALLEY_METRICS_TOKEN = TOKEN
    assert samples(Client(headers={"Authorization": f"Bearer {TOKEN}"}).get(METRICS))
    for wrong in (f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN):
        response = Client(headers={"Authorization": wrong}).get(METRICS)
        assert response.status_code == 401, wrong
        assert "galley_" not in response.content.decode()


@pytest.mark.django_db
def test_metrics__no_token_configured__any_bearer_refused(settings):
    settings.GALLEY_METRICS_TOKEN = ""
    response = Client(headers={"Authorization": "Bearer "}).get(METRICS)
    assert response.status_code == 401


@pytest.mark.django_db(transaction=True)
def test_metrics__publication__counters_and_latency_histogram_move(publish, brief, operator):
    client = client_for(operator)
    before = samples(client.get(METRICS))

    assert publish(brief, "Dockers walked out at dawn.") == {"succeeded": 1}  # verified in the publish's attempt
    after = samples(client.get(METRICS))

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("galley_attempts_total", outcome="succeeded", error_kind="") == 1
    assert moved("galley_operations", state="succeeded", kind="publish") == 1
    assert moved("galley_operations", state="succeeded", kind="verify") == 0
    assert moved("galley_approval_to_published_seconds_count") == 1
    assert moved("galley_approval_to_published_seconds_bucket", le="+Inf") == 1
    assert moved("galley_approval_to_published_seconds_bucket", le="3600.0") == 1
    assert value(after, "galley_approval_to_published_seconds_sum") > 0
    # The first scrape was counted by the request middleware, under the route's name.
    assert moved("galley_http_requests_total", method="GET", route="metrics", status="200") == 1
    assert moved("galley_http_request_duration_seconds_count", method="GET", route="metrics") == 1


@pytest.mark.django_db(transaction=True)
def test_metrics__dead_letter__attempt_counted_by_failure_kind_and_operator_needed(publish, brief, operator):
    assert publish(brief, "Dockers walked out at dawn.", token="revoked-token") == {"dead": 1}

    parsed = samples(client_for(operator).get(METRICS))

    assert value(parsed, "galley_attempts_total", outcome="dead", error_kind="auth") == 1
    assert value(parsed, "galley_operations", state="dead", kind="publish") == 1
    assert value(parsed, "galley_operations_needing_operator") == 1
    assert value(parsed, "galley_approval_to_published_seconds_count") == 0


@pytest.mark.django_db
def test_metrics__channel_gates__rate_limit_waits_and_pauses_per_channel(operator):
    set_channel_rate("partner", rate_per_second=5)
    pause_channel("partner", seconds=60, reason="429 from the partner feed")
    pause_channel("partner", seconds=30, reason="429 again")
    ChannelGate.objects.filter(channel="partner").update(waits=3)

    parsed = samples(client_for(operator).get(METRICS))

    assert value(parsed, "galley_channel_rate_limit_waits_total", channel="partner") == 3
    assert value(parsed, "galley_channel_pauses_total", channel="partner") == 2
    assert 50 < value(parsed, "galley_channel_paused_seconds", channel="partner") <= 60
    assert value(parsed, "galley_channel_rate_limit_per_second", channel="partner") == 5
    assert value(parsed, "galley_channel_paused_seconds", channel="web") == 0


@pytest.mark.django_db(transaction=True)
def test_metrics__queue_time__each_claim_measured_from_due_to_claim(target, brief, revise, approver, operator):
    """Queue time (docs/operations.md#metrics): a publish due for over a second before a worker came is counted in the
    histogram as at least that long (a lower bound: a slow machine only makes it longer)."""
    client = client_for(operator)
    before = samples(client.get(METRICS))
    approve(revise(brief, "Dockers walked out at dawn."), by=approver)  # the publish is due now
    time.sleep(1.2)
    assert run_worker() == {"succeeded": 1}
    after = samples(client.get(METRICS))

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("galley_queue_time_seconds_count", kind="publish") == 1
    assert moved("galley_queue_time_seconds_count", kind="verify") == 0  # verified in the publish's attempt
    assert moved("galley_queue_time_seconds_bucket", kind="publish", le="+Inf") == 1
    assert moved("galley_queue_time_seconds_bucket", kind="publish", le="1.0") == 0  # it waited over a second
    assert moved("galley_queue_time_seconds_sum", kind="publish") >= 1.0
    attempt = Attempt.objects.get(operation__key=publish_key(brief.public_id, 1))
    assert attempt.due_at is not None and attempt.started_at - attempt.due_at >= datetime.timedelta(seconds=1)


@pytest.mark.django_db(transaction=True)
def test_metrics__summary_run__ai_tokens_by_step_model_and_kind(editor, operator):
    """AI tokens (docs/operations.md#metrics): what each summary step's attempts recorded, summed per
    step, model and kind."""
    brief = check_create_brief(title="Harbour strike", source_material=SOURCE, acting_user=editor)
    drain(worker_id="w-tokens", kinds=[SUMMARY_STEP], time_budget=60, idle_wait=0.5)
    assert brief.revisions.count() == 1  # the run went through: every step stored its artifact

    parsed = samples(client_for(operator).get(METRICS))

    expected: dict[tuple[str, str, str], int] = {}
    for attempt in Attempt.objects.filter(operation__kind=SUMMARY_STEP).select_related("operation"):
        step = attempt.operation.arguments["step"]
        model = StepArtifact.objects.get(identity=attempt.operation.result["artifact"]).model
        for name, count in attempt.usage.items():
            key = (step, model, name.removesuffix("_tokens"))
            expected[key] = expected.get(key, 0) + count
    assert {step for step, _, _ in expected} == {"outline", "draft", "headline", "standfirst"}  # the gate asks no model
    assert all(count > 0 for count in expected.values())
    shown = {
        (dict(labels)["step"], dict(labels)["model"], dict(labels)["kind"]): count
        for (name, labels), count in parsed.items()
        if name == "galley_ai_tokens_total"
    }
    assert shown == expected


@pytest.mark.integration
def test_metrics__multiprocess_dir__requests_of_every_process_summed(tmp_path: Path):
    """With PROMETHEUS_MULTIPROC_DIR (gunicorn's worker processes), a scrape answered by any one
    process reports the requests every process counted."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "galley.settings", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    setup = "import django; django.setup(); from galley import metrics; "
    count = setup + "metrics.HTTP_REQUESTS.labels('GET', 'ops', '200').inc()"
    read = setup + (
        "print(sum(s.value for family in metrics.WebProcessCollector().collect() for s in family.samples"
        " if s.name == 'galley_http_requests_total' and s.labels.get('route') == 'ops'))"
    )
    for _process in range(2):
        subprocess.run([sys.executable, "-c", count], env=env, check=True, timeout=120)
    result = subprocess.run(
        [sys.executable, "-c", read], env=env, check=True, timeout=120, capture_output=True, text=True
    )
    assert float(result.stdout.strip()) == 2


@pytest.mark.django_db(transaction=True)
def test_i15_metrics__missed_schedule__overdue_gauge_then_lateness_once_per_operation(
    target, brief, revise, schedule, operator, settings
):
    """A schedule 2 minutes past its T is one overdue schedule (the gauge, from publishing.selectors.overdue);
    its lateness (first attempt's start - T) is observed once for its channel, though it took two attempts
    (the first refused: wrong credentials; an operator's retry published it)."""
    settings.GALLEY_SCHEDULE_LATENESS_SECONDS = 60
    client = client_for(operator)
    before = samples(client.get(METRICS))
    publish = schedule(revise(brief, "Dockers walked out at dawn."), ago=120)
    assert value(samples(client.get(METRICS)), "galley_schedules_overdue") == 1

    settings.GALLEY_TARGET_TOKEN = "not-the-token"
    assert run_worker() == {"dead": 1}
    settings.GALLEY_TARGET_TOKEN = TARGET_TOKEN
    with transaction.atomic(durable=True):
        assert do_retry_operation_now(publish, acting_user=operator)
    assert run_worker() == {"succeeded": 1}
    assert Attempt.objects.filter(operation=publish).count() == 2
    after = samples(client.get(METRICS))

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert value(after, "galley_schedules_overdue") == 0
    assert moved("galley_schedule_lateness_seconds_count", channel="web") == 1
    assert moved("galley_schedule_lateness_seconds_bucket", channel="web", le="60.0") == 0  # two minutes late
    assert moved("galley_schedule_lateness_seconds_bucket", channel="web", le="+Inf") == 1
    assert moved("galley_schedule_lateness_seconds_sum", channel="web") >= 120


@pytest.mark.django_db
def test_metrics__transaction_held_open_and_dead_tuples__oldest_transaction_age_and_tuples_shown(users):
    """A transaction left open on another session pins the MVCC horizon: its age is on /metrics (the scrape's own
    transaction is not counted), beside the operation table's dead and live tuples."""
    client = client_for(users["operator"])
    idle = samples(client.get(METRICS))
    make_dead_operation_tuples(5)
    with transaction_held_open():
        clear_statistics_snapshot()
        held = samples(client.get(METRICS))

    assert value(idle, "galley_database_oldest_transaction_seconds") == 0.0  # this test's own transaction is left out
    assert value(held, "galley_database_oldest_transaction_seconds") > 0.0
    health = get_queue_health()
    assert value(held, "galley_operation_table_dead_tuples") == health.dead_tuples >= 5
    assert ("galley_operation_table_live_tuples", frozenset()) in held
