"""Galley's WordPress plugin (publishing/clients/wordpress/galley-publishing.php) against a real WordPress.

Debian's WordPress 6.1 on PHP's built-in server and a private MariaDB (tests/wordpress.py), over real
HTTP with an application password. Each test uses its own brief and keys, so they share one site.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from publishing.hashing import payload_hash
from publishing.story import clean_story, render_story
from tests.wordpress import WordPress

pytestmark = pytest.mark.wordpress

PUBLICATIONS = "/wp-json/galley/v1/publications"
FAIL_AFTER_INSERT = "__galley_test_fail_after_insert__"


@pytest.fixture
def api(wordpress: WordPress) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=wordpress.url, auth=wordpress.auth, timeout=60) as client:
        yield client


def new_brief() -> str:
    return f"brief-{uuid.uuid4().hex[:12]}"


def publication(
    brief_id: str, revision: int, title: str, body: str, *, key: str | None = None, digest: str | None = None
) -> dict[str, Any]:
    payload = {"title": title, "body": body}
    return {
        "operation_key": key or f"publish:{brief_id}:revision-{revision}",
        "brief_id": brief_id,
        "revision": revision,
        "payload_hash": digest or payload_hash(payload),
        "payload": payload,
    }


def publish(client: httpx.Client, body: Any, *, idempotency_key: str | None = "") -> httpx.Response:
    """POST a publication; the Idempotency-Key is the body's operation key unless given (None: no header)."""
    headers = {"Content-Type": "application/json"}
    if idempotency_key == "":
        idempotency_key = body["operation_key"]
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    content = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode("utf-8")
    return client.post(PUBLICATIONS, content=content, headers=headers)


def galley_posts(wp: WordPress, brief_id: str) -> list[str]:
    """IDs of the posts that carry this brief (any status), straight from WordPress's tables."""
    return wp.column(
        "SELECT p.ID FROM wp_posts p JOIN wp_postmeta m ON m.post_id = p.ID AND m.meta_key = 'galley_brief_id'"
        f" WHERE p.post_type = 'post' AND m.meta_value = {wp.quote(brief_id)}"
    )


def publication_rows(wp: WordPress, *, key: str | None = None, brief_id: str | None = None) -> int:
    column, value = ("operation_key", key) if key is not None else ("brief_id", brief_id)
    return int(wp.scalar(f"SELECT COUNT(*) FROM wp_galley_publications WHERE {column} = {wp.quote(str(value))}"))


def live(title: str, body: str, revision: int, *, excerpt: str = "", status: str = "publish") -> dict[str, Any]:
    """The plugin's "live" report of a post showing this content (its modification time left out)."""
    content = {"title": title, "body": body, **({"excerpt": excerpt} if excerpt else {})}
    return {
        "hash": payload_hash(content),
        "title": title,
        "body": body,
        "excerpt": excerpt,
        "status": status,
        "revision": revision,
    }


# What a look-up or read-back of a brief never retracted says about retraction (test_wordpress_retraction.py).
NOT_RETRACTED = {"retracted": False, "retracted_at": None}


def without_modified(body: dict[str, Any]) -> dict[str, Any]:
    """A lookup or read-back body with live.modified_gmt checked for form and left out."""
    reported = dict(body["live"])
    assert len(reported.pop("modified_gmt")) == len("2026-12-01 21:00:00")
    return {**body, "live": reported}


def edit_post_as_admin(wp: WordPress, post_id: int, **fields: str) -> None:
    """Change the post as an editor in wp-admin would: WordPress's core REST API, as the administrator."""
    response = httpx.post(wp.rest(f"wp/v2/posts/{post_id}"), json=fields, auth=wp.auth, timeout=60)
    assert response.status_code == 200, response.text


def brief_rows(wp: WordPress, brief_id: str) -> int:
    return int(wp.scalar(f"SELECT COUNT(*) FROM wp_galley_briefs WHERE brief_id = {wp.quote(brief_id)}"))


def raw_post(client: httpx.Client, post_id: int) -> dict[str, Any]:
    """The post as WordPress's own REST API shows it to an editor (raw title and content, meta)."""
    response = client.get(f"/wp-json/wp/v2/posts/{post_id}", params={"context": "edit"})
    assert response.status_code == 200, response.text
    return response.json()


class _Text(HTMLParser):
    """The text a reader sees: character references decoded, scripts and styles left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._hidden += tag in {"script", "style"}

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in {"script", "style"} and self._hidden > 0

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def page_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return " ".join(" ".join(parser.parts).split())


# --- docs/invariants.md#i1: operation identity -------------------------------------------------


def test_operation_identity__first_publish__201_one_post_with_exact_text(wordpress, api):
    brief = new_brief()
    title, body = "  Harbour strike: day one  ", "<p>Dockers walked out at dawn.</p>\n\n<p>Cranes stood still.</p>\n"
    sent = publication(brief, 1, title, body)

    response = publish(api, sent)

    assert response.status_code == 201, response.text
    receipt = response.json()
    assert {k: receipt[k] for k in ("operation_key", "brief_id", "revision", "payload_hash")} == {
        k: sent[k] for k in ("operation_key", "brief_id", "revision", "payload_hash")
    }
    assert receipt["id"].isdigit()
    assert receipt["permalink"].startswith(wordpress.url + "/")
    assert galley_posts(wordpress, brief) == [str(receipt["post_id"])]
    post = raw_post(api, receipt["post_id"])
    assert (post["title"]["raw"], post["content"]["raw"], post["status"]) == (title, body, "publish")
    assert post["meta"] == {
        "galley_brief_id": brief,
        "galley_revision": 1,
        "galley_payload_hash": sent["payload_hash"],
        "galley_operation_key": sent["operation_key"],
        "galley_byline": "",
    }


def test_operation_identity__replay_same_key_same_hash__200_same_receipt_one_post(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, "Replayed", "Sent twice, applied once.")
    first = publish(api, sent)
    assert first.status_code == 201, first.text

    again = publish(api, sent)

    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert galley_posts(wordpress, brief) == [str(first.json()["post_id"])]
    assert publication_rows(wordpress, key=sent["operation_key"]) == 1


def test_operation_identity__concurrent_duplicates__one_post(wordpress):
    brief = new_brief()
    sent = publication(brief, 1, "Twenty at once", "Only one of them may apply.")
    barrier = threading.Barrier(20)

    def send(_: int) -> httpx.Response:
        with httpx.Client(base_url=wordpress.url, auth=wordpress.auth, timeout=60) as client:
            barrier.wait(timeout=30)
            return publish(client, sent)

    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(send, range(20)))

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] * 19 + [201], [(r.status_code, r.text[:200]) for r in responses]
    assert len({json.dumps(response.json(), sort_keys=True) for response in responses}) == 1
    assert publication_rows(wordpress, key=sent["operation_key"]) == 1
    assert len(galley_posts(wordpress, brief)) == 1


# --- docs/invariants.md#i2: key conflict is loud -------------------------------------------------


def test_key_conflict_is_loud__same_key_other_hash__422(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, "The approved text", "As approved.")
    first = publish(api, sent)
    assert first.status_code == 201, first.text
    other = publication(brief, 1, "Another text", "Never approved.", key=sent["operation_key"])

    response = publish(api, other)

    assert response.status_code == 422, response.text
    assert response.json()["error"] == "idempotency_mismatch"
    post = raw_post(api, first.json()["post_id"])
    assert post["title"]["raw"] == "The approved text"
    assert publication_rows(wordpress, brief_id=brief) == 1


# --- docs/invariants.md#i4: no regression (the revision fence) -----------------------------------


def test_no_regression__older_revision__refused_naming_current(wordpress, api):
    brief = new_brief()
    newer = publish(api, publication(brief, 2, "Revision two", "The newer text."))
    assert newer.status_code == 201, newer.text

    older = publish(api, publication(brief, 1, "Revision one", "A late packet."))
    same = publish(api, publication(brief, 2, "Revision two again", "Another key.", key=f"other:{brief}"))

    for refused in (older, same):
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "stale_revision"
        assert refused.json()["current_revision"] == 2
    post = raw_post(api, newer.json()["post_id"])
    assert (post["title"]["raw"], post["content"]["raw"]) == ("Revision two", "The newer text.")
    assert publication_rows(wordpress, brief_id=brief) == 1
    assert galley_posts(wordpress, brief) == [str(newer.json()["post_id"])]


def test_no_regression__concurrent_revisions__newest_wins(wordpress, api):
    brief = new_brief()
    barrier = threading.Barrier(8)

    def send(revision: int) -> httpx.Response:
        with httpx.Client(base_url=wordpress.url, auth=wordpress.auth, timeout=60) as client:
            barrier.wait(timeout=30)
            return publish(client, publication(brief, revision, f"Revision {revision}", f"Text {revision}."))

    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = dict(zip(range(1, 9), pool.map(send, range(1, 9)), strict=True))

    applied = sorted(revision for revision, response in responses.items() if response.status_code == 201)
    refused = {revision: response.json() for revision, response in responses.items() if response.status_code == 409}
    assert sorted(applied + list(refused)) == list(range(1, 9)), {r: x.text for r, x in responses.items()}
    assert applied[-1] == 8
    assert all(body["error"] == "stale_revision" and body["current_revision"] > r for r, body in refused.items())
    # In the order they committed, the applied revisions only ever went up.
    committed = [
        int(revision)
        for revision in wordpress.column(
            f"SELECT revision FROM wp_galley_publications WHERE brief_id = {wordpress.quote(brief)} ORDER BY id"
        )
    ]
    assert committed == applied
    assert len(galley_posts(wordpress, brief)) == 1
    current = api.get(f"/wp-json/galley/v1/briefs/{brief}").json()
    assert current["revision"] == 8
    post = raw_post(api, current["post_id"])
    assert (post["title"]["raw"], post["content"]["raw"]) == ("Revision 8", "Text 8.")


# --- one brief is one post (docs/wordpress.md) ---------------------------------------------------


def test_one_brief_one_post__newer_revision_updates_same_post_permalink_stable(wordpress, api):
    brief = new_brief()
    first = publish(api, publication(brief, 1, "Harbour strike", "Day one."))
    assert first.status_code == 201, first.text

    second = publish(api, publication(brief, 2, "Harbour strike ends", "Day two: the cranes move again."))

    assert second.status_code == 201, second.text
    assert second.json()["post_id"] == first.json()["post_id"]
    assert second.json()["permalink"] == first.json()["permalink"]
    assert second.json()["id"] != first.json()["id"]
    post = raw_post(api, second.json()["post_id"])
    assert (post["title"]["raw"], post["content"]["raw"]) == ("Harbour strike ends", "Day two: the cranes move again.")
    assert post["meta"]["galley_revision"] == 2
    assert galley_posts(wordpress, brief) == [str(first.json()["post_id"])]
    by_brief = api.get(f"/wp-json/galley/v1/briefs/{brief}")
    assert by_brief.status_code == 200, by_brief.text
    assert by_brief.json() == {
        "brief_id": brief,
        "post_id": first.json()["post_id"],
        "revision": 2,
        "permalink": first.json()["permalink"],
    }
    missing = api.get(f"/wp-json/galley/v1/briefs/{new_brief()}")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"


# --- docs/invariants.md#i5: one transaction, all or nothing -------------------------------------


def test_atomic_write__failure_after_post_insert__500_no_post_no_publication(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, FAIL_AFTER_INSERT, "Written, then rolled back.")

    response = publish(api, sent)

    assert response.status_code == 500, response.text
    assert response.json()["error"] == "internal"
    assert galley_posts(wordpress, brief) == []
    assert (
        wordpress.scalar(f"SELECT COUNT(*) FROM wp_posts WHERE post_title = {wordpress.quote(FAIL_AFTER_INSERT)}")
        == "0"
    )
    assert publication_rows(wordpress, key=sent["operation_key"]) == 0
    assert brief_rows(wordpress, brief) == 0
    assert api.get(PUBLICATIONS, params={"operation_key": sent["operation_key"]}).status_code == 404
    # The failed attempt fenced nothing: the brief's first revision still applies.
    retry = publish(api, publication(brief, 1, "Harbour strike", "Applied on the retry."))
    assert retry.status_code == 201, retry.text


# --- authentication -----------------------------------------------------------------------------


def test_auth__wrong_application_password__401_on_post_and_get(wordpress):
    brief = new_brief()
    sent = publication(brief, 1, "Never published", "Wrong credentials.")
    wrong = httpx.BasicAuth(wordpress.user, "abcd efgh ijkl mnop qrst uvwx")
    for auth in (wrong, None):
        with httpx.Client(base_url=wordpress.url, auth=auth, timeout=30) as client:
            answers = [
                publish(client, sent),
                client.get(PUBLICATIONS, params={"operation_key": sent["operation_key"]}),
                client.get(f"{PUBLICATIONS}/1"),
                client.get(f"/wp-json/galley/v1/briefs/{brief}"),
                client.get("/wp-json/galley/v1/status"),
                publish(client, b"{not json", idempotency_key="k"),
            ]
        for answer in answers:
            assert answer.status_code == 401, (auth, answer.request.url, answer.text)
            assert answer.json()["error"] == "unauthorized"
    assert publication_rows(wordpress, brief_id=brief) == 0
    assert galley_posts(wordpress, brief) == []


def test_auth__user_without_publish_posts__403(wordpress):
    brief = new_brief()
    reader = httpx.BasicAuth(wordpress.subscriber, wordpress.subscriber_password)
    with httpx.Client(base_url=wordpress.url, auth=reader, timeout=30) as client:
        me = client.get("/wp-json/wp/v2/users/me")
        assert me.status_code == 200, me.text  # the credentials are good...
        answers = [publish(client, publication(brief, 1, "No", "No.")), client.get("/wp-json/galley/v1/status")]
    for answer in answers:  # ...but the user may not publish
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"] == "forbidden"
    assert publication_rows(wordpress, brief_id=brief) == 0


# --- validation ---------------------------------------------------------------------------------


def test_payload_hash_verified__bad_hash__400_nothing_stored(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, "Tampered", "The hash is of something else.", digest=payload_hash({"title": "x"}))

    response = publish(api, sent)

    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid"
    assert "payload_hash" in response.json()["detail"]
    assert publication_rows(wordpress, brief_id=brief) == 0
    assert brief_rows(wordpress, brief) == 0
    assert galley_posts(wordpress, brief) == []


def _with(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**body, **changes}


INVALID = {
    "no Idempotency-Key": lambda b: (b, None),
    "Idempotency-Key differs": lambda b: (b, "publish:another"),
    "revision zero": lambda b: (_with(b, revision=0), ""),
    "revision as text": lambda b: (_with(b, revision="1"), ""),
    "revision as float": lambda b: (_with(b, revision=1.5), ""),
    "revision as bool": lambda b: (_with(b, revision=True), ""),
    "empty brief id": lambda b: (_with(b, brief_id=""), ""),
    "operation key too long": lambda b: (_with(b, operation_key="k" * 256), "k" * 256),
    "payload hash upper case": lambda b: (_with(b, payload_hash=b["payload_hash"].upper()), ""),
    "payload with another field": lambda b: (_with(b, payload={**b["payload"], "extra": "x"}), ""),
    "payload title not a string": lambda b: (_with(b, payload={**b["payload"], "title": 5}), ""),
    "payload is a list": lambda b: (_with(b, payload=["title", "body"]), ""),
    "unknown top-level field": lambda b: (_with(b, note="x"), ""),
    "body is a list": lambda b: ([b], b["operation_key"]),
    "body is not JSON": lambda b: (b"{oops", b["operation_key"]),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_request__400_nothing_stored(wordpress, api, case):
    brief = new_brief()
    body, key = INVALID[case](publication(brief, 1, "Invalid", "Refused before anything is written."))

    response = publish(api, body, idempotency_key=key)

    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid"
    assert publication_rows(wordpress, brief_id=brief) == 0
    assert brief_rows(wordpress, brief) == 0
    assert galley_posts(wordpress, brief) == []


TRICKY_TEXT = {
    "unicode and slashes": "Café “quoted” — naïve 🚢 a/b \\ back\\slash 'single' \"double\"",
    "controls and line separators": "line\nbreak\ttab\r\u2028\u2029 \x01\x1f\x7f end",
    "markup and entities": "<script>alert('x')</script> &amp; &#150; <!-- more --> <b>bold</b>",
    "surrounding whitespace": "   spaced out   ",
}


@pytest.mark.parametrize("case", list(TRICKY_TEXT))
def test_payload_hash__python_canonical_json_accepted__text_round_trips(wordpress, api, case):
    """The plugin's canonical JSON is Galley's (publishing.hashing); the post holds the text byte for byte."""
    brief = new_brief()
    text = TRICKY_TEXT[case]
    sent = publication(brief, 1, f"Title: {text}", f"Body: {text}")

    response = publish(api, sent)

    assert response.status_code == 201, response.text
    read = api.get(f"{PUBLICATIONS}/{response.json()['id']}").json()
    assert read["payload"] == sent["payload"]
    assert (read["post"]["title"], read["post"]["content"]) == (f"Title: {text}", f"Body: {text}")
    post = raw_post(api, response.json()["post_id"])
    assert (post["title"]["raw"], post["content"]["raw"]) == (f"Title: {text}", f"Body: {text}")


# --- look-ups and docs/invariants.md#i10: done means observed ------------------------------------


def test_lookup_by_key__found_and_not_found(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, "Looked up", "By its operation key.")
    receipt = publish(api, sent).json()

    found = api.get(PUBLICATIONS, params={"operation_key": sent["operation_key"]})
    missing = api.get(PUBLICATIONS, params={"operation_key": f"publish:{new_brief()}:revision-1"})
    near_miss = api.get(PUBLICATIONS, params={"operation_key": sent["operation_key"].upper()})
    no_key = api.get(PUBLICATIONS)

    assert found.status_code == 200, found.text
    assert without_modified(found.json()) == {
        **receipt,
        "live": live("Looked up", "By its operation key.", 1),
        **NOT_RETRACTED,
    }
    for response in (missing, near_miss):
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "not_found"
    assert no_key.status_code == 400


def test_done_means_observed__read_back_shows_stored_hash_and_current_post(wordpress, api):
    brief = new_brief()
    one = publication(brief, 1, "First title", "First body.")
    two = publication(brief, 2, "Second title", "Second body.")
    first = publish(api, one).json()
    second = publish(api, two).json()

    read_first = api.get(f"{PUBLICATIONS}/{first['id']}")
    read_second = api.get(f"{PUBLICATIONS}/{second['id']}")

    assert read_first.status_code == 200, read_first.text
    # Both rows report the brief's one post: the older row shows the newer revision live.
    assert without_modified(read_first.json()) == {
        **first,
        "live": live("Second title", "Second body.", 2),
        "payload": one["payload"],
        "post": {"title": "Second title", "content": "Second body.", "status": "publish"},
        **NOT_RETRACTED,
    }
    assert without_modified(read_second.json()) == {
        **second,
        "live": live("Second title", "Second body.", 2),
        "payload": two["payload"],
        "post": {"title": "Second title", "content": "Second body.", "status": "publish"},
        **NOT_RETRACTED,
    }
    for unknown in ("999999999", "pub-1", "0"):
        response = api.get(f"{PUBLICATIONS}/{unknown}")
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "not_found"


def test_done_means_observed__permalink_serves_the_article(wordpress, api):
    brief = new_brief()
    title, body = f"Dockers & cranes {brief}: strike ends at dawn", "The harbour reopens at six."
    receipt = publish(api, publication(brief, 1, title, body)).json()

    page = httpx.get(receipt["permalink"], timeout=30)  # public: no credentials

    assert page.status_code == 200, page.text[:500]
    assert "&amp;" in page.text or "&#038;" in page.text  # the title's & arrives escaped
    text = page_text(page.text)
    assert title in text
    assert body in text


def test_status__reports_plugin_version_4(wordpress, api):
    response = api.get("/wp-json/galley/v1/status")

    assert response.status_code == 200, response.text
    assert response.json() == {"plugin": "galley-publishing", "version": "4", "fence": True, "user": wordpress.user}


def test_drift__post_edited_in_wp_admin__live_hash_reports_the_edit_payload_hash_what_galley_sent(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, "Harbour strike", "Dockers walked out at dawn.")
    receipt = publish(api, sent).json()
    assert without_modified(api.get(f"{PUBLICATIONS}/{receipt['id']}").json())["live"] == live(
        "Harbour strike", "Dockers walked out at dawn.", 1
    )
    assert live("Harbour strike", "Dockers walked out at dawn.", 1)["hash"] == sent["payload_hash"]

    edit_post_as_admin(wordpress, receipt["post_id"], content="Dockers walked out at noon.")  # title kept
    edited = without_modified(api.get(f"{PUBLICATIONS}/{receipt['id']}").json())
    edit_post_as_admin(wordpress, receipt["post_id"], excerpt="An excerpt Galley never approved.")
    with_excerpt = without_modified(api.get(PUBLICATIONS, params={"operation_key": sent["operation_key"]}).json())

    assert edited["payload_hash"] == with_excerpt["payload_hash"] == sent["payload_hash"]  # what Galley sent
    assert edited["live"] == live("Harbour strike", "Dockers walked out at noon.", 1)
    assert with_excerpt["live"] == live(
        "Harbour strike", "Dockers walked out at noon.", 1, excerpt="An excerpt Galley never approved."
    )


def test_republish__current_revision_same_hash_own_key__restores_the_post_older_or_other_refused(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, "Harbour strike", "Dockers walked out at dawn.")
    receipt = publish(api, sent).json()
    edit_post_as_admin(wordpress, receipt["post_id"], content="Dockers walked out at noon.", excerpt="Edited.")
    republish = {**sent, "operation_key": f"republish:{brief}:revision-1:conflict-1", "republish": True}

    replay_of_the_original = publish(api, sent)
    restored = publish(api, republish)
    replayed = publish(api, republish)
    other_content = publish(
        api,
        {
            **publication(brief, 1, "Harbour strike", "Other text.", key=f"republish:{brief}:revision-1:conflict-2"),
            "republish": True,
        },
    )
    plain_same_revision = publish(api, {**sent, "operation_key": f"republish:{brief}:revision-1:conflict-3"})

    assert replay_of_the_original.status_code == 200  # the approved key's record replays: it changes nothing
    assert (restored.status_code, replayed.status_code) == (201, 200), restored.text
    assert replayed.json() == restored.json()
    assert (restored.json()["revision"], restored.json()["post_id"]) == (1, receipt["post_id"])
    read = without_modified(api.get(f"{PUBLICATIONS}/{receipt['id']}").json())
    assert read["live"] == live("Harbour strike", "Dockers walked out at dawn.", 1)  # excerpt cleared too
    for refused in (other_content, plain_same_revision):
        assert refused.status_code == 409, refused.text
        assert (refused.json()["error"], refused.json()["current_revision"]) == ("stale_revision", 1)
    assert galley_posts(wordpress, brief) == [str(receipt["post_id"])]
    assert publication_rows(wordpress, brief_id=brief) == 2


def test_republish__post_trashed_in_wp_admin__restored_published_at_the_same_permalink(wordpress, api):
    brief = new_brief()
    sent = publication(brief, 1, f"Harbour strike {brief}", "Dockers walked out at dawn.")
    receipt = publish(api, sent).json()
    trashed = httpx.delete(wordpress.rest(f"wp/v2/posts/{receipt['post_id']}"), auth=wordpress.auth, timeout=60)
    assert trashed.status_code == 200, trashed.text
    assert without_modified(api.get(f"{PUBLICATIONS}/{receipt['id']}").json())["live"]["status"] == "trash"

    restored = publish(api, {**sent, "operation_key": f"republish:{brief}:revision-1:conflict-1", "republish": True})

    assert restored.status_code == 201, restored.text
    read = without_modified(api.get(f"{PUBLICATIONS}/{receipt['id']}").json())
    assert read["live"] == live(sent["payload"]["title"], sent["payload"]["body"], 1)
    assert (read["permalink"], restored.json()["permalink"]) == (receipt["permalink"], receipt["permalink"])
    assert httpx.get(receipt["permalink"], timeout=30).status_code == 200


# --- structured stories (plugin version 3) --------------------------------------------------------

STORY = {
    "title": "Dockers walk out over pay",
    "standfirst": "Ships wait offshore as the union and the port prepare for talks.",
    "body": "Dockers walked out at **dawn**.\n\nShips wait <script>alert(1)</script>.",
    "byline": "Ana Lopes",
    "section": "Harbour news",
    "tags": ["port", "strike pay"],
}


def story_publication(brief_id: str, revision: int, story: dict[str, Any]) -> dict[str, Any]:
    """A publication as Galley sends one: the payload, its hash, and the story as Galley renders it."""
    payload = clean_story(story)
    sent = publication(brief_id, revision, "-", "-")
    return {**sent, "payload": payload, "payload_hash": payload_hash(payload), "rendered": render_story(payload)}


def terms_of(wp: WordPress, post_id: int, taxonomy: str) -> list[str]:
    return sorted(
        wp.column(
            "SELECT t.name FROM wp_terms t JOIN wp_term_taxonomy tt ON tt.term_id = t.term_id"
            " JOIN wp_term_relationships r ON r.term_taxonomy_id = tt.term_taxonomy_id"
            f" WHERE r.object_id = {int(post_id)} AND tt.taxonomy = {wp.quote(taxonomy)}"
        )
    )


def test_story__post_has_headline_rendered_content_standfirst_excerpt_tags_category_byline(wordpress, api):
    brief = new_brief()
    sent = story_publication(brief, 1, STORY)

    response = publish(api, sent)

    assert response.status_code == 201, response.text
    receipt = response.json()
    post = raw_post(api, receipt["post_id"])
    rendered = sent["rendered"]
    assert (post["title"]["raw"], post["content"]["raw"], post["excerpt"]["raw"]) == (
        STORY["title"],
        rendered["content_html"],
        STORY["standfirst"],
    )
    assert "<strong>dawn</strong>" in post["content"]["raw"] and "<script" not in post["content"]["raw"]
    assert terms_of(wordpress, receipt["post_id"], "post_tag") == ["port", "strike pay"]
    assert terms_of(wordpress, receipt["post_id"], "category") == ["Harbour news"]
    assert post["meta"]["galley_byline"] == "Ana Lopes"
    read_back = api.get(f"{PUBLICATIONS}/{receipt['id']}").json()
    assert read_back["live"]["hash"] == sent["payload_hash"]  # exactly what the publication wrote
    page = httpx.get(receipt["permalink"], timeout=30)
    assert page.status_code == 200
    assert '<p class="galley-byline">By Ana Lopes</p>' in page.text and "<script>alert(1)" not in page.text
    text = page_text(page.text)
    assert STORY["title"] in text and "Dockers walked out at" in text and "dawn" in text


def test_story__newer_revision_without_section_or_tags__post_loses_them_default_category(wordpress, api):
    brief = new_brief()
    first = publish(api, story_publication(brief, 1, STORY)).json()
    plain = {"title": "Harbour reopens", "body": "Ships are moving again."}

    second = publish(api, story_publication(brief, 2, plain))

    assert second.status_code == 201, second.text
    post = raw_post(api, first["post_id"])
    assert (post["content"]["raw"], post["excerpt"]["raw"], post["meta"]["galley_byline"]) == (
        "<p>Ships are moving again.</p>",
        "",
        "",
    )
    assert terms_of(wordpress, first["post_id"], "post_tag") == []
    assert terms_of(wordpress, first["post_id"], "category") == ["Uncategorized"]


def test_story__edited_in_wp_admin__drift_with_the_sites_content_as_the_live_hash(wordpress, api):
    brief = new_brief()
    sent = story_publication(brief, 1, STORY)
    receipt = publish(api, sent).json()

    edit_post_as_admin(wordpress, receipt["post_id"], content="<p>Dockers walked out at noon.</p>")

    reported = api.get(f"{PUBLICATIONS}/{receipt['id']}").json()
    assert reported["payload_hash"] == sent["payload_hash"]
    expected = {"title": STORY["title"], "body": "<p>Dockers walked out at noon.</p>", "excerpt": STORY["standfirst"]}
    assert reported["live"]["hash"] == payload_hash(expected) != sent["payload_hash"]


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"rendered": {**render_story(STORY), "title": "Another headline"}}, "rendered.title must equal payload.title"),
        ({"rendered": "<p>x</p>"}, "rendered must be a JSON object"),
        ({"rendered": {**render_story(STORY), "tags": "port"}}, "rendered.tags must be a list of strings"),
    ],
    ids=["other-title", "not-an-object", "tags-not-a-list"],
)
def test_story__bad_rendered__400_nothing_stored(wordpress, api, change, detail):
    brief = new_brief()
    sent = {**story_publication(brief, 1, STORY), **change}

    response = publish(api, sent)

    assert response.status_code == 400, response.text
    assert detail in response.json()["detail"]
    assert galley_posts(wordpress, brief) == []


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        ({"title": "T", "body": "B", "summary": "x"}, "payload has unknown fields: summary"),
        ({"title": "T", "body": "B", "tags": "port"}, "payload.tags must be a list of strings"),
        ({"title": "T", "body": "B", "byline": 5}, "payload.byline must be a string"),
        ({"title": "T"}, "payload.body is required"),
    ],
)
def test_story__bad_payload_field__400_nothing_stored(wordpress, api, payload, detail):
    brief = new_brief()
    sent = {**publication(brief, 1, "-", "-"), "payload": payload, "payload_hash": payload_hash(payload)}

    response = publish(api, sent)

    assert response.status_code == 400, response.text
    assert detail in response.json()["detail"]
    assert galley_posts(wordpress, brief) == []
