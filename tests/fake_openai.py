"""A local OpenAI-compatible Chat Completions server for tests: never the internet
(docs/testing.md#layers).

Run as a process::

    python -m tests.fake_openai --port P [--host H] [--key K] [--rate-429 P] [--retry-after S]
        [--rate-500 P] [--rate-timeout P] [--timeout-seconds S] [--seed N] [--calls-file PATH]

or in a thread: ``fake = FakeOpenAI(port=0, key=..., rate_429=...).start()``; ``fake.url``;
``fake.calls()``; ``fake.stop()`` (also a context manager).

Endpoints
    POST /v1/chat/completions   Bearer key (401 if wrong or missing); answers a chat.completion
    GET  /_calls                {"calls": [{"n", "system_task", "status", "fault"}, ...]} of this server
    POST /_faults               {"rate_429", "rate_500", "rate_timeout", "retry_after", "timeout_seconds"}
                                (any subset) changes fault injection at runtime; answers the current values
    GET  /_health               liveness, for wait_for_http

The answer's text is a plausible answer for the task the system message names ("You write the
outline|draft|headline"), built from the user message's material after its first blank line, and
always carries the call number ``n``, so two calls never answer the same text.

Every POST to /v1/chat/completions is a call: numbered ``n`` from 1, recorded (before a timeout
fault's sleep, so a client that gave up still sees it counted) and, with ``--calls-file``, appended
there as one JSON line. A server started on an existing calls file continues its numbering, so
the file counts calls per step across restarts.

Faults, for an authorised well-formed request, from one seeded generator (three draws per call,
so the sequence depends only on the seed and the call order): 429 with Retry-After, else 500,
else "timeout" (sleep ``timeout_seconds``, which should exceed the client's timeout, then answer).
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import random
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from publishing.summary_rules import cut_off_ending

DEFAULT_KEY = "fake-openai-key"
DEFAULT_MODEL = "fake-gpt-1"
MAX_BODY_BYTES = 4 * 1024 * 1024

_TASK = re.compile(r"You write the (\w+)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_BULLET = re.compile(r"^\s*[-*]\s+", re.MULTILINE)
# The sentence that carries the call number; dropped from material so it never piles up step by step.
_UPDATE = re.compile(r"\bupdate \d+\b", re.IGNORECASE)
_FILLER = [
    "Officials have not yet commented.",
    "The situation is still developing.",
    "Reporters are following the story.",
]


def _sentences(material: str) -> list[str]:
    text = " ".join(_BULLET.sub("", material).split())
    return [
        sentence.strip()
        for sentence in _SENTENCE.split(text)
        if sentence.strip() and not _UPDATE.search(sentence) and not _TASK.search(sentence)
    ]


def task_of(system: str) -> str | None:
    """The task the system message names ("outline", "draft", "headline"), or None."""
    match = _TASK.search(system)
    return match.group(1).lower() if match else None


def answer(*, system: str, user: str, n: int, seed: int | None = None) -> str:
    """The completion text of call `n`: a plausible answer for the task named in `system`."""
    task = task_of(system)
    material = user.split("\n\n", 1)[1] if "\n\n" in user else user
    sentences = _sentences(material) or _FILLER[:2]
    rng = random.Random(f"{seed}:{n}:{task}")
    if task == "headline":
        # "Update n:" and 3-8 words of one sentence (5-10 words), ending where the quality gate sees
        # no cut-off (no dangling "of"/"the"/"along"): fewer words first, more only if none fits.
        long_enough = [s for s in sentences if len(s.split()) >= 3] or [
            sentences[0].rstrip(".!?") + " in latest report"
        ]
        words = rng.choice(long_enough).rstrip(".!?").split()
        count = rng.randint(3, 8)
        fitting = [
            size
            for size in [*range(min(count, len(words)), 2, -1), *range(count + 1, len(words) + 1)]
            if not cut_off_ending(" ".join(words[:size]).rstrip(".!?,;:"))
        ]
        return " ".join([f"Update {n}:", *words[: fitting[0] if fitting else count]]).rstrip(".!?,;:")
    count = min(len(sentences), rng.randint(1, 3))
    picked = [sentences[index] for index in sorted(rng.sample(range(len(sentences)), count))]
    picked.append(f"More details are expected in update {n}.")
    if task == "outline":
        return "\n".join(f"- {line}" for line in picked)
    return " ".join(picked)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], fake: FakeOpenAI) -> None:
        self.fake = fake
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # One request per connection: stop() never waits for an idle keep-alive client.
    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        self.close_connection = True
        fields = {"Content-Type": "application/json", "Content-Length": str(len(data)), "Connection": "close"}
        # A client that gave up (its timeout) has nothing left to be told.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(status)
            for name, value in {**fields, **(headers or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "code": None}}, headers)

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return None
        if not 0 <= length <= MAX_BODY_BYTES:
            return None
        try:
            return json.loads(self.rfile.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/_health":
            self._json(200, {"status": "ok"})
        elif path == "/_calls":
            self._json(200, {"calls": self.server.fake.calls()})
        else:
            self._error(404, f"no route {path}", "invalid_request_error")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/_faults":
            self._set_faults()
        elif path in ("/v1/chat/completions", "/chat/completions"):
            self._complete()
        else:
            self._error(404, f"no route {path}", "invalid_request_error")

    def _set_faults(self) -> None:
        body = self._body()
        if not isinstance(body, dict):
            self._error(400, "send a JSON object", "invalid_request_error")
            return
        try:
            current = self.server.fake.set_faults(**body)
        except (TypeError, ValueError) as exc:
            self._error(400, str(exc), "invalid_request_error")
            return
        self._json(200, current)

    def _complete(self) -> None:
        fake = self.server.fake
        body = self._body()
        messages = body.get("messages") if isinstance(body, dict) else None
        valid = isinstance(messages, list) and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
        )
        system = "\n".join(m["content"] for m in messages if m.get("role") == "system") if valid else ""
        user = "\n\n".join(m["content"] for m in messages if m.get("role") == "user") if valid else ""
        task = task_of(system)
        scheme, _, key = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), fake.key.encode()):
            fake.record(task, 401, None)
            self._error(401, "Incorrect API key provided.", "invalid_request_error")
            return
        if not valid:
            fake.record(task, 400, None)
            self._error(400, "messages must be a list of {role, content} objects", "invalid_request_error")
            return
        fault = fake.draw()
        status = {"429": 429, "500": 500}.get(fault or "", 200)
        n = fake.record(task, status, fault)
        if fault == "429":
            self._error(
                429,
                "Rate limit reached for requests.",
                "requests",
                {"Retry-After": f"{fake.retry_after:g}"},
            )
            return
        if fault == "500":
            self._error(500, "The server had an error while processing your request.", "server_error")
            return
        if fault == "timeout":
            fake.pause(fake.timeout_seconds)
        text = answer(system=system, user=user, n=n, seed=fake.seed)
        prompt_tokens = len(system.split()) + len(user.split())
        completion_tokens = len(text.split())
        self._json(
            200,
            {
                "id": f"chatcmpl-fake-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or DEFAULT_MODEL),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )


def _rate(name: str, value: Any) -> float:
    rate = float(value)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"{name} must be a probability between 0 and 1, got {value!r}")
    return rate


class FakeOpenAI:
    """The fake as an object: bound on construction (port 0 picks a free one), served by start().

    Its own small thread runner, on purpose: a test double shares no code with the product.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        key: str = DEFAULT_KEY,
        rate_429: float = 0.0,
        retry_after: float = 1.0,
        rate_500: float = 0.0,
        rate_timeout: float = 0.0,
        timeout_seconds: float = 30.0,
        seed: int | None = None,
        calls_file: str | Path | None = None,
    ) -> None:
        self.key = key
        self.seed = seed
        self.rate_429 = self.rate_500 = self.rate_timeout = 0.0
        self.retry_after = self.timeout_seconds = 0.0
        self.set_faults(
            rate_429=rate_429,
            rate_500=rate_500,
            rate_timeout=rate_timeout,
            retry_after=retry_after,
            timeout_seconds=timeout_seconds,
        )
        self.calls_file = Path(calls_file) if calls_file is not None else None
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._calls: list[dict[str, Any]] = []
        self._last_n = self._last_n_in_file()
        self._server = _Server((host, port), self)
        self.host = host
        self.port: int = self._server.server_address[1]
        self._woken = threading.Event()
        # What stop() undoes, last first: shut the serving loop down, then join its thread.
        self._running = contextlib.ExitStack()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> FakeOpenAI:
        # Polls every 0.1 s, so stop() (a shutdown request) takes effect at once.
        serving = threading.Thread(target=self._server.serve_forever, args=(0.1,), name="fake-openai", daemon=True)
        serving.start()
        self._running.callback(serving.join)
        self._running.callback(self._server.shutdown)
        return self

    def stop(self) -> None:
        self._woken.set()  # a timeout fault's sleep ends now
        self._running.close()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def pause(self, seconds: float) -> None:
        """A timeout fault's sleep, cut short by stop()."""
        self._woken.wait(seconds)

    def _last_n_in_file(self) -> int:
        if self.calls_file is None or not self.calls_file.exists():
            return 0
        numbers = [json.loads(line)["n"] for line in self.calls_file.read_text().splitlines() if line.strip()]
        return max(numbers, default=0)

    def set_faults(
        self,
        *,
        rate_429: float | None = None,
        rate_500: float | None = None,
        rate_timeout: float | None = None,
        retry_after: float | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, float]:
        """Change fault injection (None keeps a value); returns the current values."""
        values = {
            "rate_429": self.rate_429 if rate_429 is None else _rate("rate_429", rate_429),
            "rate_500": self.rate_500 if rate_500 is None else _rate("rate_500", rate_500),
            "rate_timeout": self.rate_timeout if rate_timeout is None else _rate("rate_timeout", rate_timeout),
            "retry_after": self.retry_after if retry_after is None else float(retry_after),
            "timeout_seconds": self.timeout_seconds if timeout_seconds is None else float(timeout_seconds),
        }
        if values["retry_after"] < 0 or values["timeout_seconds"] < 0:
            raise ValueError("retry_after and timeout_seconds must not be negative")
        for name, value in values.items():
            setattr(self, name, value)
        return values

    def draw(self) -> str | None:
        """This call's fault: "429", "500", "timeout" or None."""
        with self._lock:
            throttle, error, hang = (self._random.random() for _ in range(3))
        if throttle < self.rate_429:
            return "429"
        if error < self.rate_500:
            return "500"
        if hang < self.rate_timeout:
            return "timeout"
        return None

    def record(self, task: str | None, status: int, fault: str | None) -> int:
        """Count one call (in memory and in the calls file); returns its number."""
        with self._lock:
            self._last_n += 1
            call = {"n": self._last_n, "system_task": task, "status": status, "fault": fault}
            self._calls.append(call)
            if self.calls_file is not None:
                with self.calls_file.open("a") as file:
                    file.write(json.dumps(call) + "\n")
            return self._last_n

    def calls(self) -> list[dict[str, Any]]:
        """This server's calls, in order (the calls file also holds earlier servers' calls)."""
        with self._lock:
            return [dict(call) for call in self._calls]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fake_openai", description="A local OpenAI-compatible Chat Completions server."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on start).")
    parser.add_argument("--key", default=DEFAULT_KEY, help=f"Accepted bearer key (default {DEFAULT_KEY}).")
    parser.add_argument("--rate-429", type=float, default=0.0, help="Probability of 429 with Retry-After.")
    parser.add_argument("--retry-after", type=float, default=1.0, help="Retry-After seconds sent with 429.")
    parser.add_argument("--rate-500", type=float, default=0.0, help="Probability of 500.")
    parser.add_argument("--rate-timeout", type=float, default=0.0, help="Probability of a slow answer.")
    parser.add_argument(
        "--timeout-seconds", type=float, default=30.0, help="How long a timeout fault sleeps before answering."
    )
    parser.add_argument("--seed", type=int, default=None, help="Seed of the fault (and text) generator.")
    parser.add_argument("--calls-file", default=None, help="Append every call here as a JSON line.")
    args = parser.parse_args(argv)
    try:
        fake = FakeOpenAI(
            port=args.port,
            host=args.host,
            key=args.key,
            rate_429=args.rate_429,
            retry_after=args.retry_after,
            rate_500=args.rate_500,
            rate_timeout=args.rate_timeout,
            timeout_seconds=args.timeout_seconds,
            seed=args.seed,
            calls_file=args.calls_file,
        )
    except ValueError as exc:
        parser.error(str(exc))
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    fake.start()
    try:
        print(f"fake openai on {fake.url}", flush=True)
        # A flag and a short sleep: a signal handler must not take a lock the main thread may hold.
        while not stopping:
            time.sleep(0.1)
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
