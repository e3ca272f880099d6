"""The summary pipeline on real PostgreSQL, in the three test shapes of seed 003: canonical
artifact on retry, durable step dependencies, and a crash at each boundary. Test names say
which invariant they guard."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from django.db import transaction
from django.utils.html import escape

from approvals.actions import check_decide_revision
from publishing.actions import summaries
from publishing.actions.briefs import check_create_brief, check_update_source_material
from publishing.actions.revisions import check_create_revision
from publishing.actions.summaries import do_store_artifact
from publishing.clients import ai as ai_providers
from publishing.handlers.summaries import handle_summary_step
from publishing.identities import SUMMARY_STEP, step_identity, step_key
from publishing.models import Brief, StepArtifact, SummaryRun
from publishing.summary_rules import STEPS, Proposal, quality_problems
from workers import registry
from workers.actions.claims import claim_operations, complete_operation
from workers.actions.operator import do_retry_operation_now
from workers.attempts import run_operation
from workers.drain import drain
from workers.models import Attempt, AuditEvent, Dependency, Operation

SOURCE = (
    "Dockers at the port walked out at dawn on Monday. The union says pay has not kept up with prices. "
    "Ships are waiting offshore. The port authority called for talks on Tuesday. Shops report empty shelves."
)


class CountingProvider:
    """A provider that answers differently on every call and counts calls per task."""

    name = "counting"

    def __init__(self, answers: dict[str, str] | None = None) -> None:
        self.calls: list[str] = []
        self.answers = answers or {}
        self.counter = itertools.count(1)

    def complete(self, *, system: str, prompt: str, seed: str) -> ai_providers.Completion:
        task = ai_providers.TASK.match(system).group(1)
        self.calls.append(task)
        n = next(self.counter)
        text = (
            self.answers.get(task)
            or {
                "outline": f"- Dockers walked out (call {n}).\n- Ships wait offshore.",
                "draft": f"Dockers walked out at dawn and ships wait offshore (call {n}).",
                "headline": f"Dockers walk out, call {n}",
                "standfirst": f"Ships wait offshore while the union talks pay (call {n}).",
            }[task]
        )
        return ai_providers.Completion(
            text=text, model="counting-1", usage={"prompt_tokens": 10, "completion_tokens": n}
        )


@pytest.fixture
def provider(monkeypatch) -> CountingProvider:
    counting = CountingProvider()
    monkeypatch.setattr(ai_providers, "provider_from_settings", lambda: counting)
    return counting


def create_brief(editor, source: str = SOURCE) -> Brief:
    with transaction.atomic(durable=True):
        return check_create_brief(title="Harbour strike", source_material=source, acting_user=editor)


def run_pipeline() -> None:
    drain(worker_id="test-worker", kinds=[SUMMARY_STEP], time_budget=30, idle_wait=0.3)


def summary_operations(brief: Brief) -> dict[str, Operation]:
    return {op.arguments["step"]: op for op in Operation.objects.filter(kind=SUMMARY_STEP, subject_id=brief.public_id)}


# --- docs/invariants.md#i5: atomic continuation -----------------------------------------------------


@pytest.mark.django_db
def test_atomic_continuation__creating_a_brief_writes_its_first_step_in_the_same_transaction(editor):
    with pytest.raises(RuntimeError), transaction.atomic():
        check_create_brief(title="Gone", source_material=SOURCE, acting_user=editor)
        assert Operation.objects.filter(kind=SUMMARY_STEP).count() == 1
        raise RuntimeError("the request failed after the brief was written")
    assert not Brief.objects.exists()
    assert not Operation.objects.exists()
    brief = check_create_brief(title="Kept", source_material=SOURCE, acting_user=editor)
    run = SummaryRun.objects.get(brief=brief)
    (operation,) = Operation.objects.filter(kind=SUMMARY_STEP)
    assert operation.key == step_key(brief.public_id, run.number, "outline")
    assert operation.payload_hash == brief.source_hash == run.source_hash


@pytest.mark.django_db
def test_atomic_continuation__a_brief_without_source_material_starts_no_run(editor):
    brief = check_create_brief(title="Empty", source_material="", acting_user=editor)
    assert not SummaryRun.objects.filter(brief=brief).exists()
    assert not Operation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_atomic_continuation__pipeline_ends_in_exactly_one_first_revision_ready_for_approval(
    editor, approver, provider
):
    brief = create_brief(editor)
    run_pipeline()
    operations = summary_operations(brief)
    assert {step: op.status for step, op in operations.items()} == dict.fromkeys(STEPS, "succeeded")
    for earlier, later in itertools.pairwise(STEPS):
        assert Dependency.objects.filter(
            operation=operations[later], prerequisite=operations[earlier], requires="success"
        ).exists()
    (revision,) = brief.revisions.all()
    artifacts = {a.step: a.content for a in StepArtifact.objects.filter(brief=brief)}
    # The editor's title, not the AI headline, which is only offered (test_brief_title__...).
    assert revision.payload == {
        "title": "Harbour strike",
        "standfirst": artifacts["standfirst"]["text"],
        "body": artifacts["draft"]["text"],
    }
    assert revision.author.username == summaries.PIPELINE_USERNAME
    assert provider.calls == ["outline", "draft", "headline", "standfirst"]
    assert [a.usage for a in Attempt.objects.filter(operation__in=operations.values()).order_by("started_at")][:3] == [
        {"prompt_tokens": 10, "completion_tokens": n} for n in (1, 2, 3)
    ]
    run = SummaryRun.objects.get(brief=brief)
    assert (run.status, run.revision_id, run.suggestion) == ("completed", revision.id, False)
    assert AuditEvent.objects.filter(event_type="summary.completed", subject_id=brief.public_id).count() == 1
    with transaction.atomic(durable=True):
        _approval, created = check_decide_revision(
            brief.public_id,
            revision_number=1,
            payload_hash=revision.payload_hash,
            decision="approved",
            acting_user=approver,
        )
    assert created


# --- docs/invariants.md#i6: canonical-first ---------------------------------------------------------


@pytest.mark.django_db
def test_canonical_first__storing_twice_returns_the_first_artifact(editor):
    brief = create_brief(editor)
    run = SummaryRun.objects.get(brief=brief)
    first = do_store_artifact(run, "draft", Proposal({"text": "Artifact A"}, "p", "m"))
    second = do_store_artifact(run, "draft", Proposal({"text": "Artifact B"}, "p", "m"))
    assert second.id == first.id
    assert second.content == {"text": "Artifact A"}
    assert StepArtifact.objects.filter(identity=step_identity(brief.public_id, run.source_hash, "draft")).count() == 1


@pytest.mark.django_db(transaction=True)
def test_canonical_first__a_late_local_value_loses_to_the_stored_winner(editor, provider):
    """The draft attempt computes B; meanwhile A was stored under the identity. The headline step
    and the revision are built from A, and B is dropped."""
    other = create_brief(editor)
    (outline_job,) = claim_operations(worker_id="w", limit=1, kinds=[SUMMARY_STEP])
    assert outline_job.arguments["step"] == "outline" and outline_job.subject_id == other.public_id
    assert run_operation(outline_job) == "succeeded"
    (draft_job,) = claim_operations(worker_id="w", limit=1, kinds=[SUMMARY_STEP])
    assert draft_job.arguments["step"] == "draft"
    done = handle_summary_step(draft_job)  # computes its own draft, B
    assert provider.calls == ["outline", "draft"]
    run = SummaryRun.objects.get(brief=other)
    with transaction.atomic(durable=True):
        winner = do_store_artifact(run, "draft", Proposal({"text": "Artifact A: the stored winner."}, "p", "m"))
    complete_operation(draft_job, done, started=time.monotonic())
    run_pipeline()
    other.refresh_from_db()
    draft = StepArtifact.objects.get(identity=step_identity(other.public_id, run.source_hash, "draft"))
    assert draft.id == winner.id and draft.content == {"text": "Artifact A: the stored winner."}
    assert other.revisions.get().body == "Artifact A: the stored winner."


@pytest.mark.django_db(transaction=True)
def test_canonical_first__a_step_whose_artifact_is_stored_makes_no_provider_call(editor, provider):
    brief = create_brief(editor)
    run = SummaryRun.objects.get(brief=brief)
    with transaction.atomic(durable=True):
        do_store_artifact(run, "outline", Proposal({"text": "- Stored outline point."}, "p", "m"))
        do_store_artifact(run, "draft", Proposal({"text": "A stored draft, long enough to pass."}, "p", "m"))
    run_pipeline()
    assert provider.calls == ["headline", "standfirst"]
    assert brief.revisions.get().body == "A stored draft, long enough to pass."


# --- docs/invariants.md#i7: durable dependencies -------------------------------------------------------


@pytest.mark.django_db
def test_durable_dependencies__a_step_is_never_claimed_before_its_prerequisite_succeeded(editor):
    """Seed 003, failure 2: the later step is enqueued first, workers are idle, still not claimed."""
    brief = create_brief(editor)
    run = SummaryRun.objects.get(brief=brief)
    outline = Operation.objects.get(key=step_key(brief.public_id, run.number, "outline"))
    with transaction.atomic():
        draft = summaries._enqueue_step(run, "draft", after=outline)
    Operation.objects.filter(id=draft.id).update(next_attempt_at=outline.next_attempt_at.replace(year=2000))
    jobs = claim_operations(worker_id="idle", limit=10, kinds=[SUMMARY_STEP])
    assert [job.arguments["step"] for job in jobs] == ["outline"]
    assert claim_operations(worker_id="idle", limit=10, kinds=[SUMMARY_STEP]) == []


# --- docs/invariants.md#i5: a crash at each boundary -------------------------------------------------


class SimulatedCrash(BaseException):
    """Not an Exception: nothing in the worker catches it, like a process dying."""


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("boundary", "step"),
    [
        *itertools.product(
            ["after_artifact_insert", "after_next_step_insert", "after_finalize"],
            ["outline", "draft", "headline", "standfirst", "quality_gate"],
        ),
        ("after_claim", "outline"),
    ],
)
def test_atomic_continuation__crash_at_each_boundary_converges_on_one_artifact_per_step_and_one_revision(
    editor, provider, monkeypatch, boundary, step
):
    brief = create_brief(editor)
    crashed = []
    in_flight = threading.local()
    handler = registry.get_handler(SUMMARY_STEP)

    def tracking_handler(job):
        in_flight.step = job.arguments["step"]
        return handler(job)

    def crash(name: str, *, kind: str = "") -> None:
        if name == boundary and not crashed and (boundary == "after_claim" or getattr(in_flight, "step", "") == step):
            crashed.append(name)
            raise SimulatedCrash(name)

    monkeypatch.setitem(registry._handlers, SUMMARY_STEP, tracking_handler)
    monkeypatch.setattr(summaries, "crash_point", crash)
    monkeypatch.setattr("workers.drain.crash_point", crash)  # after_claim
    monkeypatch.setattr("workers.attempts.crash_point", crash)  # after_finalize
    for _ in range(10):
        try:
            run_pipeline()
            break
        except SimulatedCrash:
            # The dead worker's lease expires; a fresh worker takes over.
            Operation.objects.filter(status="running").update(lease_expires_at=brief.created_at.replace(year=2000))
    assert crashed == [boundary]
    run = SummaryRun.objects.get(brief=brief)
    for name in STEPS:
        assert StepArtifact.objects.filter(identity=step_identity(brief.public_id, run.source_hash, name)).count() == 1
    assert brief.revisions.count() == 1
    assert {op.status for op in summary_operations(brief).values()} == {"succeeded"}
    assert run.status == "completed"


# --- quality gate, supersession, suggestions ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_retry_by_failure_kind__quality_gate_failure_is_a_dead_letter_after_one_attempt(editor, monkeypatch):
    leaky = CountingProvider(answers={"draft": "As an AI language model, here is the draft you asked for."})
    monkeypatch.setattr(ai_providers, "provider_from_settings", lambda: leaky)
    brief = create_brief(editor)
    run_pipeline()
    gate = summary_operations(brief)["quality_gate"]
    assert (gate.status, gate.attempts) == ("dead", 1)
    assert gate.last_error_kind == "quality_gate"
    assert "leftover prompt text" in gate.last_error_message
    assert Attempt.objects.filter(operation=gate).count() == 1
    assert not brief.revisions.exists()


@pytest.mark.django_db(transaction=True)
def test_durable_dependencies__editing_the_source_supersedes_the_old_run_which_keeps_its_artifacts(editor, provider):
    brief = create_brief(editor)
    (outline_job,) = claim_operations(worker_id="w", limit=1, kinds=[SUMMARY_STEP])
    assert run_operation(outline_job) == "succeeded"
    with transaction.atomic(durable=True):
        check_update_source_material(brief.public_id, source_material=SOURCE + " Talks resume.", acting_user=editor)
    run_pipeline()
    old, new = SummaryRun.objects.filter(brief=brief).order_by("number")
    assert (old.status, new.status) == ("superseded", "completed")
    old_operations = Operation.objects.filter(key__startswith=f"summary:{brief.public_id}:run-1:")
    assert {op.arguments["step"]: op.status for op in old_operations} == {
        "outline": "succeeded",
        "draft": "superseded",
    }
    assert StepArtifact.objects.filter(brief=brief, source_hash=old.source_hash).count() == 1  # kept for audit
    assert (
        brief.revisions.get().payload["body"]
        == StepArtifact.objects.get(identity=step_identity(brief.public_id, new.source_hash, "draft")).content["text"]
    )


@pytest.mark.django_db(transaction=True)
def test_atomic_continuation__an_editors_revision_is_never_overwritten_the_draft_becomes_a_suggestion(
    editor, provider, client
):
    brief = create_brief(editor)
    with transaction.atomic(durable=True):
        mine, _ = check_create_revision(
            brief.public_id, base_number=0, title="Editor's own", body="Written by hand.", acting_user=editor
        )
    run_pipeline()
    run = SummaryRun.objects.get(brief=brief)
    assert (run.status, run.suggestion, run.revision) == ("completed", True, None)
    assert list(brief.revisions.values_list("number", "author__username")) == [(1, editor.username)]
    client.force_login(editor)
    page = client.get(brief.get_absolute_url())
    assert b'id="suggestion"' in page.content
    response = client.post(f"/briefs/{brief.public_id}/suggestions/{run.number}/use/", {"take": "draft"})
    assert response.status_code == 302
    latest = brief.revisions.order_by("-number").first()
    draft = StepArtifact.objects.get(identity=step_identity(brief.public_id, run.source_hash, "draft"))
    # The editor took the draft and kept their own title.
    assert (latest.number, latest.author, latest.title, latest.body) == (
        2,
        editor,
        "Editor's own",
        draft.content["text"],
    )
    assert mine.number == 1


@pytest.mark.django_db(transaction=True)
def test_brief_page__shows_each_step_its_state_attempts_tokens_and_artifact(editor, provider, client):
    brief = create_brief(editor)
    client.force_login(editor)
    waiting = client.get(brief.get_absolute_url()).content.decode()
    assert 'data-step="outline" data-state="pending"' in waiting
    # The steps' region follows them live (htmx polls its partial); the page never reloads itself.
    assert f'id="brief-live" hx-get="/briefs/{brief.public_id}/live/"' in waiting
    assert 'http-equiv="refresh"' not in waiting
    run_pipeline()
    done = client.get(brief.get_absolute_url()).content.decode()
    for step in STEPS:
        assert f'data-step="{step}" data-state="succeeded"' in done
    assert "counting-1" in done
    assert 'http-equiv="refresh"' not in done


def test_quality_gate__checks_are_deterministic():
    good = {
        "outline": {"text": "- A point."},
        "draft": {"text": "A draft that is long enough."},
        "headline": {"text": "A headline"},
    }
    assert quality_problems(good) == []
    assert quality_problems({**good, "headline": {"text": ""}}) == ["the headline is missing"]
    assert quality_problems({**good, "draft": {"text": "Too short"}}) == [
        "the draft has 9 characters; allowed 20 to 20000"
    ]
    assert quality_problems({**good, "headline": {"text": "one\ntwo"}}) == [
        "the headline must be one line of at most 200 characters"
    ]


@pytest.mark.django_db(transaction=True)
def test_retry_by_failure_kind__operator_retry_of_a_dead_step_resumes_from_the_last_checkpoint(
    editor, operator, monkeypatch
):
    rejecting = CountingProvider()
    answer = rejecting.complete

    def reject_drafts(*, system: str, prompt: str, seed: str) -> ai_providers.Completion:
        if "You write the draft" in system and rejecting.calls.count("draft") == 0:
            rejecting.calls.append("draft")
            raise ai_providers.AIRejected("context too long", status=400)
        return answer(system=system, prompt=prompt, seed=seed)

    monkeypatch.setattr(rejecting, "complete", reject_drafts)
    monkeypatch.setattr(ai_providers, "provider_from_settings", lambda: rejecting)
    brief = create_brief(editor)
    run_pipeline()
    draft = summary_operations(brief)["draft"]
    assert (draft.status, draft.attempts, draft.last_error_kind) == ("dead", 1, "invalid")
    assert not brief.revisions.exists()
    with transaction.atomic(durable=True):
        assert do_retry_operation_now(draft, acting_user=operator)
    run_pipeline()
    assert rejecting.calls == ["outline", "draft", "draft", "headline", "standfirst"]  # the outline was not asked again
    assert brief.revisions.count() == 1
    assert AuditEvent.objects.filter(event_type="operation.retry_now", actor=operator).count() == 1


# --- the brief's title: kept in revision 1, the headline only offered --------------------------------

NEWS_SOURCE = (
    "Residents of the Eastgate district packed the town hall on Tuesday evening and criticised the lack of a "
    "cycling lane along the new ring road that the council opened last month. The council said a consultation "
    "would start in the spring. Cyclists have staged two protest rides since the road opened. A large language "
    "model drafted the council's reply, officials admitted."
)


@pytest.mark.django_db(transaction=True)
def test_brief_title__revision_1_keeps_the_editors_title__the_headline_is_a_suggestion_they_can_use(
    editor, client, monkeypatch
):
    monkeypatch.setattr(ai_providers, "provider_from_settings", ai_providers.OfflineProvider)
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Eastgate cycling row", source_material=NEWS_SOURCE, acting_user=editor)
    run_pipeline()
    run = SummaryRun.objects.get(brief=brief)
    (first,) = brief.revisions.all()
    artifacts = {a.step: a.content for a in StepArtifact.objects.filter(brief=brief)}
    headline = artifacts["headline"]["text"]
    assert (run.status, run.revision_id, run.suggestion) == ("completed", first.id, False)
    assert first.payload == {
        "title": "Eastgate cycling row",
        "standfirst": artifacts["standfirst"]["text"],
        "body": artifacts["draft"]["text"],
    }
    assert headline != first.title

    client.force_login(editor)
    page = client.get(brief.get_absolute_url()).content.decode()
    assert 'id="suggestion"' in page and escape(headline) in page
    assert 'name="take" value="headline"' in page
    url = f"/briefs/{brief.public_id}/suggestions/{run.number}/use/"

    # Taking the draft needs a run that did not write it; a request naming nothing is refused.
    for data, message in [
        ({"take": "draft"}, f"{brief.public_id} has no completed suggestion from summary run {run.number}."),
        ({}, "Choose what to use from the suggestion: the headline as the title, the draft as the body, or both."),
    ]:
        refused = client.post(url, data, follow=True)
        assert message in [str(m) for m in refused.context["messages"]]
        assert brief.revisions.count() == 1

    response = client.post(url, {"take": "headline"})
    assert response.status_code == 302
    second = brief.revisions.order_by("-number").first()
    assert (second.number, second.author, second.payload) == (2, editor, {**first.payload, "title": headline})
    assert 'id="suggestion"' not in client.get(brief.get_absolute_url()).content.decode()
    again = client.post(url, {"take": "headline"}, follow=True)
    assert "Revision 2 already holds this text." in [str(m) for m in again.context["messages"]]
    assert brief.revisions.count() == 2
