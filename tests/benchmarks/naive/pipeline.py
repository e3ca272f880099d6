"""The naive task: publish one revision to the reference target, read it back, fetch its permalink, save a
row through the ORM. It runs inside a django-q2 worker or a Procrastinate worker; either retries it as
its queue does (at least once), nothing more.

Written as a user would, against docs/target-protocol.md: httpx, one client per process as httpx advises
(so a task's three calls share one kept-alive connection, as Galley's do, and no task pays for a new
client and its TLS context), raise_for_status on every answer. It sends the Idempotency-Key the
target requires (a key derived from the brief and revision, which is what a user copies from the protocol)
but nothing of what Galley adds around it: no look-up by key after an ambiguous failure, no lease or
fencing token, no rendered HTML (so the target builds its page from the payload, slightly less work for
it than Galley's requests), no transaction bookkeeping, no audit. Its checks are those of a careful user:
the read-back holds the hash sent, and the page shows the title.

The target's address and token come from BENCH_NAIVE_TARGET_URL and BENCH_NAIVE_TARGET_TOKEN.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import httpx

TIMEOUT_SECONDS = 10.0
_client: httpx.Client | None = None


def client() -> httpx.Client:
    """This process's client, made at its first task (after the worker process was forked or started)."""
    global _client
    if _client is None:
        _client = httpx.Client(
            base_url=os.environ["BENCH_NAIVE_TARGET_URL"],
            headers={"Authorization": f"Bearer {os.environ['BENCH_NAIVE_TARGET_TOKEN']}"},
            timeout=TIMEOUT_SECONDS,
        )
    return _client


def job(brief_id: str) -> dict[str, Any]:
    """The arguments of one task: revision 1 of `brief_id`, a payload shaped like the bench's briefs
    (bulk.insert_briefs)."""
    body = f"Revision 1 of {brief_id}. " + "Every revision says more. " * 12
    return {"brief_id": brief_id, "revision": 1, "payload": {"body": body, "title": f"Article {brief_id}, revision 1"}}


def publish(brief_id: str, revision: int, payload: dict[str, Any]) -> None:
    from tests.benchmarks.naive.models import NaivePublication

    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    payload_hash = hashlib.sha256(text.encode()).hexdigest()
    key = f"publish:{brief_id}:revision-{revision}"
    target = client()
    sent = target.post(
        "/v1/publications",
        headers={"Idempotency-Key": key},
        json={
            "operation_key": key,
            "brief_id": brief_id,
            "revision": revision,
            "payload_hash": payload_hash,
            "payload": payload,
        },
    )
    sent.raise_for_status()
    receipt = sent.json()
    read = target.get(f"/v1/publications/{receipt['id']}")
    read.raise_for_status()
    if read.json()["payload_hash"] != payload_hash:
        raise RuntimeError(f"{brief_id}: the target holds another payload")
    page = target.get(receipt["permalink"])
    page.raise_for_status()
    if payload["title"] not in page.text:
        raise RuntimeError(f"{brief_id}: the page does not show the title")
    NaivePublication.objects.create(
        brief_id=brief_id,
        revision=revision,
        payload_hash=payload_hash,
        external_id=str(receipt["id"]),
        permalink=receipt["permalink"],
    )
