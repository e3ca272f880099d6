"""Structured stories through the pipeline: the AI fills the standfirst and the Markdown body, the
publish request carries the rendered story beside the hashed payload, and the reference target's page
shows headline, standfirst, byline and the rendered body — with nothing hostile reaching it as markup,
whoever sent it. A title-and-body revision still publishes and verifies."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import httpx
import pytest
from django.db import transaction

from galley.reference_target import ReferenceTarget
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision, check_use_suggestion
from publishing.clients import ai as ai_providers
from publishing.clients.target import TargetClient
from publishing.hashing import payload_hash
from publishing.identities import PUBLISH, SUMMARY_STEP, VERIFY
from publishing.models import Brief, Publication, Revision, StepArtifact, SummaryRun
from publishing.story import clean_story, render_story
from publishing.summary_rules import SuggestionTake
from tests.publishing.handlers.test_superseded_applications import approve
from tests.publishing.test_story import HOSTILE, Elements, assert_harmless, hostile_story
from tests.reference_target import TOKEN
from workers.drain import drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

SOURCE = (
    "Dockers at the port walked out at dawn on Monday. The union says pay has not kept up with prices. "
    "Ships are waiting offshore. The port authority called for talks on Tuesday. Shops report empty shelves."
)
STORY = {
    "title": "Dockers walk out over pay",
    "standfirst": "Ships wait offshore as the union and the port prepare for talks.",
    "body": "Dockers walked out at **dawn** on Monday.\n\n- Ships wait offshore\n- Shops run short",
    "byline": "Ana Lopes",
    "section": "Business",
    "tags": ["port", "strike"],
}
# The page's own frame around the article; the article itself may hold only the story's safe tags.
PAGE_TAGS = {"html", "head", "meta", "title", "body", "article", "div"}


def write(brief: Brief, story: dict[str, Any], *, by: Any) -> Revision:
    latest = brief.revisions.order_by("-number").first()
    with transaction.atomic(durable=True):
        revision, _created = check_create_revision(
            brief.public_id, base_number=latest.number if latest else 0, acting_user=by, **story
        )
    return revision


def approve_and_publish(revision: Revision, *, by: Any) -> None:
    approve(revision, by=by)
    assert drain(worker_id="w-story", kinds=[PUBLISH, VERIFY], time_budget=30, idle_wait=0.5) == {"succeeded": 1}


def stored(target: ReferenceTarget, revision: Revision) -> sqlite3.Row:
    with target.store.connect() as conn:
        row = conn.execute("SELECT * FROM publications WHERE payload_hash = ?", (revision.payload_hash,)).fetchone()
    assert row is not None
    return row


def page(url: str) -> str:
    response = httpx.get(url, timeout=5)
    assert response.status_code == 200
    return response.text


def article_of(html: str) -> str:
    return html.split("<article>", 1)[1].split("</article>", 1)[0]


def publish_directly(target: ReferenceTarget, payload: dict[str, Any], rendered: dict[str, Any] | None) -> str:
    """A publication sent as any client of the protocol may send it; its permalink."""
    with TargetClient(base_url=target.url, token=TOKEN, timeout=5) as client:
        receipt, _applied = client.publish(
            operation_key=f"publish:brief-900:revision-1:{payload_hash(payload)[:8]}",
            brief_id=f"brief-{payload_hash(payload)[:8]}",
            revision=1,
            payload_hash=payload_hash(payload),
            payload=payload,
            rendered=rendered,
        )
    return receipt.permalink


# --- the AI fills the story ----------------------------------------------------------------------


def test_ai_suggestion__fills_the_standfirst_and_the_markdown_body__the_editors_byline_and_tags_stay(
    editor, monkeypatch
):
    monkeypatch.setattr(ai_providers, "provider_from_settings", ai_providers.OfflineProvider)
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material=SOURCE, acting_user=editor)
    # The editor writes revision 1 before the run ends: the run then only suggests.
    mine = write(brief, {**STORY, "standfirst": "", "body": "My own notes."}, by=editor)
    drain(worker_id="w-ai", kinds=[SUMMARY_STEP], time_budget=30, idle_wait=0.3)
    run = SummaryRun.objects.get(brief=brief)
    artifacts = {a.step: a.content.get("text") for a in StepArtifact.objects.filter(brief=brief)}
    assert (run.status, run.suggestion) == ("completed", True)
    assert brief.revisions.get() == mine
    assert artifacts["standfirst"] and artifacts["standfirst"] in artifacts["draft"]

    with transaction.atomic(durable=True):
        taken, created = check_use_suggestion(
            brief.public_id, run_number=run.number, take=SuggestionTake.BOTH, acting_user=editor
        )

    assert created and taken.author == editor
    assert taken.payload == clean_story(
        {
            **STORY,
            "title": artifacts["headline"],
            "standfirst": artifacts["standfirst"],
            "body": artifacts["draft"],
        }
    )
    assert taken.payload_hash == payload_hash(taken.payload)


# --- targets receive the rendered story ------------------------------------------------------------


def test_publish__request_carries_the_rendered_story__page_shows_standfirst_byline_and_body__verified(
    target, brief, editor, approver
):
    revision = write(brief, STORY, by=editor)

    approve_and_publish(revision, by=approver)

    row = stored(target, revision)
    assert json.loads(row["payload"]) == revision.payload
    assert row["payload_hash"] == revision.payload_hash == payload_hash(revision.payload)
    assert json.loads(row["rendered"]) == render_story(revision.payload)
    article = article_of(page(row["permalink"]))
    assert "<h1>Dockers walk out over pay</h1>" in article
    assert '<p class="standfirst">Ships wait offshore as the union and the port prepare for talks.</p>' in article
    assert '<p class="byline">By Ana Lopes</p>' in article
    assert "<p>Dockers walked out at <strong>dawn</strong> on Monday.</p>" in article
    assert "<li>Ships wait offshore</li>" in article
    assert "Business · #port · #strike" in article
    publication = Publication.objects.get(revision=revision)
    assert publication.verified_at is not None


def test_publish__a_title_and_body_revision__still_published_and_verified(target, brief, editor, approver):
    revision = write(
        brief, {"title": "Harbour strike", "body": "Dockers walked out.\n\nThe port is closed."}, by=editor
    )
    assert revision.payload == {"title": "Harbour strike", "body": "Dockers walked out.\n\nThe port is closed."}

    approve_and_publish(revision, by=approver)

    article = article_of(page(stored(target, revision)["permalink"]))
    assert "<h1>Harbour strike</h1>" in article and "<p>The port is closed.</p>" in article
    assert "standfirst" not in article and "byline" not in article
    assert Publication.objects.get(revision=revision).verified_at is not None


@pytest.mark.parametrize("hostile", HOSTILE)
def test_reference_target_page__hostile_markup_in_every_field__shown_as_text_never_as_markup(target, hostile):
    payload = hostile_story(hostile)

    html = page(publish_directly(target, payload, render_story(payload)))

    for tag, _attrs in Elements(html).found:
        assert tag in PAGE_TAGS or tag in {"p", "h1", "a", "img", "strong", "em", "ul", "li"}, html
    assert_harmless(article_of(html).replace('<div class="body">', "").replace("</div>", ""))


def test_reference_target_page__rendered_html_from_the_network__cleaned_again(target):
    """A sender that is not Galley may put anything in rendered.content_html: the target cleans it."""
    payload = {"title": "Harbour strike", "body": "Dockers walked out."}
    forged = {
        **render_story(payload),
        "content_html": '<p onclick="x()">Dockers</p><script>alert(1)</script><a href="javascript:x()">l</a>',
    }

    article = article_of(page(publish_directly(target, payload, forged)))

    assert "<script" not in article and "onclick" not in article and "javascript:" not in article
    assert "Dockers" in article


def test_reference_target__rendered_title_other_than_the_payloads__refused(target):
    payload = {"title": "Harbour strike", "body": "Dockers walked out."}
    body = {
        "operation_key": "publish:brief-901:revision-1",
        "brief_id": "brief-901",
        "revision": 1,
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "rendered": {**render_story(payload), "title": "Something else"},
    }
    response = httpx.post(
        f"{target.url}/v1/publications",
        json=body,
        headers={"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": body["operation_key"]},
        timeout=5,
    )

    assert response.status_code == 400
    assert "rendered.title must equal payload.title" in response.json()["detail"]
    assert target.ledger() == []


def test_reference_target_page__an_older_client_without_rendered__the_page_from_the_payload(target):
    payload = {"title": "Harbour strike", "body": "Dockers *walked* out.\n\n<b>The port</b> is closed."}

    article = article_of(page(publish_directly(target, payload, None)))

    assert article == (
        "\n<h1>Harbour strike</h1>\n<p>Dockers *walked* out.</p>\n<p>&lt;b&gt;The port&lt;/b&gt; is closed.</p>\n"
    )


@pytest.mark.parametrize("with_rendered", [True, False], ids=["rendered", "older-client"])
def test_reference_target_page__a_corrections_note__shown_under_the_headline_as_text(target, with_rendered):
    """docs/editorial.md#corrections: the note is in the hashed payload, and the page shows it, escaped."""
    payload = {"title": "Harbour strike", "body": "Dockers walked out."}
    payload |= {"correction": True, "correction_note": "<b>x</b>"}

    article = article_of(page(publish_directly(target, payload, render_story(payload) if with_rendered else None)))

    assert '<p class="correction">Correction: &lt;b&gt;x&lt;/b&gt;</p>' in article
    assert article.index("<h1>") < article.index('class="correction"') < article.index("Dockers walked out.")
