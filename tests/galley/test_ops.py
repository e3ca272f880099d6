"""The operators' page, /ops/: who may see it, what it shows after real publications, what it costs."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test import Client
from django.test.utils import CaptureQueriesContext
from playwright.sync_api import expect

from galley.reference_target import Faults
from publishing.actions.briefs import check_create_brief
from publishing.identities import (
    DRIFT_CHECK,
    REPUBLISH,
    SUMMARY_STEP,
    drift_check_key,
    publish_key,
    republish_key,
    step_key,
)
from publishing.roles import Role
from tests.browser import PASSWORD, screenshot, sign_in
from tests.concurrency import make_dead_operation_tuples, transaction_held_open
from tests.processes import BASE_DIR
from tests.publishing.handlers.test_publications import approve, run_worker
from tests.web import client_for
from workers.actions.enqueue import enqueue_operation
from workers.actions.gates import pause_channel
from workers.drain import drain
from workers.models import Operation
from workers.selectors import get_queue_health

OPS = "/ops/"


def _points(html: str, chart: str) -> list[str]:
    """The data points (circles) of one chart's SVG on the page."""
    match = re.search(rf'<figure class="card ops-chart" id="{chart}">(.*?)</figure>', html, re.S)
    assert match, f"no chart {chart}"
    return re.findall(r'<circle class="chart-point"', match.group(1))


@pytest.mark.django_db
def test_ops__anonymous__sent_to_sign_in():
    response = Client().get(OPS)
    assert (response.status_code, response["Location"]) == (302, f"/login/?next={OPS}")


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["editor", "approver", "no_group"])
def test_ops__not_an_operator__refused_with_reason(users, role):
    response = client_for(users[role]).get(OPS)
    assert response.status_code == 403
    assert "Only members of Operators can see the operations page." in response.content.decode()
    assert 'id="ops-status"' not in response.content.decode()


@pytest.mark.django_db
def test_ops__operator__sees_page_and_nav_link(users):
    client = client_for(users["operator"])
    response = client.get(OPS)
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="ops-status"' in html
    assert f'<a href="{OPS}">Ops</a>' in html
    assert "No dead letters." in html
    # Nobody else is shown the link.
    assert f'<a href="{OPS}">Ops</a>' not in client_for(users["editor"]).get("/").content.decode()
    # Styles come from the stylesheet only (the policy allows no inline style).
    assert "style=" not in html and "<style" not in html


@pytest.mark.django_db(transaction=True)
def test_ops__after_publications__charts_have_points_and_dead_letter_shows_reason(publish, brief, operator, make_user):
    assert publish(brief, "Dockers walked out at dawn.") == {"succeeded": 1}
    second = check_create_brief(title="Ferry timetable", source_material="", acting_user=brief.author)
    assert publish(second, "The winter timetable starts.", token="revoked-token") == {"dead": 1}
    dead = Operation.objects.get(key=publish_key(second.public_id, 1))
    assert dead.last_error_message

    response = client_for(operator).get(OPS)

    html = response.content.decode()
    assert response.status_code == 200
    assert dead.key in html
    assert f'href="/admin/publishing/publicationproblem/{dead.id}/change/"' in html
    assert dead.last_error_kind in html
    assert str(dead.last_error_message).replace("'", "&#x27;").replace('"', "&quot;") in html
    assert len(_points(html, "chart-throughput")) == 1  # a publish this minute, verified in its attempt
    assert len(_points(html, "chart-latency")) == 2  # the minute's mean and longest
    assert _points(html, "chart-attempts")
    summary = response.context["summary"]
    assert (summary.dead, summary.needs_operator, summary.expired_leases) == (1, 1, 0)
    assert ("Succeeded", "1") in response.context["attempt_totals"]  # the publish's, verified in it
    assert "/admin/publishing/publicationproblem/?state=open" in html


def _series_class(html: str, chart: str, series: str) -> str:
    """The CSS classes of one series (a <g>) of one chart, and of its legend swatch, which must agree."""
    match = re.search(rf'<figure class="card ops-chart" id="{chart}">(.*?)</figure>', html, re.S)
    assert match, f"no chart {chart}"
    group = re.search(rf'<g class="chart-series ([^"]+)" data-series="{re.escape(series)}">', match.group(1))
    assert group, f"no series {series} in {chart}"
    swatch = re.search(
        rf'<span class="chart-swatch ([^"]+)" aria-hidden="true"></span>{re.escape(series)}', match.group(1)
    )
    assert swatch and swatch.group(1) == group.group(1)
    return group.group(1)


@pytest.mark.django_db(transaction=True)
def test_ops__attempts_chart__each_outcome_in_the_colour_of_its_meaning(
    start_target, revise, approver, operator, editor, settings
):
    """Success green, a retry amber, a dead attempt red — never a dead letter drawn green."""
    settings.GALLEY_BACKOFF_BASE_SECONDS = 0.01
    settings.GALLEY_BACKOFF_MAX_SECONDS = 0.05
    settings.GALLEY_MAX_ATTEMPTS = 2
    start_target(Faults(rate_500=1.0))  # every try a server error: one retry, then a dead letter
    failing = check_create_brief(title="Ferry timetable", source_material="", acting_user=editor)
    approve(revise(failing, "The winter timetable starts."), by=approver)
    run_worker()
    start_target()
    succeeding = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    approve(revise(succeeding, "Dockers walked out at dawn."), by=approver)
    run_worker()

    html = client_for(operator).get(OPS).content.decode()

    assert _series_class(html, "chart-attempts", "Succeeded") == "chart-ok"
    assert _series_class(html, "chart-attempts", "Will retry") == "chart-warn"
    assert _series_class(html, "chart-attempts", "Dead") == "chart-bad"
    css = (BASE_DIR / "publishing/static/publishing/galley.css").read_text()
    for css_class, colour in [("chart-ok", "var(--ok)"), ("chart-warn", "#c27c00"), ("chart-bad", "var(--bad)")]:
        assert f".{css_class} .chart-line {{ stroke:{colour}; }}" in css
        assert f".chart-swatch.{css_class} {{ fill:{colour}; background:{colour}; }}" in css


@pytest.mark.django_db(transaction=True)
def test_ops__needs_an_operator__one_definition_for_tile_list_admin_and_metric(publish, brief, editor, operator):
    """A quality gate's dead letter is the editors' (the brief page gives them the next step); a
    refused token's needs an operator. The tile, the list, the dead letters' marks, the admin's filter
    and /metrics all count the same one — and no status label calls every dead letter an operator's."""
    greeting = check_create_brief(title="Greeting", source_material="Hi there.", acting_user=editor)
    drain(worker_id="w-gate", kinds=[SUMMARY_STEP], time_budget=60, idle_wait=0.5)
    gate = Operation.objects.get(key=step_key(greeting.public_id, 1, "quality_gate"))
    assert publish(brief, "Dockers walked out at dawn.", token="revoked-token") == {"dead": 1}
    # The editor's revision follows the pipeline's revision 1 (which holds the AI's standfirst).
    refused = Operation.objects.get(key=publish_key(brief.public_id, brief.revisions.count()))
    assert {gate.status, refused.status} == {"dead"}
    operator.is_staff = True  # as seed_demo makes operators: the admin needs it
    operator.save(update_fields=["is_staff"])
    client = client_for(operator)

    response = client.get(OPS)

    html = response.content.decode()
    summary = response.context["summary"]
    assert (summary.dead, summary.needs_operator) == (2, 1)
    assert [row.operation.key for row in response.context["needing_operator"]] == [refused.key]
    tile = re.search(r'<li class="ops-tile ops-tile-bad" id="tile-needs-operator">(.*?)</li>', html, re.S)
    assert tile and '<span class="ops-figure">1</span> needs an operator' in tile.group(1)
    dead_letters = re.search(r'<h2 id="ops-dead-heading">Dead letters</h2>(.*?)</section>', html, re.S).group(1)
    marked = re.findall(r'<li class="card"( data-needs-operator)?><a href="[^"]+"><code>([^<]+)</code>', dead_letters)
    assert sorted(marked) == sorted([("", gate.key), (" data-needs-operator", refused.key)])
    assert "left to the editors" in dead_letters
    assert "needs an operator)" not in html  # the queue table's "Dead" column claims nothing
    admin = client.get("/admin/workers/operation/", {"needs_operator": "yes"})
    assert [op.key for op in admin.context["cl"].result_list] == [refused.key]
    # Said in words: Django's boolean column drew a green tick for "needs an operator".
    assert '<td class="field-needs_an_operator">needs an operator</td>' in admin.content.decode()
    assert "icon-yes.svg" not in admin.content.decode()
    metrics = client.get("/metrics").content.decode()
    assert "\ngalley_operations_needing_operator 1.0\n" in metrics


@pytest.mark.django_db
def test_query_count__ops__constant_with_1000_briefs(operator, editor, django_assert_num_queries):
    client = client_for(operator)
    check_create_brief(title="Brief 0", source_material="Source.", acting_user=editor)
    few = len(_captured(client))
    for number in range(1, 1000):
        check_create_brief(title=f"Brief {number}", source_material="Source.", acting_user=editor)
    assert Operation.objects.count() == 1000

    with django_assert_num_queries(few):
        response = client.get(OPS)
    assert response.context["queue_rows"][0][1] == [1000]  # summary steps, all pending
    assert few <= 19  # session, user, roles, the nav's counts, and twelve statements of ours (the health one too)


@pytest.mark.django_db
def test_queue_health__transaction_held_open__warned_above_the_threshold_not_below(operator, settings):
    client = client_for(operator)
    with transaction_held_open():
        settings.GALLEY_LONG_TRANSACTION_WARN_SECONDS = 3600
        calm = client.get(OPS).content.decode()
        settings.GALLEY_LONG_TRANSACTION_WARN_SECONDS = 0
        warned = client.get(OPS).content.decode()
        live = client.get("/ops/live/", HTTP_HX_REQUEST="true").content.decode()  # what the page polls

    assert 'id="queue-health"' not in calm
    assert 'id="long-transaction-warning"' in live
    assert 'id="long-transaction-warning"' in warned
    assert "A transaction has been open for" in warned
    assert "pg_terminate_backend(pid)" in warned  # what to do, not only what is wrong
    assert 'id="dead-tuples-warning"' not in warned


@pytest.mark.django_db
def test_queue_health__dead_tuples__warned_above_the_threshold_not_at_it(operator, settings):
    make_dead_operation_tuples(60)
    dead = get_queue_health().dead_tuples  # this transaction's snapshot of the statistics, as the page reads it
    client = client_for(operator)

    settings.GALLEY_DEAD_TUPLES_WARN = dead
    calm = client.get(OPS).content.decode()
    settings.GALLEY_DEAD_TUPLES_WARN = dead - 1
    warned = client.get(OPS).content.decode()

    assert 'id="queue-health"' not in calm
    assert 'id="dead-tuples-warning"' in warned
    assert f"The operation table holds {dead} dead row versions" in warned
    assert "VACUUM (ANALYZE) workers_operation" in warned
    assert 'id="long-transaction-warning"' not in warned


def _captured(client: Client) -> CaptureQueriesContext:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(OPS).status_code == 200
    return captured


@pytest.mark.acceptance
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("name", "width", "height"), [("ops-desktop", 1280, 900), ("ops-phone", 390, 844)])
def test_browser__ops_page__shows_dead_letter_and_charts_at_desktop_and_phone_width(
    browser, live_server, publish, brief, make_user, name, width, height
):
    publish(brief, "Dockers walked out at dawn.")
    second = check_create_brief(title="Ferry timetable", source_material="", acting_user=brief.author)
    publish(second, "The winter timetable starts.", token="revoked-token")
    dead = Operation.objects.get(key=publish_key(second.public_id, 1))
    make_user("otto", Role.OPERATOR, password=PASSWORD)
    page = sign_in(browser, live_server, "otto")
    page.set_viewport_size({"width": width, "height": height})

    page.get_by_role("link", name="Ops").click()

    expect(page.get_by_role("heading", name="Operations")).to_be_visible()
    expect(page.locator("#ops-status")).to_contain_text("dead letters")
    # A refused token needs an operator: listed there (and among the dead letters, marked so).
    expect(page.locator("#ops-needing").get_by_role("link", name=dead.key)).to_be_visible()
    expect(page.locator("#ops-needing").get_by_text(dead.last_error_message)).to_be_visible()
    expect(page.locator("svg.chart")).to_have_count(3)
    expect(page.locator("#chart-throughput circle.chart-point")).to_have_count(1)  # the publish, verified inline
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0
    screenshot(page, name)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operation_kind", [DRIFT_CHECK, REPUBLISH])
def test_ops__dead_drift_check_or_republish__settled_on_its_publication_problem_page(
    operation_kind, publish, brief, operator
):
    """A drift check and a republish are a brief's publication as much as its publish and verify:
    /ops/ sends the operator to the page that settles them (their drift, beside the approved
    revision), not to the machinery's bare operation page."""
    assert publish(brief, "Dockers walked out at dawn.") == {"succeeded": 1}
    revision = brief.revisions.get(number=1)
    key = (
        drift_check_key(brief.public_id, 1, "2026-12-01T00:00:00")
        if operation_kind == DRIFT_CHECK
        else republish_key(brief.public_id, 1, 1)
    )
    operation = enqueue_operation(
        key=key,
        kind=operation_kind,
        payload_hash=revision.payload_hash,
        subject_type="brief",
        subject_id=brief.public_id,
        subject_version=1,
        arguments={"revision": 1},
    ).operation
    Operation.objects.filter(id=operation.id).update(
        status="dead", last_error_message="the site shows other text", finished_at=Now()
    )

    html = client_for(operator).get(OPS).content.decode()

    assert f'href="/admin/publishing/publicationproblem/{operation.id}/change/"' in html
    assert f'href="/admin/workers/operation/{operation.id}/change/"' not in html


@pytest.mark.django_db
def test_ops__problem_lists__name_the_brief_by_its_current_headline(brief, revise, operator):
    revise(brief, "Dockers walked out at dawn.", title="Dockers stop the port")
    operation = enqueue_operation(
        key=f"drift-check:{brief.public_id}:revision-1:2026-12-01T00:00:00",
        kind=DRIFT_CHECK,
        payload_hash=brief.revisions.get().payload_hash,
        subject_type="brief",
        subject_id=brief.public_id,
        subject_version=1,
    ).operation
    Operation.objects.filter(id=operation.id).update(status="dead", finished_at=Now())

    html = client_for(operator).get(OPS).content.decode()

    dead_letters = re.search(r'<h2 id="ops-dead-heading">Dead letters</h2>(.*?)</section>', html, re.S).group(1)
    assert f'<span class="ops-brief">{brief.public_id} “Dockers stop the port”</span>' in dead_letters


@pytest.mark.django_db(transaction=True)
def test_i15_ops__overdue_schedule__listed_with_t_overdue_by_and_why_and_upcoming_counted(
    brief, revise, schedule, editor, operator, settings
):
    """/ops lists the schedule the overdue rule finds (publishing.selectors.overdue), with its brief, revision,
    channel, T, how late it is and why it waits (its channel's 429 pause, until when); a schedule still
    ahead is counted per channel, not listed."""
    settings.GALLEY_SCHEDULE_LATENESS_SECONDS = 60
    overdue = schedule(revise(brief, "Dockers walked out at dawn."), ago=150)
    pause_channel("web", seconds=180, reason="the target answered 429 Too Many Requests")
    later = check_create_brief(title="Ferry timetable", source_material="Source.", acting_user=editor)
    schedule(revise(later, "Ferries run again on Monday."), ago=-3600 + 60)

    html = client_for(operator).get(OPS).content.decode()
    section = re.search(r'<section aria-labelledby="ops-schedules-heading".*?</section>', html, re.S).group(0)
    assert "1 overdue" in section
    assert overdue.key in section and f"{brief.public_id}</a> “Harbour strike”, revision 1 on web" in section
    assert re.search(r"overdue by 2 min \d+ s", section)
    assert re.search(r"web waiting: the target answered 429 Too Many Requests until \d\d:\d\d:\d\d UTC", section)
    assert re.search(r'<tr data-channel="web"><th scope="row">web</th><td>1</td><td>1</td>', section)
