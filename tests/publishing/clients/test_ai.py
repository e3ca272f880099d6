"""AI providers (docs/configuration.md#ai-provider): OpenAIProvider against httpx.MockTransport and against the local
fake server (tests/fake_openai.py) over real HTTP, OfflineProvider, and provider_from_settings.

The exception a status maps to decides the failure kind and so the retry policy (docs/invariants.md#i9);
these tests pin that mapping. No test reaches the internet (docs/testing.md#layers).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from publishing.clients import ai
from publishing.clients.ai import (
    AIAuthError,
    AIConnectionError,
    AIInvalidResponse,
    AIRejected,
    AIServerError,
    AIThrottled,
    AITimeout,
    Completion,
    OfflineProvider,
    OpenAIProvider,
    provider_from_settings,
)
from publishing.summary_rules import (
    HEADLINE_MAX_CHARS,
    INSTRUCTIONS,
    STANDFIRST_MAX_CHARS,
    SummaryStep,
    cut_off_ending,
    quality_problems,
)
from tests.fake_openai import FakeOpenAI
from tests.processes import free_port, process_env, start, stop, wait_for_http

KEY = "sk-test-key"
BASE_URL = "https://ai.example.invalid/v1"
MATERIAL = (
    "Dockers walked out at dawn. The port of Harwich is closed to freight. "
    "Union leaders demand a pay rise of eight percent. Ships are waiting offshore. "
    "Talks with the port authority resume on Monday. Ferry passengers are not affected."
)
MATERIAL_SENTENCES = [
    "Dockers walked out at dawn.",
    "The port of Harwich is closed to freight.",
    "Union leaders demand a pay rise of eight percent.",
    "Ships are waiting offshore.",
    "Talks with the port authority resume on Monday.",
    "Ferry passengers are not affected.",
]
SYSTEM = {step: instruction for step, (instruction, _source) in INSTRUCTIONS.items()}


def prompt(step: str, material: str = MATERIAL) -> dict[str, str]:
    """The keyword arguments the pipeline passes to complete() (publishing/handlers/summaries.py)."""
    return {"system": SYSTEM[step], "prompt": f"{SYSTEM[step]}\n\n{material}"}


def chat_completion(text: str = "Dockers walked out.", **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test-2024",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        **extra,
    }


def run_pipeline_texts(complete: Callable[..., Completion]) -> dict[str, dict[str, str]]:
    """outline → draft → headline as the pipeline chains them, as the quality gate's inputs."""
    artifacts: dict[str, dict[str, str]] = {}
    material = MATERIAL
    for step in (SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE):
        text = complete(**prompt(step, material), seed=f"summary:brief-042:run-1:{step}:attempt-1").text.strip()
        artifacts[step] = {"text": text}
        material = text
    return artifacts


# --- OpenAIProvider against httpx.MockTransport ----------------------------------------------


@pytest.fixture
def mock_provider() -> Iterator[Callable[..., OpenAIProvider]]:
    made: list[OpenAIProvider] = []

    def make(handler: Callable[[httpx.Request], httpx.Response], *, timeout: float = 5.0) -> OpenAIProvider:
        provider = OpenAIProvider(
            base_url=BASE_URL, api_key=KEY, model="gpt-test", timeout=timeout, transport=httpx.MockTransport(handler)
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


def answering(status: int, body: Any = None, headers: dict[str, str] | None = None, content: bytes | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        if content is not None:
            return httpx.Response(status, content=content, headers=headers)
        return httpx.Response(status, json=body if body is not None else {"error": {"message": "no"}}, headers=headers)

    return handler


def test_openai__request__model_messages_and_bearer_key(mock_provider):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=chat_completion())

    mock_provider(handler).complete(**prompt(SummaryStep.OUTLINE), seed="s")
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == f"{BASE_URL}/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert json.loads(request.content) == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": SYSTEM[SummaryStep.OUTLINE]},
            {"role": "user", "content": f"{SYSTEM[SummaryStep.OUTLINE]}\n\n{MATERIAL}"},
        ],
    }


def test_openai__base_url_with_trailing_slash__same_endpoint(mock_provider):
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json=chat_completion())

    provider = OpenAIProvider(
        base_url=f"{BASE_URL}/", api_key=KEY, model="m", timeout=5, transport=httpx.MockTransport(handler)
    )
    try:
        provider.complete(**prompt(SummaryStep.DRAFT), seed="s")
    finally:
        provider.close()
    assert seen == [f"{BASE_URL}/chat/completions"]


def test_openai__timeout__configured_on_every_request(mock_provider):
    seen: list[dict[str, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json=chat_completion())

    mock_provider(handler, timeout=3.5).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert seen == [{"connect": 3.5, "read": 3.5, "write": 3.5, "pool": 3.5}]


def test_openai__200__completion_with_model_and_usage(mock_provider):
    completion = mock_provider(answering(200, chat_completion("- Dockers walked out."))).complete(
        **prompt(SummaryStep.OUTLINE), seed="s"
    )
    assert completion == Completion(
        text="- Dockers walked out.", model="gpt-test-2024", usage={"prompt_tokens": 12, "completion_tokens": 3}
    )


def test_openai__200_without_usage_or_model__zero_usage_configured_model(mock_provider):
    body = chat_completion()
    del body["usage"], body["model"]
    completion = mock_provider(answering(200, body)).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert completion.model == "gpt-test"
    assert completion.usage == {"prompt_tokens": 0, "completion_tokens": 0}


@pytest.mark.parametrize("status", [429, 503])
def test_openai__invariant9_throttled_retry_after_seconds__ai_throttled(mock_provider, status):
    provider = mock_provider(answering(status, headers={"Retry-After": "7"}))
    with pytest.raises(AIThrottled) as caught:
        provider.complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert (caught.value.status, caught.value.retry_after) == (status, 7.0)


@pytest.mark.parametrize("status", [429, 503])
def test_openai__invariant9_throttled_retry_after_http_date__seconds_until_then(mock_provider, status):
    when = (datetime.now(UTC) + timedelta(seconds=30)).replace(microsecond=0)  # an HTTP-date has whole seconds
    provider = mock_provider(answering(status, headers={"Retry-After": format_datetime(when, usegmt=True)}))
    before = datetime.now(UTC)
    with pytest.raises(AIThrottled) as caught:
        provider.complete(**prompt(SummaryStep.DRAFT), seed="s")
    after = datetime.now(UTC)
    assert caught.value.status == status
    assert caught.value.retry_after is not None
    # Seconds from the moment the answer was read, which lies between `before` and `after` however slow
    # this machine is.
    assert (when - after).total_seconds() <= caught.value.retry_after <= (when - before).total_seconds()


def test_openai__throttled_without_retry_after__retry_after_none(mock_provider):
    with pytest.raises(AIThrottled) as caught:
        mock_provider(answering(429)).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert caught.value.retry_after is None


@pytest.mark.parametrize("status", [500, 502])
def test_openai__invariant9_server_error__ai_server_error(mock_provider, status):
    with pytest.raises(AIServerError) as caught:
        mock_provider(answering(status, {"error": {"message": "boom"}})).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert caught.value.status == status
    assert "boom" in str(caught.value)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_openai__invariant9_invalid_request__ai_rejected(mock_provider, status):
    with pytest.raises(AIRejected) as caught:
        mock_provider(answering(status, {"error": {"message": "context too long"}})).complete(
            **prompt(SummaryStep.DRAFT), seed="s"
        )
    assert caught.value.status == status
    assert "context too long" in str(caught.value)


@pytest.mark.parametrize("status", [401, 403])
def test_openai__invariant9_auth__ai_auth_error(mock_provider, status):
    with pytest.raises(AIAuthError) as caught:
        mock_provider(answering(status)).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert caught.value.status == status


@pytest.mark.parametrize("exception", [httpx.ReadTimeout, httpx.ConnectTimeout, httpx.WriteTimeout, httpx.PoolTimeout])
def test_openai__invariant9_timeout__ai_timeout(mock_provider, exception):
    def handler(request: httpx.Request) -> httpx.Response:
        raise exception("timed out", request=request)

    with pytest.raises(AITimeout) as caught:
        mock_provider(handler).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert caught.value.status is None


@pytest.mark.parametrize("exception", [httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError])
def test_openai__invariant9_connection_error__ai_connection_error(mock_provider, exception):
    def handler(request: httpx.Request) -> httpx.Response:
        raise exception("connection refused", request=request)

    with pytest.raises(AIConnectionError):
        mock_provider(handler).complete(**prompt(SummaryStep.DRAFT), seed="s")


@pytest.mark.parametrize(
    "content",
    [
        b"<html>gateway</html>",
        b"",
        b"[]",
        b"null",
        b"{}",
        json.dumps({"choices": []}).encode(),
        json.dumps({"choices": [{"index": 0}]}).encode(),
        json.dumps({"choices": [{"message": {"role": "assistant"}}]}).encode(),
        json.dumps({"choices": [{"message": {"role": "assistant", "content": None}}]}).encode(),
        json.dumps(chat_completion(usage="lots")).encode(),
        json.dumps(chat_completion(usage={"prompt_tokens": "many"})).encode(),
    ],
    ids=[
        "html",
        "empty",
        "list",
        "null",
        "no-choices",
        "empty-choices",
        "no-message",
        "no-content",
        "null-content",
        "usage-not-object",
        "usage-not-number",
    ],
)
def test_openai__garbage_200__ai_invalid_response(mock_provider, content):
    with pytest.raises(AIInvalidResponse) as caught:
        mock_provider(answering(200, content=content)).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert caught.value.status == 200


def test_openai__null_usage_counts__zero(mock_provider):
    body = chat_completion(usage={"prompt_tokens": None, "completion_tokens": 4})
    completion = mock_provider(answering(200, body)).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert completion.usage == {"prompt_tokens": 0, "completion_tokens": 4}


# --- OfflineProvider --------------------------------------------------------------------------


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to resolve or connect fails the test loudly."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the offline provider tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(httpx.Client, "send", refuse)


SEEDS = [f"summary:brief-042:run-1:draft:attempt-{n}" for n in range(1, 9)]


@pytest.mark.parametrize("step", [SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE])
def test_offline__other_seeds__output_varies(no_network, step):
    texts = {OfflineProvider().complete(**prompt(step), seed=seed).text for seed in SEEDS}
    assert len(texts) > 1


@pytest.mark.parametrize("step", [SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE])
def test_offline__same_seed__same_output(no_network, step):
    first = OfflineProvider().complete(**prompt(step), seed="seed-1")
    again = OfflineProvider().complete(**prompt(step), seed="seed-1")
    assert first == again


def test_offline__outline__bullet_lines_of_material_sentences(no_network):
    for seed in SEEDS:
        lines = OfflineProvider().complete(**prompt(SummaryStep.OUTLINE), seed=seed).text.splitlines()
        assert 2 <= len(lines) <= 4
        assert all(line.startswith("- ") for line in lines)
        assert all(line.removeprefix("- ") in MATERIAL_SENTENCES for line in lines)


def test_offline__draft__sentences_of_material_in_order(no_network):
    for seed in SEEDS:
        text = OfflineProvider().complete(**prompt(SummaryStep.DRAFT), seed=seed).text
        assert "\n" not in text
        assert not text.startswith("- ")
        sentences = [s for s in MATERIAL_SENTENCES if s in text]
        assert 2 <= len(sentences) <= 4
        assert " ".join(sentences) == text


def test_offline__draft_from_outline__bullets_stripped(no_network):
    outline = "- Dockers walked out at dawn.\n- Ships are waiting offshore.\n- Talks resume on Monday."
    text = OfflineProvider().complete(**prompt(SummaryStep.DRAFT, outline), seed="s").text
    assert "- " not in text
    assert text.split(". ")[0].rstrip(".") in outline


def test_offline__headline__one_line_without_trailing_period(no_network):
    for seed in SEEDS:
        text = OfflineProvider().complete(**prompt(SummaryStep.HEADLINE), seed=seed).text
        assert "\n" not in text
        assert not text.endswith((".", "!", "?"))
        assert 1 <= len(text.split()) <= 10
        assert any(sentence.startswith(text) for sentence in MATERIAL_SENTENCES)


def test_offline__usage__word_counts(no_network):
    arguments = prompt(SummaryStep.DRAFT)
    completion = OfflineProvider().complete(**arguments, seed="s")
    assert completion.model == OfflineProvider.model
    assert completion.usage == {
        "prompt_tokens": len(arguments["prompt"].split()),
        "completion_tokens": len(completion.text.split()),
    }
    assert completion.usage["completion_tokens"] > 0


def test_offline__empty_material__empty_text_zero_usage(no_network):
    completion = OfflineProvider().complete(system=SYSTEM[SummaryStep.DRAFT], prompt="", seed="s")
    assert (completion.text, completion.usage) == ("", {"prompt_tokens": 0, "completion_tokens": 0})


def test_offline__pipeline_chain__passes_quality_gate(no_network):
    provider = OfflineProvider()
    for attempt in range(1, 6):

        def complete(*, system: str, prompt: str, seed: str, attempt: int = attempt) -> Completion:
            return provider.complete(system=system, prompt=prompt, seed=f"{seed}-{attempt}")

        assert quality_problems(run_pipeline_texts(complete)) == []


# --- OfflineProvider headlines: never cut mid-phrase -------------------------------------------

NEWS = {
    "the issue's cycling lane": (
        "Residents of the Eastgate district packed the town hall on Tuesday evening and criticised the lack of a "
        "cycling lane along the new ring road that the council opened last month without consulting local schools "
        "or the police. The council said a consultation would start in the spring. Cyclists have staged two "
        "protest rides since the road opened."
    ),
    "language models": (
        "A group of universities released a large language model trained only on public-domain books on Monday. "
        "The researchers said the model answers questions about history as well as commercial chatbots, although "
        "it struggles with prompts written in slang. As an AI researcher, Dr. Amina Diallo said the release would "
        "let schools audit how such systems work. Critics warned that language models still invent sources."
    ),
    "run-on without punctuation": (
        "The city council voted late last night to approve a budget that raises property taxes by four percent for "
        "homeowners in the northern districts while cutting funding for libraries and community centres across the "
        "river and postponing the repair of the old harbour bridge until at least next year"
    ),
    "introductory phrase and a list": (
        "After months of negotiations between the regional government, the national rail operator and three "
        "private freight companies, the long-awaited agreement to reopen the disused line between Porthaven and "
        "Millbrook to passenger traffic was finally signed on Friday, officials said."
    ),
    "abbreviations and quotes": (
        "The U.S. Senate voted 52 to 48 on Thursday to extend the port subsidy. Mr. Okafor, the harbour master, "
        'said ships would return by the weekend. "We will not go back to work until the offer improves," the '
        "union leader told reporters outside the port gates on Monday morning."
    ),
    "very short": "Ferry services resume.",
    "Polish": (
        "Mieszkańcy Gdańska protestowali w sobotę przeciwko budowie nowej spalarni odpadów w dzielnicy Przeróbka. "
        "Według organizatorów w marszu wzięło udział około trzech tysięcy osób, a prezydent miasta zapowiedziała "
        "konsultacje społeczne. Inwestor twierdzi, że instalacja spełnia wszystkie normy."
    ),
    "Indonesian": (
        "Ribuan nelayan di pesisir utara Jawa berunjuk rasa di depan kantor gubernur pada hari Senin untuk "
        "menuntut harga solar yang lebih murah. Menurut serikat nelayan, harga bahan bakar naik dua kali lipat "
        "dalam setahun terakhir. Pemerintah provinsi berjanji akan membahas tuntutan tersebut dengan kementerian "
        "energi."
    ),
    "German": (
        "Nach dem Hochwasser an der Elbe haben die Behörden in Dresden am Mittwoch die Sperrung der Altstadt "
        "aufgehoben, aber mehrere Brücken bleiben wegen Schäden geschlossen. Die Stadt rechnet mit Kosten von "
        "mehreren Millionen Euro."
    ),
    "Japanese": "東京都は月曜日、湾岸地区に新しい自転車道を建設する計画を発表した。住民の多くは計画を歓迎している。",
}
BOUNDARY_WORDS = {word.lower() for words in (ai.SUBORDINATE, ai.COORDINATE, ai.PHRASE) for word in words.split()}


def ends_at_a_boundary(headline: str, material: str) -> bool:
    """Whether `headline` is a stretch of `material` (first letter capitalised) that the material
    continues with a sentence's end, a punctuation mark, or a word opening a clause or a phrase."""
    flat = " ".join(material.split())
    for found in re.finditer(re.escape(headline[1:]), flat):
        if found.start() == 0 or flat[found.start() - 1].lower() != headline[0].lower():
            continue
        after = flat[found.end() :]
        if not after or after[0] in ".!?,;:\u3002" or after.startswith((" -", " \u2013", " \u2014")):
            return True
        if after.split()[0].lower() in BOUNDARY_WORDS:
            return True
    return False


def offline_chain(material: str, attempt: int) -> dict[str, dict[str, str]]:
    artifacts: dict[str, dict[str, str]] = {}
    for step in (SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE):
        seed = f"summary:brief-042:run-1:{step}:attempt-{attempt}"
        artifacts[step] = {"text": OfflineProvider().complete(**prompt(step, material), seed=seed).text.strip()}
        material = artifacts[step]["text"]
    return artifacts


@pytest.mark.parametrize("source", NEWS.values(), ids=NEWS.keys())
def test_offline__headline__varied_news__ends_at_a_boundary_within_the_limit_and_passes_the_gate(no_network, source):
    for attempt in range(1, 13):
        chain = offline_chain(source, attempt)
        direct = OfflineProvider().complete(**prompt(SummaryStep.HEADLINE, source), seed=f"direct-{attempt}").text
        for headline in (chain[SummaryStep.HEADLINE]["text"], direct):
            assert "\n" not in headline and not headline.endswith(".")
            assert 0 < len(headline) <= ai.HEADLINE_TARGET_CHARS <= HEADLINE_MAX_CHARS
            assert cut_off_ending(headline) is None, headline
            assert ends_at_a_boundary(headline, source), headline
        assert quality_problems(chain) == []


@pytest.mark.parametrize(
    ("source", "headline"),
    [
        # The example: the sentence is too long, so the headline ends where a clause does,
        # never at "…a cycling lane along".
        (
            NEWS["the issue's cycling lane"].split(". ")[0],
            "Residents of the Eastgate district packed the town hall on Tuesday evening",
        ),
        # An introductory phrase is skipped, never the headline on its own.
        (
            "After a four-hour debate on Tuesday, the council criticised the lack of a cycling lane along the new "
            "ring road that opened last month without any consultation.",
            "The council criticised the lack of a cycling lane along the new ring road that opened last month",
        ),
        # No punctuation at all: the headline ends before an optional phrase ("by four percent").
        (
            NEWS["run-on without punctuation"],
            "The city council voted late last night to approve a budget that raises property taxes",
        ),
        # A list's commas and two joined names are inside phrases.
        (NEWS["introductory phrase and a list"], "The long-awaited agreement to reopen the disused line"),
        # A complete short sentence is a headline as it stands.
        (NEWS["very short"], "Ferry services resume"),
        # No boundary at all: cut before a word that opens a phrase, within the target length.
        (
            "Protesters demanded " + " ".join(["the immediate resignation of the regional transport minister"] * 5),
            "Protesters demanded the immediate resignation of the regional transport minister",
        ),
    ],
    ids=["long-lede", "intro-phrase", "run-on", "list-and-names", "very-short", "no-boundary"],
)
def test_offline__headline__long_sentences__end_where_a_clause_or_phrase_does(no_network, source, headline):
    for seed in SEEDS:
        assert OfflineProvider().complete(**prompt(SummaryStep.HEADLINE, source), seed=seed).text == headline


def test_offline__headline__abbreviations_and_quotes__never_split_or_left_open(no_network):
    headlines = {
        OfflineProvider().complete(**prompt(SummaryStep.HEADLINE, NEWS["abbreviations and quotes"]), seed=seed).text
        for seed in SEEDS
    }
    assert headlines <= {
        "The U.S. Senate voted 52 to 48 on Thursday to extend the port subsidy",
        "Mr. Okafor, the harbour master, said ships would return by the weekend",
    }
    assert len(headlines) == 2  # the seed chooses among the sentences that offer a headline


# --- provider_from_settings -------------------------------------------------------------------


@pytest.mark.skipif("GALLEY_AI_PROVIDER" in os.environ, reason="the environment chooses a provider")
def test_provider_from_settings__default__offline():
    assert isinstance(provider_from_settings(), OfflineProvider)


def test_provider_from_settings__offline__offline_provider(settings):
    settings.GALLEY_AI_PROVIDER = "offline"
    assert provider_from_settings().name == "offline"


def test_provider_from_settings__openai__configured_from_settings(settings):
    settings.GALLEY_AI_PROVIDER = "openai"
    settings.GALLEY_AI_BASE_URL = "http://127.0.0.1:9/v1/"
    settings.GALLEY_AI_API_KEY = "sk-from-settings"
    settings.GALLEY_AI_MODEL = "gpt-from-settings"
    settings.GALLEY_AI_TIMEOUT_SECONDS = 4.0
    provider = provider_from_settings()
    assert isinstance(provider, OpenAIProvider)
    try:
        assert (provider.name, provider.model) == ("openai", "gpt-from-settings")
        client = provider._client
        assert str(client.base_url) == "http://127.0.0.1:9/v1/"
        assert client.headers["Authorization"] == "Bearer sk-from-settings"
        assert client.timeout == httpx.Timeout(4.0)
    finally:
        provider.close()


def test_provider_from_settings__read_at_call_time(settings):
    settings.GALLEY_AI_PROVIDER = "openai"
    first = provider_from_settings()
    assert isinstance(first, OpenAIProvider)
    first.close()
    settings.GALLEY_AI_PROVIDER = "offline"
    assert isinstance(provider_from_settings(), OfflineProvider)


def test_provider_from_settings__unknown__value_error(settings):
    settings.GALLEY_AI_PROVIDER = "anthropic-or-whatever"
    with pytest.raises(ValueError, match="Unknown GALLEY_AI_PROVIDER 'anthropic-or-whatever'; use offline or openai"):
        provider_from_settings()


# --- OpenAIProvider against the fake server (real HTTP, in a thread) --------------------------


@pytest.fixture
def start_fake() -> Iterator[Callable[..., FakeOpenAI]]:
    started: list[FakeOpenAI] = []

    def start_one(**kwargs: Any) -> FakeOpenAI:
        fake = FakeOpenAI(key=KEY, **kwargs).start()
        started.append(fake)
        return fake

    yield start_one
    for fake in started:
        fake.stop()


@pytest.fixture
def provider_for() -> Iterator[Callable[..., OpenAIProvider]]:
    made: list[OpenAIProvider] = []

    def make(fake: FakeOpenAI, *, key: str = KEY, timeout: float = 5.0) -> OpenAIProvider:
        provider = OpenAIProvider(base_url=f"{fake.url}/v1", api_key=key, model="gpt-fake", timeout=timeout)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


def calls(fake: FakeOpenAI) -> list[dict[str, Any]]:
    response = httpx.get(f"{fake.url}/_calls", timeout=5)
    assert response.status_code == 200
    return response.json()["calls"]


def test_fake__completion_per_task__plausible_and_passes_quality_gate(start_fake, provider_for):
    fake = start_fake()
    provider = provider_for(fake)
    artifacts = run_pipeline_texts(provider.complete)
    outline = artifacts[SummaryStep.OUTLINE]["text"].splitlines()
    assert 2 <= len(outline) <= 4
    assert all(line.startswith("- ") for line in outline)
    draft = artifacts[SummaryStep.DRAFT]["text"]
    assert "\n" not in draft
    assert 2 <= len([s for s in draft.split(". ") if s]) <= 4
    headline = artifacts[SummaryStep.HEADLINE]["text"]
    assert "\n" not in headline
    assert not headline.endswith(".")
    assert 5 <= len(headline.split()) <= 10
    assert quality_problems(artifacts) == []
    assert [(c["n"], c["system_task"], c["status"], c["fault"]) for c in calls(fake)] == [
        (1, "outline", 200, None),
        (2, "draft", 200, None),
        (3, "headline", 200, None),
    ]


def test_fake__response__chat_completion_shape_with_usage(start_fake, provider_for):
    fake = start_fake()
    response = httpx.post(
        f"{fake.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={
            "model": "gpt-fake",
            "messages": [
                {"role": "system", "content": SYSTEM[SummaryStep.DRAFT]},
                {"role": "user", "content": prompt(SummaryStep.DRAFT)["prompt"]},
            ],
        },
        timeout=5,
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["object"], body["model"]) == ("chat.completion", "gpt-fake")
    (choice,) = body["choices"]
    assert (choice["index"], choice["message"]["role"], choice["finish_reason"]) == (0, "assistant", "stop")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_fake__same_prompt_again__different_text(start_fake, provider_for):
    provider = provider_for(start_fake())
    for step in (SummaryStep.OUTLINE, SummaryStep.DRAFT, SummaryStep.HEADLINE):
        texts = {provider.complete(**prompt(step), seed="same").text for _ in range(3)}
        assert len(texts) == 3


def test_fake__wrong_or_missing_key__401_ai_auth_error(start_fake, provider_for):
    fake = start_fake()
    with pytest.raises(AIAuthError) as caught:
        provider_for(fake, key="sk-wrong").complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert caught.value.status == 401
    missing = httpx.post(f"{fake.url}/v1/chat/completions", json={"messages": []}, timeout=5)
    assert missing.status_code == 401
    assert [(c["status"], c["fault"]) for c in calls(fake)] == [(401, None), (401, None)]


def test_fake__invariant9_429__ai_throttled_with_retry_after(start_fake, provider_for):
    fake = start_fake(rate_429=1.0, retry_after=3)
    with pytest.raises(AIThrottled) as caught:
        provider_for(fake).complete(**prompt(SummaryStep.OUTLINE), seed="s")
    assert (caught.value.status, caught.value.retry_after) == (429, 3.0)
    assert calls(fake) == [{"n": 1, "system_task": "outline", "status": 429, "fault": "429"}]


def test_fake__invariant9_500__ai_server_error(start_fake, provider_for):
    fake = start_fake(rate_500=1.0)
    with pytest.raises(AIServerError) as caught:
        provider_for(fake).complete(**prompt(SummaryStep.HEADLINE), seed="s")
    assert caught.value.status == 500
    assert calls(fake) == [{"n": 1, "system_task": "headline", "status": 500, "fault": "500"}]


def test_fake__invariant9_slow_answer__ai_timeout_within_client_timeout(start_fake, provider_for):
    fake = start_fake(rate_timeout=1.0, timeout_seconds=30)
    began = time.monotonic()
    with pytest.raises(AITimeout):
        provider_for(fake, timeout=0.3).complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert time.monotonic() - began < 5
    # Counted before the sleep: a client that gave up still sees its call.
    assert calls(fake) == [{"n": 1, "system_task": "draft", "status": 200, "fault": "timeout"}]


def test_fake__calls__every_request_counted_and_faults_switched_at_runtime(start_fake, provider_for):
    fake = start_fake()
    provider = provider_for(fake)
    provider.complete(**prompt(SummaryStep.OUTLINE), seed="s")
    with pytest.raises(AIAuthError):
        provider_for(fake, key="sk-wrong").complete(**prompt(SummaryStep.DRAFT), seed="s")
    switched = httpx.post(f"{fake.url}/_faults", json={"rate_500": 1.0}, timeout=5)
    assert switched.status_code == 200
    assert switched.json()["rate_500"] == 1.0
    with pytest.raises(AIServerError):
        provider.complete(**prompt(SummaryStep.DRAFT), seed="s")
    httpx.post(f"{fake.url}/_faults", json={"rate_500": 0, "rate_429": 1, "retry_after": 0.5}, timeout=5)
    with pytest.raises(AIThrottled) as caught:
        provider.complete(**prompt(SummaryStep.DRAFT), seed="s")
    assert caught.value.retry_after == 0.5
    httpx.post(f"{fake.url}/_faults", json={"rate_429": 0}, timeout=5)
    provider.complete(**prompt(SummaryStep.DRAFT), seed="s")
    expected = [
        {"n": 1, "system_task": "outline", "status": 200, "fault": None},
        {"n": 2, "system_task": "draft", "status": 401, "fault": None},
        {"n": 3, "system_task": "draft", "status": 500, "fault": "500"},
        {"n": 4, "system_task": "draft", "status": 429, "fault": "429"},
        {"n": 5, "system_task": "draft", "status": 200, "fault": None},
    ]
    assert calls(fake) == expected
    assert fake.calls() == expected


def test_fake__faults_endpoint__invalid_rate_400_unchanged(start_fake):
    fake = start_fake(rate_500=0.25)
    for body in ({"rate_500": 2}, {"rate_429": "often"}, {"rate_unknown": 0.5}):
        response = httpx.post(f"{fake.url}/_faults", json=body, timeout=5)
        assert response.status_code == 400
    assert (fake.rate_500, fake.rate_429) == (0.25, 0.0)


def test_fake__same_seed__same_fault_sequence(start_fake, provider_for):
    def statuses(fake: FakeOpenAI) -> list[int]:
        provider = provider_for(fake)
        for _ in range(12):
            with contextlib.suppress(AIThrottled, AIServerError):
                provider.complete(**prompt(SummaryStep.DRAFT), seed="s")
        return [call["status"] for call in calls(fake)]

    first = statuses(start_fake(seed=7, rate_429=0.3, rate_500=0.3))
    second = statuses(start_fake(seed=7, rate_429=0.3, rate_500=0.3))
    assert first == second
    assert {200, 429, 500} <= set(first)


def test_fake__calls_file__one_line_per_call_numbered_across_restarts(start_fake, provider_for, tmp_path):
    calls_file = tmp_path / "calls.jsonl"
    first = start_fake(calls_file=calls_file)
    provider_for(first).complete(**prompt(SummaryStep.OUTLINE), seed="s")
    provider_for(first).complete(**prompt(SummaryStep.DRAFT), seed="s")
    first.stop()
    second = start_fake(calls_file=calls_file)
    provider_for(second).complete(**prompt(SummaryStep.DRAFT), seed="s")
    lines = [json.loads(line) for line in calls_file.read_text().splitlines()]
    assert [(c["n"], c["system_task"], c["status"]) for c in lines] == [
        (1, "outline", 200),
        (2, "draft", 200),
        (3, "draft", 200),
    ]
    assert [c["n"] for c in second.calls()] == [3]


# --- the fake as a real process ---------------------------------------------------------------


@pytest.mark.acceptance
def test_fake_process__complete_once__one_call_line_and_clean_sigterm(tmp_path: Path):
    port = free_port()
    calls_file = tmp_path / "calls.jsonl"
    argv = ["-m", "tests.fake_openai", "--port", str(port), "--key", KEY, "--calls-file", str(calls_file)]
    # Output through the pipe (not start(log=...)): read after exit, then closed, so no file leaks.
    process = start(argv, env=process_env())
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/_health", process=process, timeout=30)
        provider = OpenAIProvider(base_url=f"{url}/v1", api_key=KEY, model="gpt-fake", timeout=5)
        try:
            completion = provider.complete(**prompt(SummaryStep.OUTLINE), seed="s")
        finally:
            provider.close()
        assert completion.text.startswith("- ")
        assert completion.usage["completion_tokens"] > 0
        lines = calls_file.read_text().splitlines()
        assert [json.loads(line) for line in lines] == [
            {"n": 1, "system_task": "outline", "status": 200, "fault": None}
        ]
    finally:
        code = stop(process, sig=signal.SIGTERM, timeout=10)
        assert process.stdout is not None
        with process.stdout as pipe:
            output = pipe.read()
    assert code == 0, output
    assert f"fake openai on http://127.0.0.1:{port}" in output


@pytest.mark.parametrize("source", NEWS.values(), ids=NEWS.keys())
def test_offline__standfirst__whole_sentences_of_the_draft_within_the_limit_and_passes_the_gate(no_network, source):
    for attempt in range(1, 7):
        chain = offline_chain(source, attempt)
        draft = chain[SummaryStep.DRAFT]["text"]
        seed = f"summary:brief-042:run-1:standfirst:attempt-{attempt}"
        standfirst = OfflineProvider().complete(**prompt(SummaryStep.STANDFIRST, draft), seed=seed).text
        assert 0 < len(standfirst) <= STANDFIRST_MAX_CHARS
        assert standfirst in draft
        assert quality_problems({**chain, SummaryStep.STANDFIRST: {"text": standfirst}}) == []


def test_offline__standfirst__a_draft_of_overlong_sentences__a_headline_length_sentence(no_network):
    draft = "The council " + "and the union " * 60 + "met on Tuesday."
    text = OfflineProvider().complete(**prompt(SummaryStep.STANDFIRST, draft), seed="s").text
    assert text.endswith(".") and len(text) <= ai.HEADLINE_TARGET_CHARS + 1
