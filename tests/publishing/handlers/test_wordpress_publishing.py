"""Exactly-once publishing end to end against a real WordPress with Galley's plugin (docs/wordpress.md):
approval → publish operation → WordPress (through a fault-injecting proxy, tests/fault_proxy.py) →
publication → read-back verification. Test names say which invariant of docs/invariants.md they guard.

"Applied exactly once" is a fact about WordPress, so every test counts WordPress's own rows: the
posts that carry the brief (wp_posts + wp_postmeta) and the plugin's publication rows.

WordPress runs once per session and keeps its state, while Galley's brief ids are only unique within
one database (another test database, or a database reset, numbers from `brief-001` again), so each
test starts by removing what earlier tests left in WordPress for Galley-style brief ids
(`_forget_galley_briefs`). Permalinks carry WordPress's own
address, so the verification's page fetch goes to WordPress directly, past the proxy.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.test import Client
from playwright.sync_api import expect

from approvals.models import Notification
from publishing.actions.briefs import check_create_brief
from publishing.actions.retractions import check_retract_brief
from publishing.clients import target as target_client
from publishing.clients.target import TargetStaleRevision, WordPressClient
from publishing.hashing import payload_hash
from publishing.identities import (
    DRIFT_CHECK,
    PUBLISH,
    REPUBLISH,
    RETRACT,
    VERIFY,
    publish_key,
    republish_key,
    retract_key,
)
from publishing.models import Brief, Publication, Revision
from publishing.roles import Role
from publishing.story import render_story
from publishing.tasks import check_drift
from tests.browser import PASSWORD, sign_in
from tests.fault_proxy import DROP_AFTER_FORWARD, HANG_AFTER_FORWARD, UNAVAILABLE, FaultProxy
from tests.late_pages import pages_not_there_yet
from tests.publishing.handlers.test_publications import (
    approve,
    assert_published,
    attempts_of,
    expire_lease,
    fresh,
    make_due,
    publish_op,
    run_worker,
    verify_op,
)
from tests.publishing.test_story_pipeline import STORY, write
from tests.wordpress import WordPress
from workers.actions.claims import claim_operations
from workers.actions.operator import do_retry_operation_now
from workers.attempts import run_operation
from workers.drain import drain
from workers.models import AuditEvent, Conflict, Operation
from workers.service import run_startup_checks

pytestmark = [pytest.mark.wordpress, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

# Generous where the timeout is not the point (a loaded CPU must not turn a publish into a timeout);
# the lease outlasts 2.5 x the timeout, as settings validation demands at startup.
TIMEOUT_SECONDS = 10.0
LEASE_SECONDS = 30
# Where the timeout is the point: the proxy holds the answer until released, far past this.
SHORT_TIMEOUT_SECONDS = 3.0
SHORT_LEASE_SECONDS = 10

GALLEY_BRIEF_IDS = "'^brief-[0-9]+$'"  # brief_public_id(): brief-001, brief-042, brief-1234


# --- fixtures and helpers ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _drift_checks_back_to_back(settings):
    """A published revision may be checked for drift again at once; the test of the interval sets its own."""
    settings.GALLEY_DRIFT_CHECK_INTERVAL_MINUTES = 0


@pytest.fixture(autouse=True)
def _forget_galley_briefs(wordpress: WordPress) -> None:
    forget_galley_briefs(wordpress)


def forget_galley_briefs(wordpress: WordPress) -> None:
    """Remove from WordPress every post, publication and brief row of a Galley-style brief id, so that
    this test's brief-001 is new to WordPress too. Only the site's own database is touched."""
    if not wordpress.sql("SHOW TABLES LIKE 'wp\\_galley\\_publications'"):
        return  # the plugin creates its tables on first use
    posts = wordpress.column(
        "SELECT DISTINCT post_id FROM wp_postmeta"
        f" WHERE meta_key = 'galley_brief_id' AND meta_value REGEXP {GALLEY_BRIEF_IDS}"
    )
    if posts:
        ids = ", ".join(str(int(post)) for post in posts)
        family = f"SELECT ID FROM wp_posts WHERE ID IN ({ids}) OR post_parent IN ({ids})"  # with WP's revisions
        everything = ", ".join(wordpress.column(family))
        wordpress.sql(
            f"DELETE FROM wp_postmeta WHERE post_id IN ({everything});"
            f" DELETE FROM wp_term_relationships WHERE object_id IN ({everything});"
            f" DELETE FROM wp_posts WHERE ID IN ({everything});"
        )
    wordpress.sql(
        f"DELETE FROM wp_galley_publications WHERE brief_id REGEXP {GALLEY_BRIEF_IDS};"
        f" DELETE FROM wp_galley_briefs WHERE brief_id REGEXP {GALLEY_BRIEF_IDS};"
    )
    if wordpress.sql("SHOW TABLES LIKE 'wp\\_galley\\_retractions'"):  # the plugin's schema version 2
        wordpress.sql(f"DELETE FROM wp_galley_retractions WHERE brief_id REGEXP {GALLEY_BRIEF_IDS}")


@pytest.fixture
def proxy(wordpress: WordPress) -> Iterator[FaultProxy]:
    with FaultProxy(wordpress.url) as proxy:
        yield proxy


def use_wordpress(settings, wordpress: WordPress, url: str, *, timeout: float = TIMEOUT_SECONDS) -> None:
    """Galley's settings for WordPress at `url` (the proxy, or WordPress itself)."""
    settings.GALLEY_TARGET_KIND = "wordpress"
    settings.GALLEY_WORDPRESS_URL = url
    settings.GALLEY_WORDPRESS_USER = wordpress.user
    settings.GALLEY_WORDPRESS_APP_PASSWORD = wordpress.app_password
    settings.GALLEY_TARGET_TIMEOUT_SECONDS = timeout
    settings.GALLEY_LEASE_SECONDS = LEASE_SECONDS if timeout == TIMEOUT_SECONDS else SHORT_LEASE_SECONDS
    assert settings.GALLEY_LEASE_SECONDS > 2.5 * settings.GALLEY_TARGET_TIMEOUT_SECONDS


@pytest.fixture
def direct(settings, wordpress: WordPress) -> WordPress:
    """Galley publishes to WordPress itself."""
    use_wordpress(settings, wordpress, wordpress.url)
    return wordpress


@pytest.fixture
def proxied(settings, wordpress: WordPress, proxy: FaultProxy) -> FaultProxy:
    """Galley publishes to WordPress through the fault proxy (passing everything until told otherwise)."""
    use_wordpress(settings, wordpress, proxy.url)
    return proxy


def wordpress_client(wordpress: WordPress, *, url: str | None = None) -> WordPressClient:
    return WordPressClient(
        site_url=url or wordpress.url, user=wordpress.user, app_password=wordpress.app_password, timeout=60
    )


def galley_posts(wordpress: WordPress, brief_id: str) -> list[str]:
    """IDs of the posts (any status, no WordPress revisions) that carry this brief, from WordPress's tables."""
    return wordpress.column(
        "SELECT p.ID FROM wp_posts p JOIN wp_postmeta m ON m.post_id = p.ID AND m.meta_key = 'galley_brief_id'"
        f" WHERE p.post_type = 'post' AND m.meta_value = {wordpress.quote(brief_id)} ORDER BY p.ID"
    )


def publication_rows(wordpress: WordPress, brief_id: str) -> list[tuple[str, int, str]]:
    """The plugin's publication rows of a brief as (operation key, revision, payload hash), in order."""
    rows = wordpress.sql(
        "SELECT operation_key, revision, payload_hash FROM wp_galley_publications"
        f" WHERE brief_id = {wordpress.quote(brief_id)} ORDER BY id"
    )
    return [(key, int(revision), digest) for key, revision, digest in rows]


def application_of(revision: Revision) -> tuple[str, int, str]:
    return (publish_key(revision.brief.public_id, revision.number), revision.number, revision.payload_hash)


def post_of(wordpress: WordPress, brief_id: str) -> dict[str, Any]:
    """The brief's one post as WordPress's core REST API shows it to an editor (raw title, content, meta)."""
    (post_id,) = galley_posts(wordpress, brief_id)
    response = httpx.get(
        wordpress.rest(f"wp/v2/posts/{post_id}"), params={"context": "edit"}, auth=wordpress.auth, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()


def assert_post_shows(wordpress: WordPress, revision: Revision) -> None:
    post = post_of(wordpress, revision.brief.public_id)
    rendered = render_story(revision.payload)
    assert (post["title"]["raw"], post["content"]["raw"], post["excerpt"]["raw"], post["status"]) == (
        rendered["title"],
        rendered["content_html"],
        revision.payload.get("standfirst", ""),
        "publish",
    )
    assert (post["meta"]["galley_revision"], post["meta"]["galley_payload_hash"]) == (
        revision.number,
        revision.payload_hash,
    )


def run_in_threads(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at once (released together by a barrier), each on its own thread with its own
    database connection (closed after); their results in order, or the first exception raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = call()
        except BaseException as exc:  # re-raised on the test's thread below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(index, call)) for index, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a racing thread did not finish"
    if errors:
        raise errors[0]
    return results


# --- docs/invariants.md#i10: done means observed -----------------------------------------------------


def test_done_means_observed__approve_publish_verify__one_post_published(direct, brief, revise, approver):
    title = "Harbour strike: day one"
    body = "<p>Dockers walked out at dawn.</p>\n\n<p>Cranes stood still &amp; the gates stayed shut.</p>"
    revision = revise(brief, body, title=title)
    approve(revision, by=approver)

    assert run_worker() == {"succeeded": 1}

    # WordPress answered at once: the publish's own attempt read the post back and saw its page.
    publish = publish_op(revision)
    assert (publish.status, publish.result["first_application"]) == ("succeeded", True)
    assert (publish.result["verified_inline"], publish.result["live_hash"]) == (True, revision.payload_hash)
    assert not Operation.objects.filter(kind=VERIFY).exists()
    assert_published(brief, revision)
    publication = Publication.objects.get()
    assert publication.permalink.startswith(direct.url + "/")
    assert publication.permalink == publish.result["permalink"]
    # WordPress holds exactly one post, with exactly the approved text, and one publication row.
    assert len(galley_posts(direct, brief.public_id)) == 1
    assert_post_shows(direct, revision)
    assert publication_rows(direct, brief.public_id) == [application_of(revision)]
    with wordpress_client(direct) as client:
        read_back = client.read_back(publication.external_id)
    assert (read_back.operation_key, read_back.payload_hash) == (publish.key, revision.payload_hash)
    assert read_back.permalink == publication.permalink
    assert [(a.outcome, a.ambiguous) for a in attempts_of(publish)] == [("succeeded", False)]


def test_invariant_5__wordpress_page_not_there_yet__publication_with_its_verify_operation_then_verified(
    direct, brief, revise, approver, monkeypatch
):
    """A cache in front of the site does not have the page yet: the publish's attempt records the
    publication with its verify operation, never verified and never without it; the verify operation
    then sees the page."""
    revision = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(revision, by=approver)
    with pages_not_there_yet(monkeypatch):
        assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}

    assert publish_op(revision).result["verified_inline"] is False
    assert Publication.objects.get().verified_at is None
    assert verify_op(revision).status == "pending"
    assert fresh(brief).published_revision_number is None
    assert run_worker(kinds=(VERIFY,)) == {"succeeded": 1}
    assert_published(brief, revision)
    assert len(galley_posts(direct, brief.public_id)) == 1


# --- docs/invariants.md#i1: operation identity (and the ambiguous kinds of #i9) ----------------------


def test_operation_identity__replay_after_lost_answer__adopted_by_lookup_one_post(
    proxied, wordpress, brief, revise, approver, settings
):
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 60  # it waits to retry
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    proxied.inject(DROP_AFTER_FORWARD, times=1)

    assert run_worker() == {"retry": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.last_error_kind) == ("retry_wait", "connection")
    (lost,) = proxied.publishes()
    assert (lost.fault, lost.forwarded, lost.upstream_status) == (DROP_AFTER_FORWARD, True, 201)  # it applied
    assert publication_rows(wordpress, brief.public_id) == [application_of(revision)]
    assert not Publication.objects.exists()  # Galley cannot know yet

    make_due(operation)
    assert run_worker() == {"succeeded": 1}

    operation.refresh_from_db()
    first, second = attempts_of(operation)
    assert (first.outcome, first.error_kind, first.http_status, first.ambiguous) == ("retry", "connection", None, False)
    assert (second.outcome, second.ambiguous) == ("succeeded", True)
    assert first.id != second.id
    assert operation.result["first_application"] is False
    # Adopted by the look-up by key: the lost POST is the only one WordPress ever received.
    assert proxied.publishes() == [lost]
    assert [operation.key] in [parse_qs(urlsplit(e.path).query).get("operation_key") for e in proxied.exchanges]
    assert len(galley_posts(wordpress, brief.public_id)) == 1
    assert publication_rows(wordpress, brief.public_id) == [application_of(revision)]
    assert_published(brief, revision)
    assert_post_shows(wordpress, revision)


def test_operation_identity__hang_past_client_timeout__one_post(proxied, wordpress, brief, revise, approver, settings):
    settings.GALLEY_BACKOFF_BASE_SECONDS = settings.GALLEY_BACKOFF_MAX_SECONDS = 60
    use_wordpress(settings, wordpress, proxied.url, timeout=SHORT_TIMEOUT_SECONDS)
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    proxied.inject(HANG_AFTER_FORWARD, times=1)  # held until released: longer than any timeout here

    assert run_worker() == {"retry": 1}

    operation = publish_op(revision)
    assert (operation.status, operation.last_error_kind) == ("retry_wait", "timeout")
    # The held POST reached WordPress (on a loaded machine WordPress may finish after the client gave up).
    (held,) = proxied.wait_for(lambda seen: any(e.fault == HANG_AFTER_FORWARD for e in seen))
    assert (held.forwarded, held.upstream_status) == (True, 201)
    proxied.release()
    assert publication_rows(wordpress, brief.public_id) == [application_of(revision)]

    use_wordpress(settings, wordpress, proxied.url)
    make_due(operation)
    assert run_worker() == {"succeeded": 1}

    operation.refresh_from_db()
    first, second = attempts_of(operation)
    assert (first.outcome, first.error_kind, first.http_status) == ("retry", "timeout", None)
    assert (second.outcome, second.ambiguous) == ("succeeded", True)
    assert operation.result["first_application"] is False
    assert [exchange.fault for exchange in proxied.publishes()] == [HANG_AFTER_FORWARD]  # never sent again
    assert len(galley_posts(wordpress, brief.public_id)) == 1
    assert publication_rows(wordpress, brief.public_id) == [application_of(revision)]
    assert_published(brief, revision)
    assert_post_shows(wordpress, revision)


def test_operation_identity__two_workers_race_same_key__one_post(proxied, wordpress, brief, revise, approver, editor):
    other = check_create_brief(title="Ferry strike", source_material="Ferries stayed in port.", acting_user=editor)
    first = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    second = revise(other, "Ferries stayed in port.", title="Ferry strike")
    approve(second, by=approver)  # approved first, so claimed first
    approve(first, by=approver)
    # A worker claims the second brief's publish and is cut off before sending; its lease runs out
    # (mid-way), so a racing worker takes it over.
    (partitioned,) = claim_operations(worker_id="w-partitioned", limit=1, kinds=[PUBLISH])
    assert partitioned.key == publish_op(second).key
    expire_lease(publish_op(second))
    duplicate = {
        "operation_key": publish_op(first).key,
        "brief_id": brief.public_id,
        "revision": first.number,
        "payload_hash": first.payload_hash,
        "payload": first.payload,
        "rendered": render_story(first.payload),
    }

    def send_duplicate() -> tuple[Any, bool]:
        with wordpress_client(wordpress, url=proxied.url) as client:
            return client.publish(**duplicate)

    def drain_as(worker_id: str) -> Counter[str]:
        return drain(worker_id=worker_id, kinds=[PUBLISH, VERIFY], time_budget=60, idle_wait=2.0)

    outcomes_a, outcomes_b, (receipt_a, created_a), (receipt_b, created_b) = run_in_threads(
        lambda: drain_as("w-race-a"), lambda: drain_as("w-race-b"), send_duplicate, send_duplicate
    )

    # The partitioned worker wakes: its lease is gone, it sends and writes nothing.
    posts_before = len(proxied.publishes())
    assert run_operation(partitioned) == "lease_lost"
    assert len(proxied.publishes()) == posts_before

    # Two publishes, each verified in its own attempt; a "busy, retry after 1 s" from WordPress under the
    # race is the target asking to wait, which the drains (idle_wait 2 s) wait out.
    outcomes = outcomes_a + outcomes_b
    assert outcomes["succeeded"] == 2 and set(outcomes) <= {"succeeded", "retry"}, outcomes
    publish_first, publish_second = publish_op(first), publish_op(second)
    assert (publish_first.status, publish_second.status) == ("succeeded", "succeeded")
    assert publish_second.lease_owner == "" and publish_second.fencing_token == partitioned.fencing_token + 1
    taken_over = attempts_of(publish_second)[-1]  # the take-over looked the key up before sending
    assert (taken_over.outcome, taken_over.ambiguous, taken_over.worker_id != "w-partitioned") == (
        "succeeded",
        True,
        True,
    )
    # Exactly one first application of the raced key, whoever won; every receipt is the same one.
    assert [created_a, created_b, publish_first.result["first_application"]].count(True) == 1
    assert receipt_a == receipt_b
    assert receipt_a.id == Publication.objects.get(revision=first).external_id
    for revision in (first, second):
        assert len(galley_posts(wordpress, revision.brief.public_id)) == 1
        assert publication_rows(wordpress, revision.brief.public_id) == [application_of(revision)]
        assert Publication.objects.filter(operation_key=publish_key(revision.brief.public_id, 1)).count() == 1
        assert_published(revision.brief, revision)
        assert_post_shows(wordpress, revision)
    assert galley_posts(wordpress, brief.public_id) != galley_posts(wordpress, other.public_id)


# --- docs/invariants.md#i4: no regression (the plugin's revision fence) ----------------------------------


def test_no_regression__older_revision_after_newer__refused_by_plugin(direct, brief, revise, approver):
    first = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(first, by=approver)
    second = revise(brief, "Dockers walked out at dawn. The port is closed.", title="Harbour closed")
    approve(second, by=approver)
    # Galley orders them: the older intent ends before it is sent.
    assert (publish_op(first).status, publish_op(first).attempts) == ("superseded", 0)

    run_worker()
    assert_published(brief, second)
    assert_post_shows(direct, second)

    # A late send of revision 1 (a request delayed in the network past its lease) meets the fence.
    with wordpress_client(direct) as client, pytest.raises(TargetStaleRevision) as refused:
        client.publish(
            operation_key=publish_key(brief.public_id, 1),
            brief_id=brief.public_id,
            revision=1,
            payload_hash=first.payload_hash,
            payload=first.payload,
        )

    assert (refused.value.current_revision, refused.value.status) == (2, 409)
    assert len(galley_posts(direct, brief.public_id)) == 1
    assert publication_rows(direct, brief.public_id) == [application_of(second)]
    assert_post_shows(direct, second)
    assert_published(brief, second)


def test_no_regression__older_dead_letter_closed_when_newer_published_at_wordpress__cannot_be_revived(
    proxied, wordpress, brief, revise, approver, operator, settings
):
    first = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    settings.GALLEY_WORDPRESS_APP_PASSWORD = "wrong pass word xxxx"
    approve(first, by=approver)
    assert run_worker() == {"dead": 1}  # WordPress refused the credentials: finished, so it orders nothing
    assert publish_op(first).last_error_kind == "auth"
    settings.GALLEY_WORDPRESS_APP_PASSWORD = wordpress.app_password
    second = revise(brief, "Dockers walked out at dawn. The port is closed.", title="Harbour closed")
    approve(second, by=approver)
    assert run_worker() == {"succeeded": 1}
    assert_published(brief, second)

    # Publishing revision 2 ended the old dead letter: an operator can no longer revive it.
    old = publish_op(first)
    assert (old.status, old.last_error_message) == ("cancelled", "revision 2 was published instead")
    with transaction.atomic(durable=True):
        assert not do_retry_operation_now(old, acting_user=operator)
    assert run_worker() == {}
    assert not Publication.objects.filter(revision=first).exists()
    # Revision 1 went out once (refused, 401) and never again.
    first_key = publish_op(first).key.encode()
    assert [(e.upstream_status, first_key in e.body) for e in proxied.publishes()] == [(401, True), (201, False)]
    assert len(galley_posts(wordpress, brief.public_id)) == 1
    assert publication_rows(wordpress, brief.public_id) == [application_of(second)]
    assert_post_shows(wordpress, second)
    assert_published(brief, second)


def test_no_regression__wordpress_holds_newer_revision_of_another_writer__stale_409_conflict_for_an_operator(
    direct, brief, revise, approver
):
    """WordPress already holds revision 2 that Galley knows nothing of: only the plugin's fence can
    refuse revision 1, and since Galley cannot account for what WordPress holds, an operator decides."""
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    elsewhere = f"elsewhere:{brief.public_id}:revision-2"
    theirs = {"title": "Harbour reopened", "body": "Written by someone else."}
    with wordpress_client(direct) as client:
        client.publish(
            operation_key=elsewhere,
            brief_id=brief.public_id,
            revision=2,
            payload_hash=payload_hash(theirs),
            payload=theirs,
        )

    assert run_worker() == {"conflict": 1}

    old = publish_op(first)
    assert (old.status, old.needs_operator) == ("conflict", True)
    assert old.last_error_message == "the target already holds revision 2 of this brief"
    assert (attempts_of(old)[-1].outcome, attempts_of(old)[-1].http_status) == ("conflict", 409)
    assert Conflict.objects.get(operation=old).target_state == {"revision": 2}
    assert not Publication.objects.exists()
    assert publication_rows(direct, brief.public_id) == [(elsewhere, 2, payload_hash(theirs))]
    assert post_of(direct, brief.public_id)["title"]["raw"] == "Harbour reopened"
    assert fresh(brief).published_revision_number is None


def test_key_conflict_is_loud__wordpress_holds_the_key_with_other_content__operator_resolves_it_in_the_browser(
    direct, brief, revise, approver, make_user, browser, live_server
):
    """An earlier Galley install (its database since reset) published brief-001 revision 1 with other
    content: WordPress's plugin holds the key with another hash. The operator sees both sides in the
    admin, cancels with a reason; a newer revision then publishes to the same post."""
    operator = make_user("otto", Role.OPERATOR, password=PASSWORD)
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    key = publish_key(brief.public_id, 1)
    theirs = {"title": "Harbour strike (old system)", "body": "Written before the reset."}
    with wordpress_client(direct) as client:
        client.publish(
            operation_key=key, brief_id=brief.public_id, revision=1, payload_hash=payload_hash(theirs), payload=theirs
        )
    first = revise(brief, "Dockers walked out at dawn.")
    approve(first, by=approver)
    assert run_worker() == {"conflict": 1}
    operation = publish_op(first)

    page = sign_in(browser, live_server, "otto")
    page.goto(f"{live_server.url}/admin/publishing/publicationproblem/?state=open")
    page.get_by_role("link", name=key).click()
    expect(
        page.get_by_role("heading", name="Key conflict: the target holds this key with another payload")
    ).to_be_visible()
    hashes = page.locator("#side-by-side tbody tr").nth(1).locator("td")
    expect(hashes.nth(0)).to_have_text(first.payload_hash)
    expect(hashes.nth(1)).to_have_text(payload_hash(theirs))
    expect(page.get_by_role("link", name="permalink")).to_have_attribute(
        "href", post_of(direct, brief.public_id)["link"]
    )
    page.get_by_label("Reason").fill("WordPress keeps the old system's article; revision 2 replaces it")
    page.get_by_role("button", name="Cancel with this reason").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Cancelled {key}; the brief shows why.")
    expect(page.locator("#problem-status")).to_have_text("Cancelled")
    conflict = Conflict.objects.get(operation=operation)
    assert (conflict.resolved_by, conflict.kind) == (operator, "key_conflict")
    assert publish_op(first).status == "cancelled"

    second = revise(brief, "Dockers walked out at dawn. The port is closed.")
    approve(second, by=approver)
    assert run_worker() == {"succeeded": 1}
    assert_published(brief, second)
    assert len(galley_posts(direct, brief.public_id)) == 1
    assert publication_rows(direct, brief.public_id) == [(key, 1, payload_hash(theirs)), application_of(second)]
    assert_post_shows(direct, second)


# --- docs/invariants.md#i9: retry by failure kind ---------------------------------------------------------


def test_retry_by_failure_kind__wordpress_unavailable_503__waits_then_publishes(
    proxied, wordpress, brief, revise, approver, settings
):
    settings.GALLEY_MAX_ATTEMPTS = 2  # fewer than the waits: waiting must not spend the budget
    revision = revise(brief, "Dockers walked out at dawn.")
    approve(revision, by=approver)
    proxied.inject(UNAVAILABLE, times=3)

    assert run_worker() == {"retry": 3, "succeeded": 1}  # Retry-After: 0, so the same drain retries

    operation = publish_op(revision)
    assert (operation.status, operation.needs_operator) == ("succeeded", False)
    assert (operation.attempts, operation.waits, operation.max_attempts) == (4, 3, 2)
    assert [(a.outcome, a.error_kind, a.http_status, a.ambiguous) for a in attempts_of(operation)] == [
        ("retry", "throttled", 503, False),
        ("retry", "throttled", 503, False),
        ("retry", "throttled", 503, False),
        ("succeeded", "", None, False),
    ]
    assert operation.result["first_application"] is True
    assert [(e.fault, e.forwarded) for e in proxied.publishes()] == [(UNAVAILABLE, False)] * 3 + [("pass", True)]
    assert len(galley_posts(wordpress, brief.public_id)) == 1
    assert publication_rows(wordpress, brief.public_id) == [application_of(revision)]
    assert_published(brief, revision)


# --- manage.py check_target against WordPress --------------------------------------------------------------


def test_fence_warning__worker_startup_check_against_wordpress__confirmed_no_warning(direct, caplog, monkeypatch):
    # The plugin answers GET /wp-json/galley/v1/status with "fence": true: a worker starting against it
    # has nothing to warn about (issue 18, item 9).
    monkeypatch.setattr(target_client, "_fence_warned", False)

    outcome = run_startup_checks()["publishing target"]

    assert outcome.startswith(f"ok: WordPress at {direct.url}: plugin galley-publishing 4, revision fence on")
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_check_target__wordpress__plugin_and_credentials(direct, settings):
    out = StringIO()
    call_command("check_target", stdout=out)
    assert out.getvalue() == (
        f"target ok: WordPress at {direct.url}: plugin galley-publishing 4, revision fence on, "
        f"signed in as {direct.user!r}\n"
    )

    settings.GALLEY_WORDPRESS_APP_PASSWORD = "abcd efgh ijkl mnop qrst uvwx"
    with pytest.raises(CommandError) as wrong:
        call_command("check_target")
    assert str(wrong.value).startswith(
        "The publishing target is not ready: The target refused our credentials; "
        "check GALLEY_WORDPRESS_USER / GALLEY_WORDPRESS_APP_PASSWORD"
    )


def test_done_means_observed__older_verify_reads_newer_title_at_shared_permalink__superseded_no_operator(
    direct, brief, revise, approver, monkeypatch
):
    """One post per brief: once revision 2 (another title) is published, revision 1's permalink shows
    revision 2. Revision 1's verification is then over (superseded), not a dead letter for an operator."""
    first = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(first, by=approver)
    with pages_not_there_yet(monkeypatch):  # so each revision's verify operation reads the page
        assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}  # revision 1 is at WordPress, not verified yet
        second = revise(brief, "Dockers walked out at dawn. The port is closed.", title="Harbour closed")
        approve(second, by=approver)
        assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    assert run_worker(kinds=(VERIFY,)) == {"succeeded": 1, "superseded": 1}

    old = verify_op(first)
    assert (old.status, old.needs_operator, old.attempts) == ("superseded", False, 1)
    assert old.last_error_message == (
        f"the target shows revision 2 of {brief.public_id}, published since; that revision is verified on its own"
    )
    assert verify_op(second).status == "succeeded"
    assert_published(brief, second)
    assert_post_shows(direct, second)
    assert not Notification.objects.filter(event=Notification.Event.PUBLISH_FAILED).exists()


# --- drift: the site no longer shows the approved revision ----------------------------------------------


def edit_post_as_admin(wordpress: WordPress, brief_id: str, **fields: str) -> None:
    """Change the brief's post as an editor in wp-admin would: WordPress's core REST API, as the administrator."""
    (post_id,) = galley_posts(wordpress, brief_id)
    response = httpx.post(wordpress.rest(f"wp/v2/posts/{post_id}"), json=fields, auth=wordpress.auth, timeout=60)
    assert response.status_code == 200, response.text


def test_done_means_observed__post_edited_in_wp_admin_title_kept__verification_finds_drift_conflict(
    direct, brief, revise, approver, monkeypatch
):
    revision = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(revision, by=approver)
    with pages_not_there_yet(monkeypatch):  # not verified in the publish's attempt: edited before its read-back
        assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    edit_post_as_admin(direct, brief.public_id, content="Dockers walked out at noon.")  # the title stays

    assert run_worker(kinds=(VERIFY,)) == {"conflict": 1}

    verify = verify_op(revision)
    assert (verify.status, verify.needs_operator) == ("conflict", True)
    conflict = Conflict.objects.get(operation=verify)
    edited = payload_hash({"title": "Harbour strike", "body": "Dockers walked out at noon."})
    assert (conflict.kind, conflict.existing_payload_hash, conflict.conflicting_payload_hash) == (
        "drift",
        revision.payload_hash,
        edited,
    )
    assert conflict.target_state["payload_hash"] == revision.payload_hash  # what Galley sent, as the plugin keeps it
    assert (conflict.target_state["live"]["body"], conflict.target_state["live"]["title"]) == (
        "Dockers walked out at noon.",
        "Harbour strike",
    )
    assert Publication.objects.get(revision=revision).verified_at is None
    assert fresh(brief).published_revision_number is None


def published_and_edited(wordpress: WordPress, brief, revise, approver, **edit: str) -> Revision:
    """Revision 1 published and verified at WordPress, then its post edited in wp-admin."""
    revision = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(revision, by=approver)
    assert run_worker() == {"succeeded": 1}
    assert_published(brief, revision)
    edit_post_as_admin(wordpress, brief.public_id, **edit)
    return revision


def drift_checks(brief) -> list[Operation]:
    return list(Operation.objects.filter(kind=DRIFT_CHECK, subject_id=brief.public_id).order_by("id"))


def find_drift(wordpress: WordPress, brief, revise, approver, **edit: str) -> tuple[Revision, Operation]:
    """The periodic check's round finds the edit: a drift conflict for an operator."""
    revision = published_and_edited(wordpress, brief, revise, approver, **edit)
    assert check_drift() == 1
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"conflict": 1}
    (check,) = drift_checks(brief)
    return revision, check


def resolve(operator, operation: Operation, action: str, **fields: str) -> str:
    """The operator's POST from the publication problem's admin page; the message shown after it."""
    client = Client()
    client.force_login(operator)
    response = client.post(
        f"/admin/publishing/publicationproblem/{operation.id}/resolve/", {"action": action, **fields}, follow=True
    )
    assert response.status_code == 200
    return " ".join(str(message) for message in response.context["messages"])


@pytest.fixture
def staff_operator(operator):
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    return operator


def test_drift__periodic_check__post_edited_title_kept__conflict_beside_the_approved_revision(
    direct, brief, revise, approver, staff_operator, settings
):
    revision = published_and_edited(direct, brief, revise, approver, content="Dockers walked out at noon.")
    untouched = check_create_brief(
        title="Ferry strike", source_material="Ferries stayed in port.", acting_user=brief.author
    )
    other = revise(untouched, "Ferries stayed in port.", title="Ferry strike")
    approve(other, by=approver)
    assert run_worker() == {"succeeded": 1}
    settings.GALLEY_DRIFT_CHECKS_PER_RUN = 1  # the rate bound: one publication per round

    assert check_drift() == 1
    assert check_drift() == 1  # the next round takes the one not checked yet
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"conflict": 1, "succeeded": 1}

    (check,) = drift_checks(brief)
    assert (check.status, check.needs_operator, check.arguments) == (
        "conflict",
        True,
        {"revision": 1, "accepted_hash": ""},
    )
    assert drift_checks(untouched)[0].status == "succeeded"
    conflict = Conflict.objects.get(operation=check)
    assert (conflict.kind, conflict.existing_payload_hash) == ("drift", revision.payload_hash)
    assert conflict.conflicting_payload_hash == payload_hash(
        {"title": "Harbour strike", "body": "Dockers walked out at noon."}
    )
    assert Notification.objects.filter(event=Notification.Event.PUBLISH_FAILED, recipient=staff_operator).exists()
    settings.GALLEY_DRIFT_CHECKS_PER_RUN = 100
    settings.GALLEY_DRIFT_CHECK_INTERVAL_MINUTES = 60
    assert check_drift() == 0  # the other brief was checked within the hour
    settings.GALLEY_DRIFT_CHECK_INTERVAL_MINUTES = 0
    assert check_drift() == 1  # the open drift is not checked again: only the other brief
    # The operator sees the drift beside the approved revision.
    client = Client()
    client.force_login(staff_operator)
    page = client.get(f"/admin/publishing/publicationproblem/{check.id}/change/").content.decode()
    assert "Drift: the site no longer shows the approved revision" in page
    assert "Dockers walked out at noon." in page and "Dockers walked out at dawn." in page
    for button in ("Adopt what the site shows as a new revision", "Republish revision 1 over it", "Accept what"):
        assert button in page
    # The editors are told on the brief page.
    client.force_login(brief.author)
    notice = client.get(f"/briefs/{brief.public_id}/").content.decode()
    assert "The site no longer shows revision 1 as it was approved." in notice


def test_drift__republish_approved_revision__own_key_overwrites_the_edit_verified_audited(
    direct, brief, revise, approver, staff_operator
):
    revision, check = find_drift(
        direct, brief, revise, approver, content="Dockers walked out at noon.", excerpt="Not approved."
    )
    conflict = Conflict.objects.get(operation=check)

    said = resolve(staff_operator, check, "republish")
    again = resolve(staff_operator, check, "republish")

    key = republish_key(brief.public_id, 1, conflict.id)
    assert said == f"Republishing revision 1 over the drift ({key}); then it is verified."
    assert again.startswith(f"Nothing to do: {check.key} is cancelled now.")
    assert Operation.objects.filter(kind=REPUBLISH).count() == 1
    assert run_worker(kinds=(REPUBLISH, VERIFY)) == {"succeeded": 2}
    assert Operation.objects.get(key=key).status == "succeeded"
    assert Operation.objects.get(key=f"verify:{key}").status == "succeeded"
    assert_post_shows(direct, revision)
    assert post_of(direct, brief.public_id)["excerpt"]["raw"] == ""
    assert publication_rows(direct, brief.public_id) == [
        application_of(revision),
        (key, 1, revision.payload_hash),
    ]
    assert len(galley_posts(direct, brief.public_id)) == 1
    assert_published(brief, revision)
    conflict.refresh_from_db()
    assert (conflict.resolved_by, conflict.accepted_payload_hash) == (staff_operator, "")
    events = set(AuditEvent.objects.values_list("event_type", flat=True))
    assert {"publication.republish_requested", "publication.republished", "operation.cancelled"} <= events
    # The next round finds the post as approved.
    assert check_drift() == 1
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"succeeded": 1}


def test_drift__accept__recorded_with_reason_later_checks_quiet_until_it_changes_again(
    direct, brief, revise, approver, staff_operator
):
    revision, check = find_drift(direct, brief, revise, approver, content="Dockers walked out at noon.")

    refused = resolve(staff_operator, check, "accept_drift", reason="")
    assert "reason" in refused.lower() and drift_checks(brief)[0].status == "conflict"
    said = resolve(staff_operator, check, "accept_drift", reason="the desk fixed a typo in WordPress")
    again = resolve(staff_operator, check, "accept_drift", reason="twice")

    assert said == "Accepted: the site keeps what it shows; later checks compare with it."
    assert again.startswith(f"Nothing to do: {check.key} is cancelled now.")
    edited = payload_hash({"title": "Harbour strike", "body": "Dockers walked out at noon."})
    conflict = Conflict.objects.get(operation=check)
    assert (conflict.accepted_payload_hash, conflict.resolved_by) == (edited, staff_operator)
    accepted = AuditEvent.objects.get(event_type="publication.drift_accepted")
    assert (accepted.actor, accepted.new_state) == (
        staff_operator,
        {"accepted_hash": edited, "reason": "the desk fixed a typo in WordPress"},
    )
    assert post_of(direct, brief.public_id)["content"]["raw"] == "Dockers walked out at noon."  # left as it is
    client = Client()
    client.force_login(brief.author)
    notice = client.get(f"/briefs/{brief.public_id}/").content.decode()
    assert "Settled: an operator accepted what the site shows: the desk fixed a typo in WordPress." in notice
    assert check_drift() == 1
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"succeeded": 1}
    edit_post_as_admin(direct, brief.public_id, content="Dockers walked out at one.")
    assert check_drift() == 1
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"conflict": 1}
    assert_published(brief, revision)
    # Republished over the new drift, the accepted text is no longer accepted: put back, it is a drift.
    assert resolve(staff_operator, drift_checks(brief)[-1], "republish").startswith("Republishing revision 1")
    assert run_worker(kinds=(REPUBLISH, VERIFY)) == {"succeeded": 2}
    edit_post_as_admin(direct, brief.public_id, content="Dockers walked out at noon.")
    assert check_drift() == 1
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"conflict": 1}


def test_drift__adopt_as_new_revision__written_by_the_operator_approved_then_published(
    direct, brief, revise, approver, staff_operator
):
    first, check = find_drift(direct, brief, revise, approver, content="Dockers walked out at noon.")

    said = resolve(staff_operator, check, "adopt_drift")
    again = resolve(staff_operator, check, "adopt_drift")

    assert said == (
        "Adopted what the site shows as revision 2, its text as plain paragraphs (the site's formatting is not "
        "kept: edit the revision to restore it); it waits for approval."
    )
    assert again.startswith(f"Nothing to do: {check.key} is cancelled now.")
    adopted = Revision.objects.get(brief=brief, number=2)
    assert (adopted.payload, adopted.author) == (
        {"title": "Harbour strike", "body": "Dockers walked out at noon."},
        staff_operator,
    )
    assert fresh(brief).status == "in_review"
    assert AuditEvent.objects.filter(event_type="publication.drift_adopted", actor=staff_operator).count() == 1
    assert check_drift() == 1  # until revision 2 is published, what the site shows is what was adopted
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"succeeded": 1}

    approve(adopted, by=approver)
    assert run_worker() == {"succeeded": 1}
    assert_published(brief, adopted)
    assert_post_shows(direct, adopted)
    assert Publication.objects.get(revision=first).verified_at is not None


def test_drift__found_by_the_verification__accept_refused_republish_publishes_it(
    direct, brief, revise, approver, staff_operator, monkeypatch
):
    """Edited before its read-back: the revision was never observed as approved, so accepting is refused
    (it would not make it so); republishing writes it again and its verification publishes it."""
    revision = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(revision, by=approver)
    with pages_not_there_yet(monkeypatch):
        assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    edit_post_as_admin(direct, brief.public_id, content="Dockers walked out at noon.")
    assert run_worker(kinds=(VERIFY,)) == {"conflict": 1}
    verify = verify_op(revision)
    client = Client()
    client.force_login(staff_operator)
    page = client.get(f"/admin/publishing/publicationproblem/{verify.id}/change/").content.decode()
    assert "Accepting is not offered: revision 1 was never verified" in page

    refused = resolve(staff_operator, verify, "accept_drift", reason="fine as it is")
    assert refused.startswith("This revision was never verified")
    assert verify_op(revision).status == "conflict"
    assert resolve(staff_operator, verify, "republish").startswith("Republishing revision 1 over the drift")
    assert run_worker(kinds=(REPUBLISH, VERIFY)) == {"succeeded": 2}

    assert_published(brief, revision)
    assert_post_shows(direct, revision)
    assert verify_op(revision).status == "cancelled"


def test_drift__excerpt_only__adopted_as_the_standfirst(direct, brief, revise, approver, staff_operator):
    _revision, check = find_drift(direct, brief, revise, approver, excerpt="A teaser nobody approved.")
    conflict = Conflict.objects.get(operation=check)
    assert conflict.target_state["live"]["excerpt"] == "A teaser nobody approved."

    said = resolve(staff_operator, check, "adopt_drift")

    assert said.startswith("Adopted what the site shows as revision 2")
    assert Revision.objects.get(brief=brief, number=2).payload == {
        "title": "Harbour strike",
        "standfirst": "A teaser nobody approved.",
        "body": "Dockers walked out at dawn.",
    }


def test_drift__status_only__adopt_refused_in_plain_words_nothing_written(
    direct, brief, revise, approver, staff_operator
):
    _revision, check = find_drift(direct, brief, revise, approver, status="draft")

    refused = resolve(staff_operator, check, "adopt_drift")

    assert refused.startswith("The site's title, text and excerpt are revision 1's own; only its status differs")
    assert Revision.objects.filter(brief=brief).count() == 1
    assert (drift_checks(brief)[0].status, fresh(brief).status) == ("conflict", "published")
    assert not AuditEvent.objects.filter(event_type="publication.drift_adopted").exists()


def test_drift__html_edited_in_wp_admin__adopted_as_plain_text_paragraphs_never_markup(
    direct, brief, revise, approver, staff_operator
):
    edited = (
        "<!-- wp:paragraph --><p>Dockers walked out at <strong>noon</strong> &amp; stayed.</p><!-- /wp:paragraph -->"
        '<p>Talks<br>resume <a href="javascript:alert(1)">Tuesday</a>.</p><script>alert(2)</script>'
    )
    _revision, check = find_drift(direct, brief, revise, approver, content=edited)

    said = resolve(staff_operator, check, "adopt_drift")

    assert said.startswith("Adopted what the site shows as revision 2, its text as plain paragraphs")
    adopted = Revision.objects.get(brief=brief, number=2)
    assert adopted.payload == {
        "title": "Harbour strike",
        "body": "Dockers walked out at noon & stayed.\n\nTalks\n\nresume Tuesday.",
    }


def test_story__structured_revision__published_to_wordpress_and_verified(direct, brief, editor, approver):
    revision = write(brief, STORY, by=editor)
    approve(revision, by=approver)

    assert run_worker() == {"succeeded": 1}

    assert_published(brief, revision)
    assert_post_shows(direct, revision)
    assert publish_op(revision).result["verified_inline"] is True


def test_done_means_observed__post_shows_newer_revision_sent_not_yet_recorded__superseded_not_drift(
    direct, brief, revise, approver, monkeypatch
):
    """Revision 2 reached WordPress but its worker has not recorded it yet (it is cut off after the
    send): revision 1's read-back shows revision 2's content live. That is Galley's own newer revision,
    not an edit at the target: revision 1's verification is over, no drift for an operator."""
    first = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(first, by=approver)
    with pages_not_there_yet(monkeypatch):
        assert run_worker(kinds=(PUBLISH,)) == {"succeeded": 1}
    second = revise(brief, "Dockers walked out at dawn. The port is closed.", title="Harbour closed")
    approve(second, by=approver)
    (cut_off,) = claim_operations(worker_id="w-cut-off", limit=1, kinds=[PUBLISH])
    with wordpress_client(direct) as client:  # what the cut-off worker sent
        client.publish(
            operation_key=cut_off.key,
            brief_id=brief.public_id,
            revision=2,
            payload_hash=second.payload_hash,
            payload=second.payload,
        )
    assert not Publication.objects.filter(revision=second).exists()

    assert run_worker(kinds=(VERIFY,)) == {"superseded": 1}

    assert (verify_op(first).status, verify_op(first).needs_operator) == ("superseded", False)
    assert not Conflict.objects.exists()
    expire_lease(publish_op(second))  # the cut-off worker never comes back: its publish is adopted
    assert run_worker() == {"succeeded": 1}
    assert_published(brief, second)
    assert publication_rows(direct, brief.public_id) == [application_of(first), application_of(second)]


# --- docs/invariants.md#i16: a retraction through Galley, observed at WordPress ---------------------------


def retraction_rows(wordpress: WordPress, brief_id: str) -> list[tuple[str, int]]:
    """The plugin's own record of the brief's retractions as (retraction key, revision), in order."""
    rows = wordpress.sql(
        "SELECT operation_key, revision FROM wp_galley_retractions"
        f" WHERE brief_id = {wordpress.quote(brief_id)} ORDER BY id"
    )
    return [(key, int(revision)) for key, revision in rows]


def test_i16__retract_through_galley__post_down_once_410_drift_quiet_newer_publishes_wordpress(
    direct, brief, revise, approver
):
    first = revise(brief, "Dockers walked out at dawn.", title="Harbour strike")
    approve(first, by=approver)
    assert run_worker() == {"succeeded": 1}
    assert_published(brief, first)
    publication = Publication.objects.get(revision=first)
    assert httpx.get(publication.permalink, timeout=60).status_code == 200

    with transaction.atomic(durable=True):
        (enqueued,) = check_retract_brief(
            brief.public_id, reason="The source withdrew the claim.", confirm=True, acting_user=approver
        )
    assert enqueued.operation.key == retract_key(brief.public_id, 1)
    assert run_worker(kinds=(RETRACT,)) == {"succeeded": 1}
    assert run_worker(kinds=(RETRACT,)) == {}  # nothing left to send

    assert retraction_rows(direct, brief.public_id) == [(retract_key(brief.public_id, 1), 1)]
    with wordpress_client(direct) as client:
        back = client.read_back(publication.external_id)
    assert (back.retracted, bool(back.retracted_at)) == (True, True)
    assert httpx.get(publication.permalink, timeout=60).status_code == 410  # anonymous: no auth
    publication.refresh_from_db()
    assert publication.retracted_at is not None
    assert fresh(brief).status == Brief.Status.RETRACTED
    assert check_drift() == 0  # a retracted publication is not checked: nothing to find
    assert not Operation.objects.filter(kind=DRIFT_CHECK, subject_id=brief.public_id).exists()

    second = revise(brief, "Dockers walked out at dawn. The claim is withdrawn.", title="Harbour strike: correction")
    approve(second, by=approver)
    assert run_worker() == {"succeeded": 1}

    assert_published(brief, second)
    assert_post_shows(direct, second)
    assert len(galley_posts(direct, brief.public_id)) == 1  # the same post, published again
    again = Publication.objects.get(revision=second)
    assert (again.retracted_at, again.permalink) == (None, publication.permalink)
    assert httpx.get(again.permalink, timeout=60).status_code == 200
    with wordpress_client(direct) as client:
        assert client.read_back(again.external_id).retracted is False
    assert retraction_rows(direct, brief.public_id) == [(retract_key(brief.public_id, 1), 1)]
    assert check_drift() == 1  # the published revision 2 is checked again, and shows what was approved
    assert run_worker(kinds=(DRIFT_CHECK,)) == {"succeeded": 1}
