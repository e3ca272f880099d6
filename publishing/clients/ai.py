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
from publishing.summary_rules import DANGLING_WORDS, HEADLINE_MAX_CHARS, STANDFIRST_MAX_CHARS, cut_off_ending


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


# A sentence ends at . ! ? followed by a space (or at an ideographic full stop, exclamation or
# question mark); not after an initial ("J. Smith"), a dotted abbreviation ("U.S.") or a common
# title ("Mr.", "Dr.").
SENTENCE = re.compile(
    r"(?<=[.!?])(?<!\b[A-Z]\.)(?<!\.[A-Za-z]\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bNo\.)"
    r"(?<!\bMrs\.)(?<!\bvs\.)(?<!\bProf\.)\s+|(?<=[\u3002\uff01\uff1f])\s*"
)
BULLET = re.compile(r"^\s*[-*]\s+", re.MULTILINE)
# The pipeline's instructions start "You write the <task>"; the offline model reads its task there.
TASK = re.compile(r"You write the (outline|draft|headline|standfirst)")

# A headline a reader takes in at a glance; the quality gate's HEADLINE_MAX_CHARS is the hard bound.
HEADLINE_TARGET_CHARS = 100
HEADLINE_MIN_WORDS = 3
# Boundaries inside a sentence where a headline may end, best first: punctuation ("…, the council
# said"); a word that opens a subordinate clause ("… which", "… yang", "… który"); "and"/"or"; a
# preposition opening an optional phrase ("… a cycling lane | along the new road" — not "of" or
# "to", which usually complete what precedes them). Each list holds English and the newsroom
# languages of the seeds and neighbours (Indonesian, Polish, German, Spanish, French).
CLAUSE_MARK = re.compile(r"\s*(?:[,;:]|\s[-\u2013\u2014])\s+")
SUBORDINATE = (
    "while whereas although because which who whose where when despite amid unless but"
    " tetapi namun karena yang sementara ale lecz ponieważ który która które gdy"
    " aber weil während nachdem pero porque mientras mais parce qui"
)
COORDINATE = "and or dan atau i oraz lub und oder y o et ou"
PHRASE = (
    "along between for from in on at near with without during after before since across through under over"
    " into by amid outside inside di ke dari untuk dengan pada w we na od przez pod"
)
# Openers of an introductory phrase ("After the vote, …", "According to police, …"): a headline
# may start after such a phrase, never consist of it.
INTRO = (
    "after before during on in at by for following despite amid according although though while when if since as"
    " however meanwhile earlier later last this next di pada setelah menurut w we po według nach laut"
)


def _before_words(words: str) -> re.Pattern[str]:
    return re.compile(rf"\s+(?=(?:{'|'.join(words.split())})\s)", re.IGNORECASE)


BEFORE_SUBORDINATE = _before_words(SUBORDINATE)
BEFORE_COORDINATE = _before_words(COORDINATE)
BEFORE_PHRASE = _before_words(PHRASE)
INTRO_WORDS = frozenset(INTRO.split())
COORDINATE_WORDS = frozenset(COORDINATE.split())
SUBORDINATE_WORDS = frozenset(SUBORDINATE.split())
LIST_ITEM_MAX_WORDS = 10


def sentences_of(material: str) -> list[str]:
    text = " ".join(BULLET.sub("", material).split())
    return [sentence.strip() for sentence in SENTENCE.split(text) if sentence.strip()]


def _is_intro(text: str) -> bool:
    words = text.split()
    return bool(words) and words[0].lower().strip(",") in INTRO_WORDS


def _opens_clause(text: str) -> bool:
    """Whether `text` starts with a conjunction: a headline never starts there."""
    words = text.split()
    return bool(words) and words[0].lower() in COORDINATE_WORDS | SUBORDINATE_WORDS


def _joins_names(text: str, before: re.Match[str]) -> bool:
    """Whether the "and"/"or" after `before` joins two names ("Porthaven and Millbrook"): one phrase."""
    left, right = text[: before.start()].split(), text[before.end() :].split()
    return bool(left) and len(right) > 1 and left[-1][:1].isupper() and right[1][:1].isupper()


def headline_candidates(sentence: str) -> list[tuple[int, str]]:
    """Headlines one sentence offers, each ending at a sentence, clause or phrase boundary and
    ranked (lower is better): 0 the whole sentence when short; 1 up to a punctuation mark; 2 before
    a subordinate clause; 3 before "and"/"or" or an optional phrase; 4 the whole sentence up to the
    gate's limit. Never a cut inside a phrase, never an introductory phrase alone."""
    whole = sentence.rstrip(".\u3002").strip()
    marks = []
    for index, mark in enumerate(found := list(CLAUSE_MARK.finditer(whole))):
        following = whole[mark.end() : found[index + 1].start() if index + 1 < len(found) else len(whole)].split()
        # A comma between items of a list ("the government, the rail operator and three firms") is
        # inside a phrase: neither a headline's end nor its start.
        listed = len(following) <= LIST_ITEM_MAX_WORDS and any(w.lower() in COORDINATE_WORDS for w in following[1:])
        if not (mark.group().strip() == "," and listed):
            marks.append(mark)
    # An introductory phrase ("After the vote, …", "According to police, …") ends at the first mark
    # within its first 20 words: a headline may start after it, never end inside it. An opener
    # without such a mark may end only at a mark or before a subordinate clause, not inside a phrase.
    intro = _is_intro(whole)
    intro_end = next((m for m in marks if len(whole[: m.start()].split()) <= 20), None) if intro else None
    starts = [0]
    if intro_end is not None and not _opens_clause(whole[intro_end.end() :]):
        starts.append(intro_end.end())
    ends = [(1, mark.start()) for mark in marks]
    ends += [(2, match.start()) for match in BEFORE_SUBORDINATE.finditer(whole)]
    ends += [(3, match.start()) for match in BEFORE_COORDINATE.finditer(whole) if not _joins_names(whole, match)]
    ends += [(3, match.start()) for match in BEFORE_PHRASE.finditer(whole)]
    found_texts = [(0 if len(whole) <= HEADLINE_TARGET_CHARS else 4, whole)]
    for rank, end in ends:
        for start in starts:
            inside_intro = start == 0 and (end <= intro_end.start() if intro_end is not None else intro and rank == 3)
            if start < end and not inside_intro:
                found_texts.append((rank, whole[start:end]))
    return [
        (rank, text[0].upper() + text[1:])
        for rank, text in found_texts
        if text
        and len(text) <= (HEADLINE_MAX_CHARS if rank == 4 else HEADLINE_TARGET_CHARS)
        and (text == whole or len(text.split()) >= HEADLINE_MIN_WORDS)
        and cut_off_ending(text) is None
    ]


def compose_headline(sentences: list[str], rng: random.Random) -> str:
    """A headline from one of the sentences, chosen by `rng` among those offering the best rank
    (up to 2 counts as best) and each sentence's longest of that rank. A text whose sentences
    offer none (one run-on without any boundary) is cut within the target length before a word
    that opens a phrase ("the", "of", "and"), else after any word that can end a headline."""
    offers: dict[int, list[str]] = {}
    for sentence in sentences:
        ranked = headline_candidates(sentence)
        if ranked:
            rank = min(rank for rank, _text in ranked)
            offers.setdefault(max(rank, 2), []).append(max((t for r, t in ranked if r == rank), key=len))
    if offers:
        return rng.choice(offers[min(offers)])
    words = sentences[0].rstrip(".\u3002").split()
    fits = [
        size
        for size in range(len(words) - 1, 0, -1)
        if len(" ".join(words[:size])) <= HEADLINE_TARGET_CHARS and cut_off_ending(" ".join(words[:size])) is None
    ]
    before_phrase = [size for size in fits if words[size].lower() in DANGLING_WORDS]
    return " ".join(words[: (before_phrase or fits or [1])[0]])


def compose_standfirst(sentences: list[str], rng: random.Random) -> str:
    """One or two consecutive sentences of the draft within the standfirst's limit; a draft whose
    sentences are all longer gives a headline-length stretch of its first one, as a sentence."""
    fitting = [
        " ".join(sentences[start : start + count])
        for count in (rng.randint(1, 2), 1)
        for start in range(len(sentences) - count + 1)
        if len(" ".join(sentences[start : start + count])) <= STANDFIRST_MAX_CHARS
    ]
    if fitting:
        return fitting[0]
    return compose_headline(sentences[:1], rng) + "."


class OfflineProvider:
    """A local extractive summarizer: picks and orders sentences of the prompt's material, and
    composes a headline that ends where a sentence, a clause or a phrase does.

    Its output depends on `seed`, which the pipeline derives from the attempt, so a retry
    answers differently — nondeterminism is exercised everywhere, as with a real model.
    """

    name = "offline"
    model = "galley-offline-extractive-2"

    def complete(self, *, system: str, prompt: str, seed: str) -> Completion:
        # It stands in for a provider across the network, so it refuses where one would be refused.
        http.refuse_in_transaction("a completion by the offline AI provider")
        task = TASK.match(system)
        kind = task.group(1) if task else "draft"
        sentences = sentences_of(prompt.split("\n\n", 1)[-1])
        if not sentences:
            return Completion(text="", model=self.model, usage={"prompt_tokens": 0, "completion_tokens": 0})
        rng = random.Random(seed)  # noqa: S311 (variation, not security)
        if kind == "headline":
            text = compose_headline(sentences, rng)
        elif kind == "standfirst":
            text = compose_standfirst(sentences, rng)
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
            event_hooks={"request": [http.refuse_request_in_transaction]},
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
