"""The WordPress plugin's retraction (POST /wp-json/galley/v1/publications/{id}/retraction) against a real
WordPress (tests/wordpress.py), over real HTTP with an application password: docs/wordpress.md#retraction.

Each test uses its own brief and keys, so they share one site with the plugin's other tests.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from publishing.hashing import payload_hash
from tests.publishing.clients.test_wordpress_plugin import (
    PUBLICATIONS,
    galley_posts,
    new_brief,
    publication,
    publish,
    raw_post,
)
from tests.wordpress import WordPress

pytestmark = pytest.mark.wordpress

FAIL_BEFORE_COMMIT = "__galley_test_fail_before_commit__"
ISO_UTC = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\Z")


@pytest.fixture
def api(wordpress: WordPress) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=wordpress.url, auth=wordpress.auth, timeout=60) as client:
        yield client


def published(api: httpx.Client, brief_id: str, revision: int, *, title: str | None = None) -> dict[str, Any]:
    """The receipt of a first publication of this revision (asserted to be one)."""
    response = publish(api, publication(brief_id, revision, title or f"{brief_id} revision {revision}", "Text."))
    assert response.status_code == 201, response.text
    return response.json()


def retraction(brief_id: str, revision: int, *, key: str | None = None, reason: str = "Legal asked.") -> dict[str, Any]:
    return {
        "operation_key": key or f"retract:{brief_id}:revision-{revision}",
        "brief_id": brief_id,
        "revision": revision,
        "reason": reason,
    }


def retract(
    client: httpx.Client, publication_id: str, body: Any, *, idempotency_key: str | None = ""
) -> httpx.Response:
    """POST a retraction; the Idempotency-Key is the body's operation key unless given (None: no header)."""
    headers = {"Content-Type": "application/json"}
    if idempotency_key == "":
        idempotency_key = body["operation_key"]
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return client.post(
        f"{PUBLICATIONS}/{publication_id}/retraction", content=json.dumps(body).encode("utf-8"), headers=headers
    )


def retraction_rows(wp: WordPress, brief_id: str) -> int:
    return int(wp.scalar(f"SELECT COUNT(*) FROM wp_galley_retractions WHERE brief_id = {wp.quote(brief_id)}"))


def post_status(wp: WordPress, post_id: int) -> str:
    return wp.scalar(f"SELECT post_status FROM wp_posts WHERE ID = {int(post_id)}")


def read_back(api: httpx.Client, publication_id: str) -> dict[str, Any]:
    response = api.get(f"{PUBLICATIONS}/{publication_id}")
    assert response.status_code == 200, response.text
    return response.json()


# --- docs/invariants.md#i16: a retraction takes the brief down, and says so ----------------------


def test_i16_retraction__first__201_post_leaves_publication_text_kept_key_reserved(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1, title=f"  Harbour strike {brief}  ")
    sent = retraction(brief, 1)

    response = retract(api, receipt["id"], sent)

    assert response.status_code == 201, response.text
    body = response.json()
    assert ISO_UTC.match(body.pop("retracted_at")), response.text
    assert body == {"id": receipt["id"], "operation_key": sent["operation_key"], "revision": 1, "retracted": True}
    assert post_status(wordpress, receipt["post_id"]) == "draft"
    post = raw_post(api, receipt["post_id"])
    assert (post["title"]["raw"], post["content"]["raw"]) == (f"  Harbour strike {brief}  ", "Text.")
    assert galley_posts(wordpress, brief) == [str(receipt["post_id"])]
    # The request is known by the canonical hash of what it asks (docs/wordpress.md#retraction).
    stored = wordpress.sql(
        "SELECT request_hash, publication_id, revision, reason, prior_status FROM wp_galley_retractions"
        f" WHERE operation_key = {wordpress.quote(sent['operation_key'])}"
    )
    asked = {"brief_id": brief, "publication_id": receipt["id"], "reason": "Legal asked.", "revision": 1}
    assert stored == [[payload_hash(asked), receipt["id"], "1", "Legal asked.", "publish"]]


def test_i16_retraction__read_back_and_lookup_of_every_publication_of_the_brief_say_retracted(wordpress, api):
    brief = new_brief()
    first, second = published(api, brief, 1), published(api, brief, 2)
    before = read_back(api, first["id"])
    assert (before["retracted"], before["retracted_at"]) == (False, None)

    retracted = retract(api, second["id"], retraction(brief, 2)).json()

    for publication_id in (first["id"], second["id"]):
        read = read_back(api, publication_id)
        assert (read["retracted"], read["retracted_at"]) == (True, retracted["retracted_at"])
        assert read["live"]["status"] == read["post"]["status"] == "draft"
        # The address stays the one published (not WordPress's ?p= of a draft): it answers 410 there.
        assert read["permalink"] == first["permalink"]
    found = api.get(PUBLICATIONS, params={"operation_key": first["operation_key"]}).json()
    assert (found["retracted"], found["retracted_at"]) == (True, retracted["retracted_at"])


def test_i16_retraction__permalink_gone_for_anonymous_readers_no_redirect_to_a_similar_post(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1, title=f"Harbour strike {brief}")
    # WordPress would send a reader of a missing address to a published post whose name starts alike.
    similar = published(api, new_brief(), 1, title=f"Harbour strike {brief} continues")
    assert similar["permalink"].startswith(receipt["permalink"].rstrip("/"))

    assert retract(api, receipt["id"], retraction(brief, 1)).status_code == 201

    for address in (receipt["permalink"], f"{wordpress.url}/?p={receipt['post_id']}"):
        page = httpx.get(address, timeout=30)  # no credentials: a reader
        assert page.status_code == 410, (address, page.status_code, page.headers.get("location"))
    assert httpx.get(similar["permalink"], timeout=30).status_code == 200


# --- docs/invariants.md#i1: one application per retraction key ----------------------------------


def test_i1_retraction__replay__200_same_body_one_application(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1)
    sent = retraction(brief, 1)
    first = retract(api, receipt["id"], sent)
    assert first.status_code == 201, first.text

    again = retract(api, receipt["id"], sent)

    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert retraction_rows(wordpress, brief) == 1


def test_i1_retraction__concurrent_duplicates__one_application_the_rest_replay_it(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1)
    sent = retraction(brief, 1)
    barrier = threading.Barrier(10)

    def send(_: int) -> httpx.Response:
        with httpx.Client(base_url=wordpress.url, auth=wordpress.auth, timeout=60) as client:
            barrier.wait(timeout=30)
            return retract(client, receipt["id"], sent)

    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(pool.map(send, range(10)))

    # A duplicate waits for the one being applied and replays it: no 409 in_progress is needed.
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] * 9 + [201], [(r.status_code, r.text[:200]) for r in responses]
    assert len({json.dumps(response.json(), sort_keys=True) for response in responses}) == 1
    assert retraction_rows(wordpress, brief) == 1
    assert post_status(wordpress, receipt["post_id"]) == "draft"


# --- docs/invariants.md#i2: the same key asking something else is loud ---------------------------


def test_i2_retraction__same_key_other_request__422_idempotency_mismatch_nothing_changes(wordpress, api):
    brief = new_brief()
    first, second = published(api, brief, 1), published(api, brief, 2)
    sent = retraction(brief, 2)
    applied = retract(api, second["id"], sent).json()

    other_reason = retract(api, second["id"], {**sent, "reason": "Another reason."})
    other_publication = retract(api, first["id"], sent)

    for refused in (other_reason, other_publication):
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == "idempotency_mismatch"
    assert retraction_rows(wordpress, brief) == 1
    assert read_back(api, second["id"])["retracted_at"] == applied["retracted_at"]


# --- docs/invariants.md#i4: the revision fence ---------------------------------------------------


def test_i4_retraction__older_revision_than_the_site_holds__409_stale_nothing_reserved(wordpress, api):
    brief = new_brief()
    first, second = published(api, brief, 1), published(api, brief, 2)
    key = f"retract:{brief}"

    stale = retract(api, first["id"], retraction(brief, 1, key=key))

    assert stale.status_code == 409, stale.text
    assert (stale.json()["error"], stale.json()["current_revision"]) == ("stale_revision", 2)
    assert post_status(wordpress, second["post_id"]) == "publish"
    assert retraction_rows(wordpress, brief) == 0
    assert read_back(api, second["id"])["retracted"] is False
    # Galley decides about revision 2; the key was not reserved by the refusal.
    assert retract(api, second["id"], retraction(brief, 2, key=key)).status_code == 201


def test_i4_retraction__retracted_and_older_revisions_refused_a_newer_one_publishes_again(wordpress, api):
    brief = new_brief()
    first = published(api, brief, 1, title=f"Harbour strike {brief}")
    assert retract(api, first["id"], retraction(brief, 1)).status_code == 201

    same = publish(api, publication(brief, 1, "Revision one again", "Another key.", key=f"again:{brief}"))
    republish = publish(
        api,
        {
            **publication(brief, 1, f"Harbour strike {brief}", "Text.", key=f"republish:{brief}:revision-1:c-1"),
            "republish": True,
        },
    )
    for refused in (same, republish):
        assert refused.status_code == 409, refused.text
        assert (refused.json()["error"], refused.json()["current_revision"]) == ("stale_revision", 1)
    assert post_status(wordpress, first["post_id"]) == "draft"

    newer = publish(api, publication(brief, 2, f"Harbour strike {brief}: corrected", "The corrected text."))

    assert newer.status_code == 201, newer.text
    assert (newer.json()["post_id"], newer.json()["permalink"]) == (first["post_id"], first["permalink"])
    assert post_status(wordpress, first["post_id"]) == "publish"
    for publication_id in (first["id"], newer.json()["id"]):
        read = read_back(api, publication_id)
        assert (read["retracted"], read["retracted_at"]) == (False, None)
    assert httpx.get(first["permalink"], timeout=30).status_code == 200


def test_i4_retraction__of_a_revision_the_site_never_got__fence_rises_to_it(wordpress, api):
    brief = new_brief()
    first = published(api, brief, 1)

    response = retract(api, first["id"], retraction(brief, 3))
    late = publish(api, publication(brief, 3, "Revision three", "Delayed in the network."))
    newer = publish(api, publication(brief, 4, "Revision four", "Approved after the retraction."))

    assert response.status_code == 201, response.text
    assert late.status_code == 409, late.text
    assert late.json()["current_revision"] == 3
    assert newer.status_code == 201, newer.text


def test_i4_retraction__racing_a_newer_revisions_publish__the_newer_revision_stays_published(wordpress, api):
    """Whichever takes the brief's lock first, the newer revision ends published and not retracted: a
    retraction after it is refused as stale, one before it is undone by it."""
    briefs = [new_brief() for _ in range(4)]
    firsts = {brief: published(api, brief, 1) for brief in briefs}
    barrier = threading.Barrier(2 * len(briefs))

    def send(job: tuple[str, str]) -> httpx.Response:
        brief, what = job
        with httpx.Client(base_url=wordpress.url, auth=wordpress.auth, timeout=60) as client:
            barrier.wait(timeout=30)
            if what == "retract":
                return retract(client, firsts[brief]["id"], retraction(brief, 1))
            return publish(client, publication(brief, 2, f"{brief} revision 2", "The newer text."))

    jobs = [(brief, what) for brief in briefs for what in ("retract", "publish")]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        answers = dict(zip(jobs, pool.map(send, jobs), strict=True))

    for brief in briefs:
        retracted, newer = answers[(brief, "retract")], answers[(brief, "publish")]
        assert newer.status_code == 201, newer.text
        assert retracted.status_code in (201, 409), retracted.text
        if retracted.status_code == 409:
            assert (retracted.json()["error"], retracted.json()["current_revision"]) == ("stale_revision", 2)
        assert post_status(wordpress, firsts[brief]["post_id"]) == "publish"
        assert read_back(api, newer.json()["id"])["retracted"] is False


# --- docs/invariants.md#i5: the post and the key in one transaction ------------------------------


def test_i5_retraction__failure_before_commit__500_post_still_published_key_not_reserved(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1)
    key = f"retract:{brief}"

    failed = retract(api, receipt["id"], retraction(brief, 1, key=key, reason=FAIL_BEFORE_COMMIT))

    assert failed.status_code == 500, failed.text
    assert failed.json()["error"] == "internal"
    # The status change, the key's row and the fence roll back together.
    assert post_status(wordpress, receipt["post_id"]) == "publish"
    assert retraction_rows(wordpress, brief) == 0
    assert read_back(api, receipt["id"])["retracted"] is False
    assert httpx.get(receipt["permalink"], timeout=30).status_code == 200
    assert retract(api, receipt["id"], retraction(brief, 1, key=key)).status_code == 201


# --- refusals before anything is written --------------------------------------------------------


def test_retraction__unknown_publication__404_other_brief__400(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1)

    unknown = [retract(api, missing, retraction(brief, 1)) for missing in ("999999999", "pub-1", "0")]
    other_brief = retract(api, receipt["id"], retraction(new_brief(), 1))

    for response in unknown:
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "not_found"
    assert other_brief.status_code == 400, other_brief.text
    assert retraction_rows(wordpress, brief) == 0
    assert post_status(wordpress, receipt["post_id"]) == "publish"


INVALID = {
    "no Idempotency-Key": lambda b: (b, None),
    "Idempotency-Key differs": lambda b: (b, "retract:another"),
    "empty reason": lambda b: ({**b, "reason": " "}, ""),
    "reason not a string": lambda b: ({**b, "reason": 5}, ""),
    "no reason": lambda b: ({k: v for k, v in b.items() if k != "reason"}, ""),
    "revision zero": lambda b: ({**b, "revision": 0}, ""),
    "unknown field": lambda b: ({**b, "payload_hash": "0" * 64}, ""),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_retraction__invalid_request__400_nothing_changes(wordpress, api, case):
    brief = new_brief()
    receipt = published(api, brief, 1)
    body, key = INVALID[case](retraction(brief, 1))

    response = retract(api, receipt["id"], body, idempotency_key=key)

    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid"
    assert retraction_rows(wordpress, brief) == 0
    assert post_status(wordpress, receipt["post_id"]) == "publish"


def test_retraction__anonymous_401_without_publish_posts_403(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1)
    reader = httpx.BasicAuth(wordpress.subscriber, wordpress.subscriber_password)

    for auth, status in ((None, 401), (reader, 403)):
        with httpx.Client(base_url=wordpress.url, auth=auth, timeout=30) as client:
            response = retract(client, receipt["id"], retraction(brief, 1))
        assert response.status_code == status, response.text
    assert retraction_rows(wordpress, brief) == 0
    assert post_status(wordpress, receipt["post_id"]) == "publish"


def test_retraction__site_with_the_version_3_tables__retractions_table_added_on_first_use(wordpress, api):
    brief = new_brief()
    receipt = published(api, brief, 1)
    # A site upgraded from version 3: its schema option says 1 and it has no retractions table.
    wordpress.sql(
        "DROP TABLE wp_galley_retractions;"
        " UPDATE wp_options SET option_value = '1' WHERE option_name = 'galley_publishing_schema'"
    )

    response = retract(api, receipt["id"], retraction(brief, 1))

    assert response.status_code == 201, response.text
    assert retraction_rows(wordpress, brief) == 1
    assert wordpress.scalar("SELECT option_value FROM wp_options WHERE option_name = 'galley_publishing_schema'") == "2"
