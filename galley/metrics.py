"""Prometheus metrics at /metrics (docs/operations.md#metrics), for operators and for a scraper with a token.

Two sources, one exposition:

- what the database knows (operations by state and kind, attempts by outcome and failure kind, the
  approval → published latency histogram, the queue time histogram, AI tokens used, the queue's
  oldest due age, expired leases, open conflicts, each channel's rate-limit waits and pauses, the
  database's oldest open transaction and the operation table's dead tuples) is
  read at scrape time by `DatabaseCollector`, through the same selectors as the ops page: nothing is
  counted twice, and every web process answers alike;
- what only a web process sees (requests by method, route name and status, and their latency) is
  counted by `RequestMetricsMiddleware` in that process. Under gunicorn each worker process has its
  own counts; with PROMETHEUS_MULTIPROC_DIR set, prometheus-client's multiprocess mode writes them
  to files there and a scrape of any process sums them all (docs/operations.md#metrics).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterator

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from publishing.roles import Role, has_role
from publishing.selectors.metrics import (
    ChannelFigures,
    get_publish_latency_histogram,
    list_ai_token_totals,
    list_channel_figures,
)
from publishing.selectors.overdue import count_overdue_schedules, list_schedule_lateness_histograms
from workers.selectors import (
    DurationHistogram,
    get_queue_health,
    get_queue_summary,
    list_attempt_totals,
    list_channel_gates,
    list_queue_depth,
    list_queue_time_histograms,
)

logger = logging.getLogger(__name__)

# Seconds from approval to a verified publication: a healthy publication takes a few seconds, a
# retried one minutes, one that waited for an operator hours.
LATENCY_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
# Seconds from an operation becoming claimable to its claim: a woken worker claims in milliseconds,
# a busy queue in seconds; minutes mean too few workers (or all of them stuck).
QUEUE_TIME_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# Seconds from a schedule's time T to its publish's first attempt: a ready worker starts within a second,
# a spike of schedules due at once within seconds; minutes mean a paused channel or too few workers.
LATENESS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# Any other method is counted as "other", so a client cannot grow the label set.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

HTTP_REQUESTS = Counter(
    "galley_http_requests", "HTTP requests answered, by method, route name and status.", ["method", "route", "status"]
)
HTTP_LATENCY = Histogram(
    "galley_http_request_duration_seconds", "Time to answer an HTTP request, by method and route.", ["method", "route"]
)


class RequestMetricsMiddleware:
    """Counts every request Django routes (static files are answered before it) by method, route
    name and status, and times it. The route is the URL pattern's name, never the path, so the
    number of series stays bounded; a path that matches no pattern is "unmatched"."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.view_name if match is not None else "unmatched"
        method = request.method if request.method in METHODS else "other"
        HTTP_REQUESTS.labels(method, route, str(response.status_code)).inc()
        HTTP_LATENCY.labels(method, route).observe(time.perf_counter() - started)
        return response


def _histogram(name: str, help_text: str, label: str, histograms: list[DurationHistogram]) -> HistogramMetricFamily:
    """A labelled histogram family from the database's cumulative counts (workers.selectors.histograms_of)."""
    family = HistogramMetricFamily(name, help_text, labels=[label])
    for histogram in histograms:
        family.add_metric(
            [histogram.label],
            buckets=[
                *((floatToGoString(bound), count) for bound, count in histogram.buckets),
                ("+Inf", histogram.count),
            ],
            sum_value=histogram.sum_seconds,
        )
    return family


class DatabaseCollector(Collector):
    """Galley's state as metrics, read from the database at each scrape (a few aggregate statements).
    If the database does not answer, `galley_database_up` is 0 and the other database metrics are
    left out, so the scrape itself still succeeds."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("galley_database_up", "1 if the database answered this scrape's queries, else 0.")
        try:
            metrics = list(self._from_database())
        except DatabaseError as exc:
            logger.warning("metrics: database unreachable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from metrics

    def _from_database(self) -> Iterator[Metric]:
        operations = GaugeMetricFamily(
            "galley_operations",
            "Operations kept (finished ones until purged), by state and kind.",
            labels=["state", "kind"],
        )
        for cell in list_queue_depth():
            operations.add_metric([cell.status, cell.kind], cell.count)
        yield operations

        summary = get_queue_summary()
        for name, help_text, value in (
            ("galley_operations_due", "Pending or retrying operations due now and not yet claimed.", summary.due),
            ("galley_leases_expired", "Running operations whose lease has expired.", summary.expired_leases),
            ("galley_conflicts_open", "Conflicts no operator has resolved yet.", summary.open_conflicts),
            (
                "galley_operations_needing_operator",
                "Dead or conflicting operations waiting for an operator.",
                summary.needs_operator,
            ),
        ):
            yield GaugeMetricFamily(name, help_text, value=value)
        age = summary.oldest_due_age.total_seconds() if summary.oldest_due_age else 0.0
        yield GaugeMetricFamily(
            "galley_queue_oldest_due_age_seconds",
            "How long the operation due longest has waited past its due time without a claim (0 when none is due).",
            value=age,
        )
        health = get_queue_health()
        yield GaugeMetricFamily(
            "galley_database_oldest_transaction_seconds",
            "Age of the oldest open transaction of the database's sessions (0 when none); it keeps every row version"
            " since it began, so dead tuples pile up (docs/operations.md#queue-health).",
            value=health.oldest_transaction_seconds,
        )
        yield GaugeMetricFamily(
            "galley_operation_table_dead_tuples",
            "Dead row versions in the operation table (vacuum removes them), as PostgreSQL's statistics last counted.",
            value=health.dead_tuples,
        )
        yield GaugeMetricFamily(
            "galley_operation_table_live_tuples",
            "Live rows in the operation table, as PostgreSQL's statistics last counted them.",
            value=health.live_tuples,
        )

        waits = CounterMetricFamily(
            "galley_channel_rate_limit_waits",
            "Sends a channel's gate held back (its rate limit or a pause), counted by every worker on every host.",
            labels=["channel"],
        )
        pauses = CounterMetricFamily(
            "galley_channel_pauses",
            "Answers with Retry-After (429, 503) that paused a channel for every worker.",
            labels=["channel"],
        )
        paused_for = GaugeMetricFamily(
            "galley_channel_paused_seconds",
            "Seconds left of a channel's pause (0 when not paused).",
            labels=["channel"],
        )
        rate = GaugeMetricFamily(
            "galley_channel_rate_limit_per_second",
            "A channel's configured sends per second (rate-limited channels).",
            labels=["channel"],
        )
        for gate in list_channel_gates():
            waits.add_metric([gate.channel], gate.waits)
            pauses.add_metric([gate.channel], gate.pauses)
            paused_for.add_metric([gate.channel], gate.paused_for.total_seconds())
            if gate.rate_per_second is not None:
                rate.add_metric([gate.channel], gate.rate_per_second)
        yield from (waits, pauses, paused_for, rate)

        attempts = CounterMetricFamily(
            "galley_attempts",
            'Attempts kept (purged with their finished operation), by outcome ("" while in flight) and failure kind.',
            labels=["outcome", "error_kind"],
        )
        for tally in list_attempt_totals():
            attempts.add_metric([tally.outcome, tally.error_kind], tally.count)
        yield attempts

        yield _histogram(
            "galley_queue_time_seconds",
            "From an operation becoming claimable (due, or its lease expired) to the claim, per attempt kept, by kind.",
            "kind",
            list_queue_time_histograms(bounds=QUEUE_TIME_BUCKETS),
        )
        yield _histogram(
            "galley_schedule_lateness_seconds",
            "From a scheduled publish's time T to the start of its first attempt, once per operation kept, by channel.",
            "channel",
            list_schedule_lateness_histograms(bounds=LATENESS_BUCKETS),
        )
        yield GaugeMetricFamily(
            "galley_schedules_overdue",
            "Schedules not published and verified GALLEY_SCHEDULE_LATENESS_SECONDS after their time (database clock).",
            value=count_overdue_schedules(),
        )

        yield from self._per_channel()

        tokens = CounterMetricFamily(
            "galley_ai_tokens",
            "AI tokens the summary steps' kept attempts used, by step, model and kind (prompt, completion).",
            labels=["step", "model", "kind"],
        )
        for total in list_ai_token_totals():
            tokens.add_metric([total.step, total.model, total.kind], total.tokens)
        yield tokens

        histogram = get_publish_latency_histogram(bounds=LATENCY_BUCKETS)
        buckets = [(floatToGoString(bound), count) for bound, count in histogram.buckets]
        yield HistogramMetricFamily(
            "galley_approval_to_published_seconds",
            "From a revision's first approval to the read-back that showed it published, per publication.",
            buckets=[*buckets, ("+Inf", histogram.count)],
            sum_value=histogram.sum_seconds,
        )

    def _per_channel(self) -> Iterator[Metric]:
        """Each channel's figures, all from one statement (publishing.selectors.metrics.list_channel_figures)."""
        figures = list_channel_figures()
        now = timezone.now()

        def oldest(channel: ChannelFigures) -> float:
            age = channel.oldest_queued_age(now)
            return age.total_seconds() if age is not None else 0.0

        families: tuple[tuple[type[GaugeMetricFamily | CounterMetricFamily], str, str, Callable[..., float]], ...] = (
            (
                GaugeMetricFamily,
                "galley_channel_queue_depth",
                "Pending or retrying operations, by channel.",
                lambda c: c.queued,
            ),
            (
                GaugeMetricFamily,
                "galley_channel_oldest_pending_age_seconds",
                "Age of the oldest pending or retrying operation, by channel (0 when none).",
                oldest,
            ),
            (
                CounterMetricFamily,
                "galley_channel_sends",
                "Publish attempts kept, waits included, by channel.",
                lambda c: c.sends,
            ),
            (
                CounterMetricFamily,
                "galley_channel_waits",
                'Tries the channel answered "wait" (throttled, in progress), on operations kept, by channel.',
                lambda c: c.waits,
            ),
            (GaugeMetricFamily, "galley_channel_dead_letters", "Dead operations kept, by channel.", lambda c: c.dead),
            (
                GaugeMetricFamily,
                "galley_channel_conflicts",
                "Operations stopped on a conflict, by channel.",
                lambda c: c.conflicts,
            ),
        )
        for family_type, name, help_text, value in families:
            family = family_type(name, help_text, labels=["channel"])
            for channel in figures:
                family.add_metric([channel.channel], value(channel))
            yield family


class WebProcessCollector(Collector):
    """This process's own metrics (the HTTP ones, and prometheus-client's process and platform
    collectors), or, in multiprocess mode, every process's HTTP metrics summed from the files."""

    def __init__(self) -> None:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory:
            self.source = CollectorRegistry()
            multiprocess.MultiProcessCollector(self.source, path=directory)
        else:
            self.source = REGISTRY

    def collect(self) -> Iterator[Metric]:
        yield from self.source.collect()


def exposition() -> bytes:
    """The whole exposition, built afresh for each scrape."""
    registry = CollectorRegistry()
    registry.register(WebProcessCollector())
    registry.register(DatabaseCollector())
    return generate_latest(registry)


def _refusal(status: int, text: str) -> HttpResponse:
    response = HttpResponse(f"{text}\n", status=status, content_type="text/plain; charset=utf-8")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="galley-metrics"'
    return response


def _token_presented(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


@require_GET
@never_cache
@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    """The exposition for a signed-in operator, or for a bearer of GALLEY_METRICS_TOKEN (compared in
    constant time); 401 for anyone else without a session, 403 for a signed-in non-operator. A
    refusal carries no data."""
    presented = _token_presented(request)
    expected = settings.GALLEY_METRICS_TOKEN
    if presented is not None:
        if not (expected and hmac.compare_digest(presented.encode(), expected.encode())):
            return _refusal(401, "The metrics token is not valid.")
    elif not has_role(request.user, Role.OPERATOR):
        if request.user.is_authenticated:
            return _refusal(403, "Only members of Operators, or a scraper with the metrics token, can read metrics.")
        return _refusal(401, "Sign in as an operator, or send the metrics token as a bearer token.")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
