"""AI providers behind one small interface: `offline` (default, no network) and `openai`
(any OpenAI-compatible Chat Completions endpoint through httpx).

Providers are called only by workers, after the step's intent committed, with no database
transaction open. Errors are this module's own exceptions, mapped from status codes; the
summary pipeline turns them into failure kinds for the retry policy.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from django.conf import settings

from publishing.clients import http


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    usage: dict[str, int] = field(default_factory=dict)


class AIError(http.ServiceError):
    pass


class AITimeout(AIError, http.ServiceTimeout):
    pass


class AIConnectionError(AIError, http.ServiceConnectionError):
    pass


class AIThrottled(AIError, http.ServiceThrottled):
    pass


class AIServerError(AIError, http.ServiceServerError):
    pass


class AIRejected(AIError, http.ServiceRejected):
    """400/404/422: the request itself is wrong (e.g. context too long); retrying cannot help."""


class AIAuthError(AIError, http.ServiceAuthError):
    """401/403: an operator must fix the key or the account."""


class AIInvalidResponse(AIError, http.ServiceInvalidResponse):
    pass


class AIProvider(Protocol):
    name: str

    def complete(self, *, system: str, prompt: str, seed: str) -> Completion: ...


SENTENCE = re.compile(r"(?<=[.!?])\s+")
BULLET = re.compile(r"^\s*[-*]\s+", re.MULTILINE)
# The pipeline's instructions start "You write the <task>"; the offline model reads its task there.
TASK = re.compile(r"You write the (outline|draft|headline)")


class OfflineProvider:
    """A local extractive summarizer: picks and orders sentences of the prompt's material.

    Its output depends on `seed`, which the pipeline derives from the attempt, so a retry
    answers differently — nondeterminism is exercised everywhere, as with a real model.
    """

    name = "offline"
    model = "galley-offline-extractive-1"

    def complete(self, *, system: str, prompt: str, seed: str) -> Completion:
        task = TASK.match(system)
        kind = task.group(1) if task else "draft"
        material = BULLET.sub("", prompt.split("\n\n", 1)[-1])
        sentences = [s.strip() for s in SENTENCE.split(" ".join(material.split())) if s.strip()]
        if not sentences:
            return Completion(text="", model=self.model, usage={"prompt_tokens": 0, "completion_tokens": 0})
        rng = random.Random(seed)  # noqa: S311 (variation, not security)
        if kind == "headline":
            words = rng.choice(sentences).rstrip(".!?").split()
            text = " ".join(words[: rng.randint(5, 10)])
        else:
            count = min(len(sentences), rng.randint(2, 4))
            picked = sorted(rng.sample(range(len(sentences)), count))
            lines = [sentences[index] for index in picked]
            text = "\n".join(f"- {line}" for line in lines) if kind == "outline" else " ".join(lines)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        return Completion(text=text, model=self.model, usage=usage)


class OpenAIProvider:
    """Chat Completions over httpx with an explicit timeout; usage tokens from the response."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """`transport` is for tests (httpx.MockTransport); by default httpx's own."""
        self.model = model
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(timeout),
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def complete(self, *, system: str, prompt: str, seed: str) -> Completion:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        }
        try:
            response = self._client.post("/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise AITimeout(f"the AI provider did not answer in time ({exc.__class__.__name__})") from exc
        except httpx.RequestError as exc:
            raise AIConnectionError(f"could not reach the AI provider: {exc}") from exc
        status = response.status_code
        if status == 200:
            return self._completion(response)
        detail = response.text[:300]
        if status in (429, 503):
            retry_after = http.parse_retry_after(response.headers.get("Retry-After"))
            raise AIThrottled(f"AI provider throttled ({status}): {detail}", status=status, retry_after=retry_after)
        if status in (401, 403):
            raise AIAuthError(f"AI provider refused the credentials ({status}): {detail}", status=status)
        if status >= 500:
            raise AIServerError(f"AI provider error {status}: {detail}", status=status)
        raise AIRejected(f"AI provider rejected the request ({status}): {detail}", status=status)

    def _completion(self, response: httpx.Response) -> Completion:
        # Usage is parsed inside the try: a malformed usage block (not an object, a non-numeric count)
        # must surface as AIInvalidResponse, never as a bare AttributeError/TypeError the pipeline
        # cannot map. A null count (some compatible servers send one) counts as 0.
        try:
            data: dict[str, Any] = response.json()
            text = data["choices"][0]["message"]["content"]
            usage = data.get("usage") or {}
            tokens = {
                "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                "completion_tokens": int(usage.get("completion_tokens") or 0),
            }
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise AIInvalidResponse(f"unexpected AI provider response: {response.text[:200]}", status=200) from exc
        if not isinstance(text, str):
            raise AIInvalidResponse("the AI provider's message content is not text", status=200)
        return Completion(text=text, model=str(data.get("model") or self.model), usage=tokens)


def provider_from_settings() -> AIProvider:
    """The configured provider, read from settings at call time, shared by the process's threads."""
    name = settings.GALLEY_AI_PROVIDER
    if name == "offline":
        return OfflineProvider()
    if name != "openai":
        raise ValueError(f"Unknown GALLEY_AI_PROVIDER {name!r}; use offline or openai")
    return _shared.get(
        base_url=settings.GALLEY_AI_BASE_URL,
        api_key=settings.GALLEY_AI_API_KEY,
        model=settings.GALLEY_AI_MODEL,
        timeout=settings.GALLEY_AI_TIMEOUT_SECONDS,
    )


_shared: http.SharedPerProcess[OpenAIProvider] = http.SharedPerProcess(OpenAIProvider)
