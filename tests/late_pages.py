"""A reference target whose article pages come late, as behind a CMS's cache: the first `times` requests
for each permalink answer 404, later ones the page. The publication itself (POST, look-up, read-back) is
there at once, so a publish's own attempt cannot observe its page and a verify operation does
(docs/invariants.md#i5).

    serve_pages_late(target, times=1)                      # a target served from a thread of the test
    python -m tests.late_pages --late-pages 1 --port 0 …   # a target of its own (the reference target's options)
    with pages_not_there_yet(monkeypatch): …               # any target (WordPress): a cache in front of its pages
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from galley.reference_target import ReferenceTarget
from galley.reference_target import http as target_http
from galley.reference_target.__main__ import main as reference_target_main

NOT_YET_HTML = b"<!doctype html><title>Not found</title><p>Not found.</p>\n"


def late_pages_handler(times: int) -> type[target_http._Handler]:
    """The reference target's request handler, its article pages answering 404 `times` times each first."""
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    class LatePages(target_http._Handler):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if target_http._ARTICLE_PATH.fullmatch(path):
                with lock:
                    asked[path] += 1
                    late = asked[path] <= times
                if late:
                    self._send(404, NOT_YET_HTML, "text/html; charset=utf-8")
                    return
            super().do_GET()

    return LatePages


def serve_pages_late(target: ReferenceTarget, *, times: int = 1) -> None:
    """From now on, each of `target`'s article pages answers 404 its first `times` requests."""
    target._server.RequestHandlerClass = late_pages_handler(times)
    # A kept-alive connection goes on with the handler it began with: Galley's clients connect anew.
    target._server.close_open_connections()


@contextlib.contextmanager
def pages_not_there_yet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While inside: every permalink page Galley asks for answers 404, as a cache in front of a target's
    pages (WordPress's, which the test does not serve) does before the page reaches it."""
    # Imported here: the target's own process (main) reads no Django settings.
    from publishing.clients.target import TargetClient, TargetNotFound

    def not_there(client: TargetClient, url: str) -> str:
        raise TargetNotFound(f"Nothing is published at {url}", status=404)

    with monkeypatch.context() as patched:
        patched.setattr(TargetClient, "fetch_permalink", not_there)
        yield


def main(argv: list[str]) -> int:
    """The reference target's command line, with `--late-pages N` first."""
    flag, times, *rest = argv
    if flag != "--late-pages":
        raise SystemExit("usage: python -m tests.late_pages --late-pages N [reference target options]")
    target_http._Handler = late_pages_handler(int(times))  # what TargetServer serves with, read as it is built
    return reference_target_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
