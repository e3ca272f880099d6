"""/metrics: who may read it, that it parses as Prometheus text, and that it moves with a publication."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.web import client_for

METRICS = "/metrics"
TOKEN = "scrape-me-please"


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

    assert publish(brief, "Dockers walked out at dawn.") == {"succeeded": 2}
    after = samples(client.get(METRICS))

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("galley_attempts_total", outcome="succeeded", error_kind="") == 2
    assert moved("galley_operations", state="succeeded", kind="publish") == 1
    assert moved("galley_operations", state="succeeded", kind="verify") == 1
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
