"""Typed httpx client that POSTs one signed event to a webhook subscriber (docs/webhooks.md).

    WebhookError(http.ServiceError)
    ├── WebhookTimeout           no answer in time (or 408): retried with backoff, the same event id
    ├── WebhookConnectionError   could not connect, or the connection dropped: retried likewise
    ├── WebhookThrottled         429/503: wait Retry-After (a wait, not a counted attempt)
    ├── WebhookServerError       other 5xx: back off with jitter
    ├── WebhookAuthError         401/403: dead letter, an operator must fix the secret or the URL
    └── WebhookRejected          any other status outside 2xx (redirects too): dead letter

A retry after an ambiguous failure simply sends again: the subscriber keeps the event once by its
Idempotency-Key (the event id). The client never retries itself: workers.policy does.
"""

from __future__ import annotations

import hashlib
import hmac
import time

import httpx

from publishing.clients import http

DEFAULT_TIMEOUT_SECONDS = 5.0
SIGNATURE_HEADER = "Galley-Signature"


class WebhookError(http.ServiceError):
    pass


class WebhookTimeout(WebhookError, http.ServiceTimeout):
    pass


class WebhookConnectionError(WebhookError, http.ServiceConnectionError):
    pass


class WebhookThrottled(WebhookError, http.ServiceThrottled):
    pass


class WebhookServerError(WebhookError, http.ServiceServerError):
    pass


class WebhookAuthError(WebhookError, http.ServiceAuthError):
    pass


class WebhookRejected(WebhookError, http.ServiceRejected):
    pass


def signature(secret: str, *, timestamp: int, body: bytes) -> str:
    """The Galley-Signature value: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`."""
    signed = f"{timestamp}.".encode("ascii") + body
    digest = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class WebhookClient:
    """One httpx client for every subscriber (shared by the worker's threads); explicit timeout,
    no redirects followed (a subscriber's URL is the one registered, not where it points on)."""

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT_SECONDS, transport: httpx.BaseTransport | None = None):
        self.timeout = timeout
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout),
            transport=transport,
            follow_redirects=False,
            headers={"User-Agent": "galley-webhooks/1", "Content-Type": "application/json"},
            event_hooks={"request": [http.refuse_request_in_transaction]},
        )

    def close(self) -> None:
        self._http.close()

    def deliver(self, url: str, *, event_id: str, body: bytes, secret: str) -> int:
        """POST `body` signed with `secret` now; returns the 2xx status, else raises a WebhookError."""
        timestamp = int(time.time())
        headers = {
            "Idempotency-Key": event_id,
            "Galley-Event-Id": event_id,
            "Galley-Timestamp": str(timestamp),
            SIGNATURE_HEADER: signature(secret, timestamp=timestamp, body=body),
        }
        try:
            response = self._http.post(url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise WebhookTimeout(
                f"No answer from the subscriber within {self.timeout}s ({type(exc).__name__})"
            ) from exc
        except httpx.RequestError as exc:
            raise WebhookConnectionError(f"Connection to the subscriber failed ({type(exc).__name__}: {exc})") from exc
        status = response.status_code
        if 200 <= status < 300:
            return status
        if status in (429, 503):
            retry_after = http.parse_retry_after(response.headers.get("Retry-After"))
            raise WebhookThrottled("The subscriber asked Galley to wait", status=status, retry_after=retry_after)
        if status == 408:
            raise WebhookTimeout("The subscriber timed out reading the request", status=status)
        if status >= 500:
            raise WebhookServerError(f"The subscriber failed: {response.text[:200]!r}", status=status)
        if status in (401, 403):
            raise WebhookAuthError("The subscriber refused the request; check its secret and URL", status=status)
        raise WebhookRejected(f"The subscriber refused the event: {response.text[:200]!r}", status=status)


_shared: http.SharedPerProcess[WebhookClient] = http.SharedPerProcess(WebhookClient)


def shared_client(*, timeout: float) -> WebhookClient:
    return _shared.get(timeout=timeout)
