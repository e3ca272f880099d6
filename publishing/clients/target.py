"""Typed httpx client for a publishing target speaking the target protocol (docs/target-protocol.md).

Every failure is a TargetError subclass chosen by what the caller must do next (docs/invariants.md#i9):

    TargetError(Exception)                    .status: int | None
    ├── TargetAmbiguous                       may have been applied: look up by key before sending again
    │   ├── TargetTimeout                     no answer in time (includes a commit-then-hang)
    │   └── TargetConnectionError             could not connect, or the connection dropped mid-request
    ├── TargetThrottled                       429/503: wait .retry_after seconds (None if not given)
    ├── TargetServerError                     other 5xx: back off with jitter, same key
    ├── TargetRejected                        400 (or another 4xx): terminal, dead letter
    ├── TargetAuthError                       401/403: terminal, an operator must fix the token
    ├── TargetKeyMismatch                     422: same key, different payload hash (operator needed)
    ├── TargetInProgress                      409 in_progress: the same key is being applied now
    ├── TargetStaleRevision                   409 stale_revision: .current_revision is newer or equal
    ├── TargetNotFound                        404 from read_back, retract or fetch_permalink
    │   └── TargetGone                        410 from fetch_permalink: the article was taken down (retracted)
    └── TargetInvalidResponse                 a body or status the protocol does not allow

A TargetClient holds only an httpx.Client, which may be shared between threads; it keeps no
other state, so one client per process (or per task, closed afterwards) are both fine. Its
connections are kept alive between calls (a target that allows it is not connected to three times
per publication); a client dropped without close() closes them when it is collected. The
client never retries: retry policy belongs to the worker that owns the operation.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import weakref
from dataclasses import dataclass
from html.parser import HTMLParser
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
from django.conf import settings

from publishing.clients import http

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8001"
DEFAULT_TIMEOUT_SECONDS = 10.0
_SHA256 = re.compile(r"[0-9a-f]{64}")


class TargetError(http.ServiceError):
    pass


class TargetAmbiguous(TargetError):
    """The request may or may not have been applied."""


class TargetTimeout(TargetAmbiguous, http.ServiceTimeout):
    pass


class TargetConnectionError(TargetAmbiguous, http.ServiceConnectionError):
    pass


class TargetThrottled(TargetError, http.ServiceThrottled):
    pass


class TargetServerError(TargetError, http.ServiceServerError):
    pass


class TargetRejected(TargetError, http.ServiceRejected):
    pass


class TargetAuthError(TargetError, http.ServiceAuthError):
    pass


class TargetKeyMismatch(TargetError):
    pass


class TargetInProgress(TargetError):
    pass


class TargetStaleRevision(TargetError):
    def __init__(self, message: str, *, status: int, current_revision: int) -> None:
        super().__init__(message, status=status)
        self.current_revision = current_revision


class TargetNotFound(TargetError):
    pass


class TargetGone(TargetNotFound):
    """The permalink answers 410 Gone: the article was there and was taken down (a retraction). A
    subclass of TargetNotFound because either way nothing is published at that address."""


class TargetInvalidResponse(TargetError, http.ServiceInvalidResponse):
    pass


@dataclass(frozen=True)
class TargetCheck:
    """What a target's check found: it answers and accepts Galley's credentials (otherwise the check
    raised), and whether it confirms a revision fence; ``fence_answer`` is what it said instead."""

    found: str
    fence_confirmed: bool
    fence_answer: str = ""

    @property
    def fence_warning(self) -> str:
        """Why an unconfirmed fence matters, for an operator; empty when the fence is confirmed."""
        if self.fence_confirmed:
            return ""
        return (
            f"the target does not confirm a revision fence ({self.fence_answer}). Galley cannot stop a late "
            "packet alone: a publish delayed in the network past its lease can still land after a newer "
            "revision and replace it there. Only the target's fence closes that: use a target that refuses "
            "an older revision (409 stale_revision, docs/target-protocol.md#fence) and answers GET /v1/status with "
            '{"fence": true}.'
        )

    def __str__(self) -> str:
        return self.found if self.fence_confirmed else f"{self.found}; WARNING: {self.fence_warning}"


@dataclass(frozen=True)
class LiveContent:
    """What the target shows now for a publication, beyond what Galley sent (the WordPress plugin's
    "live": its post's raw fields as they are at the time of the request; `body` is the post's
    content, the rendered HTML of a structured story). `hash` is the publication's payload hash
    while the post holds exactly what the publication wrote, else the sha256 of the post's content in
    the payload's canonical form (title and body, plus an excerpt when the post has one), so a post
    that shows exactly revision N has N's payload hash and status "publish"
    (docs/wordpress.md#drift)."""

    hash: str
    title: str
    body: str
    excerpt: str
    status: str
    revision: int
    modified_gmt: str = ""

    PUBLISHED = "publish"

    def shows(self, payload_hash: str) -> bool:
        """Whether readers see exactly the payload with this hash."""
        return self.hash == payload_hash and self.status == self.PUBLISHED


@dataclass(frozen=True)
class Receipt:
    id: str
    operation_key: str
    brief_id: str
    revision: int
    payload_hash: str
    permalink: str
    # None when the target reports no live content (the reference target,
    # docs/target-protocol.md#reference-target): then it cannot drift.
    live: LiveContent | None = None
    # Whether the brief's article is taken down at this revision (look-up and read-back only,
    # docs/target-protocol.md#retraction); False when the target does not say.
    retracted: bool = False
    retracted_at: str = ""


@dataclass(frozen=True)
class BriefHeld:
    """What a target holds of a brief (the look-up by brief, docs/target-protocol.md#look-up-by-brief): its
    newest revision there and the permalink."""

    brief_id: str
    revision: int
    permalink: str


@dataclass(frozen=True)
class RetractionReceipt:
    """A retraction's answer (docs/target-protocol.md#retraction): publication `id` was taken down under
    `operation_key` (the retraction key), at revision `revision`, at `retracted_at` (the target's clock)."""

    id: str
    operation_key: str
    revision: int
    retracted: bool
    retracted_at: str


class _PageText(HTMLParser):
    """The text a reader sees: character references decoded, scripts and styles left out."""

    HIDDEN = frozenset({"script", "style", "template", "noscript"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


class TargetClient:
    """A target speaking the target protocol (docs/target-protocol.md) with a bearer token. Explicit
    timeouts; no retries; every failure is a TargetError.

    ``transport`` is for tests (httpx.MockTransport); production leaves it None.
    """

    # The settings an operator fixes when the target refuses the credentials (named in the refusal).
    credentials = "GALLEY_TARGET_TOKEN"

    def __init__(
        self,
        *,
        base_url: str,
        token: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._token = token.strip()
        self._auth = {"Authorization": f"Bearer {self._token}"}
        # The same limit for connect, write, read and pool wait: any of them running out is a timeout.
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout),
            transport=transport,
            follow_redirects=False,
            headers={"User-Agent": "galley-target-client/1", "Accept": "application/json"},
            event_hooks={"request": [http.refuse_request_in_transaction]},
        )
        weakref.finalize(self, self._http.close)

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TargetClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- protocol --------------------------------------------------------------------------

    def publish(
        self,
        *,
        operation_key: str,
        brief_id: str,
        revision: int,
        payload_hash: str,
        payload: dict[str, Any],
        rendered: dict[str, Any] | None = None,
        republish: bool = False,
    ) -> tuple[Receipt, bool]:
        """POST the publication with Idempotency-Key = operation_key.

        `payload` is the revision's JSON object, whose hash is `payload_hash`; `rendered` is the story
        as Galley renders it (publishing.story.render_story), for the target's page. It is no part of
        the hash: the same revision rendered by another Galley version is the same publication.

        Returns (receipt, True) for a first application (201) and (receipt, False) for a replay
        (200). Raises a TargetError subclass otherwise; TargetAmbiguous means it may have applied.
        A receipt for another key or hash than the one sent is TargetInvalidResponse, never success.
        `republish` asks a target that reports live content (the WordPress plugin) to write the
        brief's current revision over a drifted post again, under its own key.
        """
        body: dict[str, Any] = {
            "operation_key": operation_key,
            "brief_id": brief_id,
            "revision": revision,
            "payload_hash": payload_hash,
            "payload": payload,
        }
        if rendered is not None:
            body["rendered"] = rendered
        if republish:
            body["republish"] = True
        content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        response = self._send(
            "POST",
            "/v1/publications",
            content=content,
            headers={
                **self._auth,
                "Idempotency-Key": operation_key,
                "Content-Type": "application/json",
            },
        )
        if response.status_code not in (200, 201):
            raise self._error(response)
        receipt = self._receipt(response)
        sent = (operation_key, brief_id, revision, payload_hash)
        got = (receipt.operation_key, receipt.brief_id, receipt.revision, receipt.payload_hash)
        if got != sent:
            raise TargetInvalidResponse(
                f"The target answered for {got} to a publish of {sent}", status=response.status_code
            )
        return receipt, response.status_code == 201

    def lookup(self, operation_key: str) -> Receipt | None:
        """The publication applied under operation_key, or None if the target has none."""
        response = self._send("GET", "/v1/publications", params={"operation_key": operation_key}, headers=self._auth)
        if self._held_nothing(response):
            return None
        receipt = self._receipt(response)
        if receipt.operation_key != operation_key:
            raise TargetInvalidResponse(
                f"A look-up of {operation_key!r} returned {receipt.operation_key!r}", status=200
            )
        return receipt

    def held_of_brief(self, brief_id: str) -> BriefHeld | None:
        """The newest revision of `brief_id` the target holds, or None if it holds none."""
        response = self._send("GET", f"/v1/briefs/{quote(brief_id, safe='')}", headers=self._auth)
        if self._held_nothing(response):
            return None
        body = self._json(response)
        try:
            held = BriefHeld(
                brief_id=str(body["brief_id"]), revision=int(body["revision"]), permalink=str(body["permalink"])
            )
        except (KeyError, TypeError, ValueError):
            raise TargetInvalidResponse(f"A look-up of brief {brief_id!r} answered {body!r:.200}", status=200) from None
        if held.brief_id != brief_id or held.revision < 1:
            raise TargetInvalidResponse(f"A look-up of brief {brief_id!r} answered {body!r:.200}", status=200)
        return held

    def _held_nothing(self, response: httpx.Response) -> bool:
        """True for a look-up's 404 not_found (the target holds nothing); raises for any other answer but 200."""
        if response.status_code == 404:
            if self._json(response).get("error") == "not_found":
                return True
            raise TargetInvalidResponse("A 404 without the not_found body: is the target URL right?", status=404)
        if response.status_code != 200:
            raise self._error(response)
        return False

    def read_back(self, publication_id: str) -> Receipt:
        """The stored publication by the target's id (payload hash and permalink as the target holds them)."""
        response = self._send("GET", f"/v1/publications/{publication_id}", headers=self._auth)
        if response.status_code == 404:
            raise TargetNotFound(f"The target has no publication {publication_id!r}", status=404)
        if response.status_code != 200:
            raise self._error(response)
        receipt = self._receipt(response)
        if receipt.id != publication_id:
            raise TargetInvalidResponse(f"A read-back of {publication_id!r} returned {receipt.id!r}", status=200)
        return receipt

    def retract(
        self, *, publication_id: str, operation_key: str, brief_id: str, revision: int, reason: str
    ) -> RetractionReceipt:
        """POST the retraction of the brief's article, through its publication `publication_id`, with
        Idempotency-Key = operation_key (the retraction key); `revision` is the one taken down.

        A first application (201) and a replay (200) answer the same receipt. Raises TargetNotFound for an
        unknown id, TargetStaleRevision when the target holds a newer revision than `revision`,
        TargetKeyMismatch when the key was used for another retraction, and the other TargetErrors as a
        publish does (TargetAmbiguous: it may have been applied). A receipt for another key, publication or
        revision, or one that is not retracted, is TargetInvalidResponse, never success.
        """
        body = {"operation_key": operation_key, "brief_id": brief_id, "revision": revision, "reason": reason}
        response = self._send(
            "POST",
            f"/v1/publications/{quote(publication_id, safe='')}/retraction",
            content=json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8"),
            headers={**self._auth, "Idempotency-Key": operation_key, "Content-Type": "application/json"},
        )
        if response.status_code == 404:
            raise TargetNotFound(f"The target has no publication {publication_id!r} to retract", status=404)
        if response.status_code not in (200, 201):
            raise self._error(response)
        answer = self._json(response)
        receipt_id, key, number = answer.get("id"), answer.get("operation_key"), answer.get("revision")
        retracted_at = answer.get("retracted_at")
        if (receipt_id, key, number, answer.get("retracted")) != (publication_id, operation_key, revision, True) or (
            not isinstance(retracted_at, str) or not retracted_at
        ):
            raise TargetInvalidResponse(
                f"The target answered {answer!r:.300} to the retraction {operation_key} of {publication_id}",
                status=response.status_code,
            )
        return RetractionReceipt(
            id=publication_id, operation_key=operation_key, revision=revision, retracted=True, retracted_at=retracted_at
        )

    def fetch_permalink(self, url: str) -> str:
        """The text of the published page at `url` as a reader sees it (markup removed).

        The protocol defines no markup on the page (docs/target-protocol.md#permalink), so this
        returns no more than the text; the caller decides whether it shows the article. Pages are
        public: the bearer token is not sent, so a permalink on another host never sees it.
        """
        response = self._send("GET", url, headers={"Accept": "text/html"}, follow_redirects=True)
        if response.status_code == 404:
            raise TargetNotFound(f"Nothing is published at {url}", status=404)
        if response.status_code == 410:
            raise TargetGone(f"The article at {url} was taken down (410 Gone)", status=410)
        if response.status_code != 200:
            raise self._error(response)
        reader = _PageText()
        reader.feed(response.text)
        reader.close()
        return " ".join(reader.parts)

    def check(self) -> str:
        """What examine() found, in one line (a missing fence confirmation included, as a warning)."""
        return str(self.examine())

    def examine(self) -> TargetCheck:
        """Whether the target answers the protocol and accepts our credentials (a look-up of a key
        that cannot exist must answer not_found), and whether it confirms a revision fence at
        GET /v1/status ({"fence": true}). Raises a TargetError that says what is wrong with the
        first two; a fence it does not confirm (it says false, has no status route, or its status
        cannot be asked) is not an error but TargetCheck.fence_confirmed False: the status route is
        optional in the protocol (docs/target-protocol.md#status), so a faithful target may have a
        fence and not say so. "A §7.4 target", in what check_target prints, is a target speaking
        docs/target-protocol.md (the words operators and the tests know)."""
        if self.lookup("galley-check:no-such-operation") is not None:
            raise TargetInvalidResponse("The target claims to hold a key Galley never sends; is this a §7.4 target?")
        found = f"§7.4 target at {self.base_url}: it answers the protocol and accepts {self.credentials}"
        try:
            response = self._send("GET", "/v1/status", headers=self._auth)
        except TargetAmbiguous as problem:  # it answered the look-up: the status alone could not be asked
            return TargetCheck(
                found, fence_confirmed=False, fence_answer=f"GET /v1/status could not be asked: {problem}"
            )
        if response.status_code in (401, 403):
            raise self._error(response)
        if response.status_code != 200:
            return TargetCheck(
                found, fence_confirmed=False, fence_answer=f"GET /v1/status answered {response.status_code}"
            )
        try:
            fence = self._json(response).get("fence")
        except TargetInvalidResponse:
            return TargetCheck(found, fence_confirmed=False, fence_answer="GET /v1/status answered no JSON object")
        if fence is not True:
            answer = f'GET /v1/status says "fence": {json.dumps(fence)}'
            return TargetCheck(found, fence_confirmed=False, fence_answer=answer)
        return TargetCheck(f"{found}; its revision fence is on", fence_confirmed=True)

    # --- plumbing --------------------------------------------------------------------------

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        if "Authorization" in kwargs.get("headers", {}) and not self._token:
            # Known before anything leaves the process: an operator's fix, not an ambiguous retry.
            raise TargetAuthError(
                f"No target credentials are configured ({self.credentials} is empty); nothing was sent"
            )
        try:
            return self._http.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise TargetTimeout(
                f"No answer from the target within {self.timeout}s ({type(exc).__name__}); "
                "the request may have been applied"
            ) from exc
        except httpx.RequestError as exc:
            raise TargetConnectionError(
                f"Connection to the target failed ({type(exc).__name__}: {exc}); the request may have been applied"
            ) from exc

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            raise TargetInvalidResponse(
                f"The target's answer is not JSON: {response.text[:200]!r}", status=response.status_code
            ) from None
        if not isinstance(body, dict):
            raise TargetInvalidResponse(
                f"The target's answer is not a JSON object: {body!r:.200}", status=response.status_code
            )
        return body

    @classmethod
    def _receipt(cls, response: httpx.Response) -> Receipt:
        body = cls._json(response)
        fields: dict[str, Any] = {}
        for name in ("id", "operation_key", "brief_id", "payload_hash", "permalink"):
            value = body.get(name)
            if not isinstance(value, str) or not value:
                raise TargetInvalidResponse(
                    f"The target's receipt has no valid {name}: {body!r:.300}", status=response.status_code
                )
            fields[name] = value
        revision = body.get("revision")
        if not isinstance(revision, int) or isinstance(revision, bool):
            raise TargetInvalidResponse(
                f"The target's receipt has no valid revision: {body!r:.300}", status=response.status_code
            )
        retracted, retracted_at = body.get("retracted", False), body.get("retracted_at") or ""
        if not isinstance(retracted, bool) or not isinstance(retracted_at, str):
            raise TargetInvalidResponse(
                f"The target's receipt has no valid retraction state: {body!r:.300}", status=response.status_code
            )
        return Receipt(
            revision=revision,
            live=cls._live(body.get("live"), status=response.status_code),
            retracted=retracted,
            retracted_at=retracted_at,
            **fields,
        )

    @staticmethod
    def _live(live: Any, *, status: int) -> LiveContent | None:
        if live is None:
            return None
        texts = ("hash", "title", "body", "excerpt", "status", "modified_gmt")
        valid = (
            isinstance(live, dict)
            and all(isinstance(live.get(name, ""), str) for name in texts)
            and _SHA256.fullmatch(live.get("hash", "")) is not None
            and isinstance(live.get("revision"), int)
            and not isinstance(live.get("revision"), bool)
        )
        if not valid:
            raise TargetInvalidResponse(f"The target's live content is not valid: {live!r:.300}", status=status)
        return LiveContent(revision=live["revision"], **{name: live.get(name, "") for name in texts})

    @classmethod
    def _error(cls, response: httpx.Response) -> TargetError:
        """The exception for a non-success status (raised by the caller)."""
        status = response.status_code
        if status in (429, 503):
            retry_after = http.parse_retry_after(response.headers.get("Retry-After"))
            wait = f"retry after {retry_after:g}s" if retry_after is not None else "no Retry-After given"
            return TargetThrottled(
                f"The target is throttling or unavailable; {wait}", status=status, retry_after=retry_after
            )
        if status >= 500:
            return TargetServerError(f"The target failed: {response.text[:200]!r}", status=status)
        if status in (401, 403):
            return TargetAuthError(f"The target refused our credentials; check {cls.credentials}", status=status)
        if status == 422:
            body = cls._json(response)
            if body.get("error") != "idempotency_mismatch":
                return TargetInvalidResponse(f"Unexpected 422 body: {body!r:.300}", status=status)
            return TargetKeyMismatch(
                "The target already applied this operation key with a different payload hash", status=status
            )
        if status == 409:
            body = cls._json(response)
            if body.get("error") == "in_progress":
                return TargetInProgress("The target is applying this operation key right now", status=status)
            current = body.get("current_revision")
            if body.get("error") == "stale_revision" and isinstance(current, int) and not isinstance(current, bool):
                return TargetStaleRevision(
                    f"The target already holds revision {current} of this brief",
                    status=status,
                    current_revision=current,
                )
            return TargetInvalidResponse(f"Unexpected 409 body: {body!r:.300}", status=status)
        if 400 <= status < 500:
            try:
                detail = cls._json(response).get("detail") or response.text[:200]
            except TargetInvalidResponse:
                detail = response.text[:200]
            return TargetRejected(f"The target rejected the request: {detail}", status=status)
        return TargetInvalidResponse(f"Unexpected status from the target: {response.text[:200]!r}", status=status)


class WordPressClient(TargetClient):
    """WordPress with Galley's companion plugin (publishing/clients/wordpress/galley-publishing.php),
    which speaks the target protocol under /wp-json/galley/v1 and gives WordPress what core lacks: the operation
    key reserved atomically, the revision fence, one transaction per write. Application-password
    (Basic) authentication."""

    credentials = "GALLEY_WORDPRESS_USER / GALLEY_WORDPRESS_APP_PASSWORD"
    PLUGIN = "galley-publishing"
    # 2: lookups and read-backs report the post's live content (drift), and a republish is accepted.
    # 3: structured stories: the rendered story is the post's content, excerpt, tags, category and byline.
    # 4: retraction (POST /v1/publications/{id}/retraction; "retracted"/"retracted_at" on look-ups and read-backs).
    PLUGIN_VERSION = "4"

    def __init__(
        self,
        *,
        site_url: str,
        user: str,
        app_password: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        credentials = f"{user}:{app_password}" if user.strip() and app_password.strip() else ""
        super().__init__(
            base_url=f"{site_url.rstrip('/')}/wp-json/galley", token=credentials, timeout=timeout, transport=transport
        )
        self.site_url = site_url.rstrip("/")
        self.user = user
        self._auth = {"Authorization": "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")}

    def examine(self) -> TargetCheck:
        """The plugin answers, in the version Galley speaks, with the revision fence on, and
        WordPress accepts the application password. A wrong password reaches WordPress as an
        anonymous visitor, which the plugin refuses with 401. The plugin is Galley's own and always
        fences, so a status without the fence is a wrong plugin: an error, not a warning."""
        response = self._send("GET", "/v1/status", headers=self._auth)
        if response.status_code in (401, 403):
            raise self._error(response)
        if response.status_code == 404:
            raise TargetInvalidResponse(
                f"The {self.PLUGIN} plugin does not answer at {self.base_url}/v1/status: copy "
                "publishing/clients/wordpress/galley-publishing.php into wp-content/mu-plugins/ "
                "(and check GALLEY_WORDPRESS_URL)",
                status=404,
            )
        if response.status_code != 200:
            raise self._error(response)
        status = self._json(response)
        if status.get("plugin") != self.PLUGIN or str(status.get("version")) != self.PLUGIN_VERSION:
            raise TargetInvalidResponse(
                f"WordPress runs {status.get('plugin')!r} version {status.get('version')!r}; Galley needs "
                f"{self.PLUGIN} version {self.PLUGIN_VERSION} (publishing/clients/wordpress/galley-publishing.php)",
                status=200,
            )
        if status.get("fence") is not True:
            raise TargetInvalidResponse("The plugin does not confirm its revision fence", status=200)
        return TargetCheck(
            f"WordPress at {self.site_url}: plugin {self.PLUGIN} {self.PLUGIN_VERSION}, revision fence on, "
            f"signed in as {status.get('user')!r}",
            fence_confirmed=True,
        )


def shared_from_settings() -> TargetClient:
    """The process's one client for the configured target (settings read now): the protocol's
    reference target, or WordPress with the companion plugin."""
    timeout = float(getattr(settings, "GALLEY_TARGET_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS))
    if getattr(settings, "GALLEY_TARGET_KIND", "reference") == "wordpress":
        return _shared_wordpress.get(
            site_url=settings.GALLEY_WORDPRESS_URL,
            user=settings.GALLEY_WORDPRESS_USER,
            app_password=settings.GALLEY_WORDPRESS_APP_PASSWORD,
            timeout=timeout,
        )
    return _shared.get(
        base_url=getattr(settings, "GALLEY_TARGET_URL", DEFAULT_URL),
        token=getattr(settings, "GALLEY_TARGET_TOKEN", ""),
        timeout=timeout,
    )


def check_configured_target() -> str:
    """What the configured target's check found, in one line (a worker's startup check); raises a
    TargetError saying what is wrong. A fence the target does not confirm is not part of the line:
    it is one WARNING per process (warn_unconfirmed_fence), however often the check runs."""
    found = shared_from_settings().examine()
    if not found.fence_confirmed:
        warn_unconfirmed_fence(found)
    return found.found


_fence_warning = threading.Lock()
_fence_warned = False


def warn_unconfirmed_fence(found: TargetCheck) -> None:
    """Log why an unconfirmed fence matters, the first time this process learns it: every worker
    process checks its target when it starts, and a warning per start (or per check) is noise that
    hides the one that matters."""
    global _fence_warned
    with _fence_warning:
        if _fence_warned:
            return
        _fence_warned = True
    logger.warning("%s", found.fence_warning)


_shared: http.SharedPerProcess[TargetClient] = http.SharedPerProcess(TargetClient)
_shared_wordpress: http.SharedPerProcess[WordPressClient] = http.SharedPerProcess(WordPressClient)
