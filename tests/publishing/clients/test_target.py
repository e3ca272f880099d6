"""TargetClient against httpx.MockTransport: every status of docs/target-protocol.md maps to the exception
that tells the worker what to do next (docs/invariants.md#i9), and the operation key travels as the
Idempotency-Key (docs/invariants.md#i1)."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from publishing.clients.http import parse_retry_after
from publishing.clients.target import (
    BriefHeld,
    Receipt,
    RetractionReceipt,
    TargetAmbiguous,
    TargetAuthError,
    TargetClient,
    TargetConnectionError,
    TargetError,
    TargetGone,
    TargetInProgress,
    TargetInvalidResponse,
    TargetKeyMismatch,
    TargetNotFound,
    TargetRejected,
    TargetServerError,
    TargetStaleRevision,
    TargetThrottled,
    TargetTimeout,
    WordPressClient,
    shared_from_settings,
)

KEY = "publish:brief-042:revision-3"
HASH = "a" * 64
RECEIPT = {
    "id": "pub-1",
    "operation_key": KEY,
    "brief_id": "brief-042",
    "revision": 3,
    "payload_hash": HASH,
    "permalink": "http://target.test/articles/pub-1",
}

Handler = Callable[[httpx.Request], httpx.Response]


def make_client(handler: Handler, *, timeout: float = 2.5) -> TargetClient:
    return TargetClient(
        base_url="http://target.test/",
        token="s3cret",
        timeout=timeout,
        transport=httpx.MockTransport(handler),
    )


def publish(client: TargetClient) -> tuple[Receipt, bool]:
    return client.publish(
        operation_key=KEY,
        brief_id="brief-042",
        revision=3,
        payload_hash=HASH,
        payload={"title": "Harbour strike", "body": "Dockers walked out."},
    )


def fails(handler: Handler, exc_type: type[TargetError], call: Callable[[TargetClient], object] = publish) -> Any:
    """The exception `call` raises against a target answering with `handler`."""
    with make_client(handler) as client, pytest.raises(exc_type) as caught:
        call(client)
    return caught.value


def answer(status: int, body: object = None, **headers: str) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return handler


def raising(exc_type: type[httpx.RequestError]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc_type("boom", request=request)

    return handler


def test_publish__201__first_application_with_receipt():
    with make_client(answer(201, RECEIPT)) as client:
        receipt, first = publish(client)
    assert first is True
    assert receipt == Receipt(**RECEIPT)


def test_publish__200__replay_not_first():
    with make_client(answer(200, RECEIPT)) as client:
        receipt, first = publish(client)
    assert first is False
    assert receipt.id == "pub-1"


def test_publish__sends_bearer_idempotency_key_json_body_and_timeouts():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=RECEIPT)

    with make_client(handler, timeout=2.5) as client:
        publish(client)
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == "http://target.test/v1/publications"
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert request.headers["Idempotency-Key"] == KEY
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.content) == {
        "operation_key": KEY,
        "brief_id": "brief-042",
        "revision": 3,
        "payload_hash": HASH,
        "payload": {"title": "Harbour strike", "body": "Dockers walked out."},
    }
    assert request.extensions["timeout"] == {"connect": 2.5, "read": 2.5, "write": 2.5, "pool": 2.5}


def test_publish__receipt_for_another_hash__invariant2_never_reported_as_success():
    fails(answer(200, {**RECEIPT, "payload_hash": "b" * 64}), TargetInvalidResponse)


def test_publish__422__invariant2_key_mismatch_is_loud():
    error = fails(answer(422, {"error": "idempotency_mismatch"}), TargetKeyMismatch)
    assert error.status == 422
    assert "different payload hash" in str(error)


def test_publish__409_in_progress():
    error = fails(answer(409, {"error": "in_progress"}), TargetInProgress)
    assert error.status == 409


def test_publish__409_stale_revision__invariant4_carries_current_revision():
    error = fails(answer(409, {"error": "stale_revision", "current_revision": 5}), TargetStaleRevision)
    assert error.current_revision == 5
    assert "revision 5" in str(error)


def test_publish__409_unknown_body__invalid_response():
    fails(answer(409, {"error": "something_else"}), TargetInvalidResponse)


def test_publish__400__invariant9_rejected_terminal_with_detail():
    error = fails(answer(400, {"error": "invalid", "detail": "revision must be an integer"}), TargetRejected)
    assert error.status == 400
    assert "revision must be an integer" in str(error)


@pytest.mark.parametrize("status", [401, 403])
def test_publish__401_403__invariant9_auth_error(status):
    error = fails(answer(status, {"error": "forbidden"}), TargetAuthError)
    assert error.status == status


def test_publish__429_retry_after_seconds__invariant9_throttled():
    error = fails(answer(429, {"error": "throttled"}, **{"Retry-After": "7"}), TargetThrottled)
    assert error.status == 429
    assert error.retry_after == 7.0


def test_publish__429_retry_after_http_date__seconds_from_now():
    when = (datetime.now(UTC) + timedelta(seconds=120)).replace(microsecond=0)  # an HTTP-date has whole seconds
    before = datetime.now(UTC)
    error = fails(
        answer(429, {"error": "throttled"}, **{"Retry-After": format_datetime(when, usegmt=True)}), TargetThrottled
    )
    after = datetime.now(UTC)
    # Seconds from the moment the answer was read, which lies between `before` and `after` however slow
    # this machine is.
    assert (when - after).total_seconds() <= error.retry_after <= (when - before).total_seconds()


def test_publish__503_without_retry_after__throttled_none():
    error = fails(answer(503, {"error": "unavailable"}), TargetThrottled)
    assert error.status == 503
    assert error.retry_after is None


@pytest.mark.parametrize("status", [500, 502, 504])
def test_publish__other_5xx__invariant9_server_error(status):
    error = fails(answer(status, {"error": "server_error"}), TargetServerError)
    assert error.status == status


def test_publish__timeout__invariant9_ambiguous():
    error = fails(raising(httpx.ReadTimeout), TargetTimeout)
    assert isinstance(error, TargetAmbiguous)
    assert error.status is None
    assert "may have been applied" in str(error)


@pytest.mark.parametrize("exc_type", [httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError])
def test_publish__connect_error_or_drop__invariant9_ambiguous(exc_type):
    error = fails(raising(exc_type), TargetConnectionError)
    assert isinstance(error, TargetAmbiguous)


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(201, content=b"<html>not json</html>"),
        httpx.Response(201, json=["a", "list"]),
        httpx.Response(201, json={**RECEIPT, "revision": "3"}),
        httpx.Response(201, json={k: v for k, v in RECEIPT.items() if k != "permalink"}),
        httpx.Response(204),
        httpx.Response(302, headers={"Location": "/elsewhere"}),
    ],
    ids=["html", "list", "revision-string", "no-permalink", "204", "redirect"],
)
def test_publish__garbage_body_or_status__invalid_response(response):
    fails(lambda request: response, TargetInvalidResponse)


def test_every_exception_is_a_target_error():
    for exc_type in (
        TargetAmbiguous,
        TargetTimeout,
        TargetConnectionError,
        TargetThrottled,
        TargetServerError,
        TargetRejected,
        TargetAuthError,
        TargetKeyMismatch,
        TargetInProgress,
        TargetStaleRevision,
        TargetNotFound,
        TargetGone,
        TargetInvalidResponse,
    ):
        assert issubclass(exc_type, TargetError)


def test_lookup__200__receipt__sent_with_key_and_token():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=RECEIPT)

    with make_client(handler) as client:
        assert client.lookup(KEY) == Receipt(**RECEIPT)
    assert seen[0].url.params["operation_key"] == KEY
    assert seen[0].url.path == "/v1/publications"
    assert seen[0].headers["Authorization"] == "Bearer s3cret"


def test_lookup__404_not_found__none():
    with make_client(answer(404, {"error": "not_found"})) as client:
        assert client.lookup(KEY) is None


def test_lookup__404_html__invalid_response_not_none():
    fails(
        lambda request: httpx.Response(404, content=b"<h1>Not Found</h1>"),
        TargetInvalidResponse,
        lambda client: client.lookup(KEY),
    )


def test_lookup__timeout__ambiguous():
    fails(raising(httpx.ConnectTimeout), TargetTimeout, lambda client: client.lookup(KEY))


def test_held_of_brief__200__newest_revision_held__wordpress_extra_fields_ignored():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/briefs/brief-042"
        assert request.headers["Authorization"] == "Bearer s3cret"
        # The WordPress plugin's answer adds its post's id.
        return httpx.Response(
            200, json={"brief_id": "brief-042", "post_id": 7, "revision": 3, "permalink": "http://t/a"}
        )

    with make_client(handler) as client:
        assert client.held_of_brief("brief-042") == BriefHeld(brief_id="brief-042", revision=3, permalink="http://t/a")


def test_held_of_brief__404_not_found__none():
    with make_client(answer(404, {"error": "not_found"})) as client:
        assert client.held_of_brief("brief-042") is None


@pytest.mark.parametrize(
    "body",
    [
        {"brief_id": "brief-043", "revision": 3, "permalink": "http://t/a"},  # another brief
        {"brief_id": "brief-042", "revision": 0, "permalink": "http://t/a"},
        {"brief_id": "brief-042", "permalink": "http://t/a"},
    ],
    ids=["another-brief", "no-revision-held", "no-revision-field"],
)
def test_held_of_brief__answer_not_about_what_was_asked__invalid_response(body):
    fails(answer(200, body), TargetInvalidResponse, lambda client: client.held_of_brief("brief-042"))


def test_held_of_brief__404_html__invalid_response_not_none():
    fails(
        lambda request: httpx.Response(404, content=b"<h1>Not Found</h1>"),
        TargetInvalidResponse,
        lambda client: client.held_of_brief("brief-042"),
    )


def test_read_back__200__receipt():
    body = {**RECEIPT, "payload": {"title": "t", "body": "b"}, "published_at": "2026-01-01T00:00:00+00:00"}

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/publications/pub-1"
        assert request.headers["Authorization"] == "Bearer s3cret"
        return httpx.Response(200, json=body)

    with make_client(handler) as client:
        assert client.read_back("pub-1") == Receipt(**RECEIPT)


def test_read_back__404__not_found():
    fails(answer(404, {"error": "not_found"}), TargetNotFound, lambda client: client.read_back("pub-9"))


def test_fetch_permalink__returns_the_text_a_reader_sees__without_sending_token():
    seen: list[httpx.Request] = []
    page = (
        "<!doctype html><html><head><title>Site</title><style>h1 { color: red }</style>"
        "<script>var hidden = 1;</script></head>"
        "<body><h1>Don&#8217;t &amp; stop</h1><p>The <b>strike</b> goes on.</p></body></html>"
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, html=page)

    with make_client(handler) as client:
        text = client.fetch_permalink("http://elsewhere.test/articles/pub-1")
    assert text.split() == ["Site", "Don\u2019t", "&", "stop", "The", "strike", "goes", "on."]
    assert str(seen[0].url) == "http://elsewhere.test/articles/pub-1"
    assert "Authorization" not in seen[0].headers


def test_fetch_permalink__404__not_found():
    fails(
        lambda request: httpx.Response(404, html="gone"),
        TargetNotFound,
        lambda client: client.fetch_permalink("http://target.test/articles/pub-1"),
    )


@pytest.mark.parametrize(
    ("header", "expected"),
    [(None, None), ("", None), ("0", 0.0), ("3", 3.0), ("-1", None), ("soon", None), ("nan", None)],
)
def test_parse_retry_after__seconds_and_garbage(header, expected):
    assert parse_retry_after(header) == expected


def test_parse_retry_after__past_date__zero():
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_shared_from_settings__one_client_per_configuration_read_at_call_time(settings):
    settings.GALLEY_TARGET_URL = "http://target.example:9000"
    settings.GALLEY_TARGET_TOKEN = "from-settings"
    settings.GALLEY_TARGET_TIMEOUT_SECONDS = 3
    client = shared_from_settings()
    assert client.base_url == "http://target.example:9000"
    assert client.timeout == 3.0
    assert client._auth == {"Authorization": "Bearer from-settings"}
    assert shared_from_settings() is client
    settings.GALLEY_TARGET_TOKEN = "rotated"
    replacement = shared_from_settings()
    assert replacement is not client
    assert replacement._auth == {"Authorization": "Bearer rotated"}
    assert client._http.is_closed


# --- check_target: what is wrong, said plainly -------------------------------------------------------


def test_check__not_found_lookup__protocol_and_credentials_ok():
    with make_client(answer(404, {"error": "not_found"})) as client:
        assert "accepts GALLEY_TARGET_TOKEN" in client.check()


def test_check__refused_token__auth_error_names_the_setting():
    error = fails(answer(401, {"error": "unauthorized"}), TargetAuthError, lambda client: client.check())
    assert "GALLEY_TARGET_TOKEN" in str(error)


def wordpress_client(handler: Handler, **credentials: str) -> WordPressClient:
    return WordPressClient(
        site_url="http://wp.test/",
        user=credentials.get("user", "galley"),
        app_password=credentials.get("app_password", "abcd efgh"),
        timeout=2.5,
        transport=httpx.MockTransport(handler),
    )


def test_wordpress__speaks_the_protocol_under_the_plugin_namespace_with_basic_auth():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404, json={"error": "not_found"})

    with wordpress_client(handler) as client:
        assert client.lookup(KEY) is None
    assert str(seen[0].url) == f"http://wp.test/wp-json/galley/v1/publications?operation_key={KEY.replace(':', '%3A')}"
    assert seen[0].headers["Authorization"] == "Basic " + base64.b64encode(b"galley:abcd efgh").decode()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (401, {"code": "rest_not_logged_in"}, "GALLEY_WORDPRESS_USER / GALLEY_WORDPRESS_APP_PASSWORD"),
        (404, {"code": "rest_no_route"}, "copy publishing/clients/wordpress/galley-publishing.php"),
        (
            200,
            {"plugin": "galley-publishing", "version": "2", "fence": True},
            "Galley needs galley-publishing version 4",
        ),
        (200, {"plugin": "galley-publishing", "version": "4", "fence": False}, "does not confirm its revision fence"),
    ],
    ids=["wrong-password", "no-plugin", "old-plugin", "no-fence"],
)
def test_wordpress_check__says_what_is_wrong(status, body, expected):
    with wordpress_client(answer(status, body)) as client, pytest.raises(TargetError) as caught:
        client.check()
    assert expected in str(caught.value)


def test_wordpress_check__plugin_and_credentials_ok():
    status = {"plugin": "galley-publishing", "version": "4", "fence": True, "user": "galley"}
    with wordpress_client(answer(200, status)) as client:
        assert client.check() == (
            "WordPress at http://wp.test: plugin galley-publishing 4, revision fence on, signed in as 'galley'"
        )


def test_wordpress__no_application_password__nothing_sent():
    sent: list[httpx.Request] = []
    no_password = wordpress_client(lambda request: sent.append(request) or httpx.Response(200), app_password="")
    with no_password as client, pytest.raises(TargetAuthError, match="GALLEY_WORDPRESS_APP_PASSWORD is empty"):
        client.lookup(KEY)
    assert sent == []


LIVE = {
    "hash": "c" * 64,
    "title": "Harbour strike",
    "body": "Dockers walked out at noon.",
    "excerpt": "",
    "status": "publish",
    "revision": 1,
    "modified_gmt": "2026-12-01 21:00:00",
}


def test_wordpress_read_back__live_content__parsed_beside_what_galley_sent():
    receipt = {**RECEIPT, "live": LIVE}
    with wordpress_client(answer(200, receipt)) as client:
        read = client.read_back(RECEIPT["id"])
    assert read.payload_hash == RECEIPT["payload_hash"]
    assert read.live is not None
    assert (read.live.hash, read.live.body, read.live.revision) == (LIVE["hash"], LIVE["body"], 1)
    assert read.live.shows("c" * 64) and not read.live.shows(RECEIPT["payload_hash"])
    assert not dataclasses.replace(read.live, status="draft").shows("c" * 64)  # not published: not shown


@pytest.mark.parametrize(
    "live",
    [{**LIVE, "hash": "not-a-sha256"}, {**LIVE, "revision": "1"}, {**LIVE, "body": None}, "live"],
    ids=["bad-hash", "revision-text", "body-null", "not-an-object"],
)
def test_wordpress_read_back__invalid_live_content__invalid_response_never_a_receipt(live):
    with wordpress_client(answer(200, {**RECEIPT, "live": live})) as client, pytest.raises(TargetInvalidResponse):
        client.read_back(RECEIPT["id"])


def test_fetch_permalink__410__gone_distinct_from_404():
    error = fails(
        lambda request: httpx.Response(410, html="retracted"),
        TargetGone,
        lambda client: client.fetch_permalink("http://target.test/articles/pub-1"),
    )
    assert error.status == 410 and isinstance(error, TargetNotFound)


def test_read_back__retracted_state__parsed_and_false_when_absent():
    body = {**RECEIPT, "retracted": True, "retracted_at": "2026-01-01T00:00:00+00:00"}
    with make_client(answer(200, body)) as client:
        back = client.read_back("pub-1")
    assert (back.retracted, back.retracted_at) == (True, "2026-01-01T00:00:00+00:00")
    assert Receipt(**RECEIPT).retracted is False
    fails(answer(200, {**RECEIPT, "retracted": "yes"}), TargetInvalidResponse, lambda client: client.read_back("pub-1"))


# --- retraction (docs/target-protocol.md#retraction) --------------------------------------------------

RETRACT_KEY = "retract:brief-042:revision-3"
RETRACTED = {
    "id": "pub-1",
    "operation_key": RETRACT_KEY,
    "revision": 3,
    "retracted": True,
    "retracted_at": "2026-01-01T00:00:00+00:00",
}


def retract(client: TargetClient) -> RetractionReceipt:
    return client.retract(
        publication_id="pub-1", operation_key=RETRACT_KEY, brief_id="brief-042", revision=3, reason="libel"
    )


@pytest.mark.parametrize("status", [200, 201])
def test_retract__i16_sends_key_and_body__receipt(status):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=RETRACTED)

    with make_client(handler) as client:
        assert retract(client) == RetractionReceipt(**RETRACTED)
    assert seen[0].method == "POST" and seen[0].url.path == "/v1/publications/pub-1/retraction"
    assert seen[0].headers["Idempotency-Key"] == RETRACT_KEY
    assert seen[0].headers["Authorization"] == "Bearer s3cret"
    assert json.loads(seen[0].content) == {
        "operation_key": RETRACT_KEY,
        "brief_id": "brief-042",
        "revision": 3,
        "reason": "libel",
    }


@pytest.mark.parametrize(
    ("response", "exc_type"),
    [
        (httpx.Response(404, json={"error": "not_found"}), TargetNotFound),
        (httpx.Response(409, json={"error": "stale_revision", "current_revision": 4}), TargetStaleRevision),
        (httpx.Response(409, json={"error": "in_progress"}), TargetInProgress),
        (httpx.Response(422, json={"error": "idempotency_mismatch"}), TargetKeyMismatch),
        (httpx.Response(429, json={"error": "throttled"}, headers={"Retry-After": "4"}), TargetThrottled),
        (httpx.Response(500, json={"error": "server_error"}), TargetServerError),
        (httpx.Response(200, json={**RETRACTED, "retracted": False}), TargetInvalidResponse),
        (
            httpx.Response(200, json={**RETRACTED, "operation_key": "retract:brief-042:revision-2"}),
            TargetInvalidResponse,
        ),
    ],
    ids=["404", "stale", "in-progress", "mismatch", "429", "500", "not-retracted", "other-key"],
)
def test_retract__invariant9_statuses_map_to_errors(response, exc_type):
    error = fails(lambda request: response, exc_type, retract)
    if exc_type is TargetStaleRevision:
        assert error.current_revision == 4
    if exc_type is TargetThrottled:
        assert error.retry_after == 4.0


def test_retract__timeout__invariant9_ambiguous():
    assert isinstance(fails(raising(httpx.ReadTimeout), TargetTimeout, retract), TargetAmbiguous)
