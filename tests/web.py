"""Helpers for the web-UI tests: what a page's forms carry, and what the database holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from django.http import HttpResponse
from django.test import Client
from django.utils.html import escape

from approvals.models import Approval
from publishing.models import Brief, Revision
from workers.models import AuditEvent, Operation


def policy_directives(header: str) -> dict[str, str]:
    """A Content-Security-Policy header as {directive: sources}; the header's directive order is not fixed."""
    return dict([*part.strip().split(" ", 1), ""][:2] for part in header.split(";") if part.strip())


def db_counts() -> dict[str, int]:
    """Rows of every table a web action may write; equal before and after means nothing was written."""
    return {
        "Brief": Brief.objects.count(),
        "Revision": Revision.objects.count(),
        "Approval": Approval.objects.count(),
        "AuditEvent": AuditEvent.objects.count(),
        "Operation": Operation.objects.count(),
    }


class _FormParser(HTMLParser):
    """Collects each <form>'s field values as a browser would submit them (text inputs, hidden, textarea, the
    checked radio button of a group).

    Fields outside any form are collected too, into one last pseudo-form.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict[str, Any]] = []
        self.outside: dict[str, Any] = {"_attrs": {}, "_buttons": []}
        self._current: dict[str, Any] = self.outside
        self._textarea: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {name: value or "" for name, value in attrs}
        if tag == "form":
            self._current = {"_attrs": attr, "_buttons": []}
            self.forms.append(self._current)
        elif tag == "input" and attr.get("name"):
            if attr.get("type", "text") in {"submit", "button", "image"}:
                self._current["_buttons"].append((attr["name"], attr.get("value", "")))
            elif attr.get("type") == "radio":  # a browser sends the checked one of a group only
                if "checked" in attr:
                    self._current[attr["name"]] = attr.get("value", "")
            else:
                self._current[attr["name"]] = attr.get("value", "")
        elif tag == "button" and attr.get("name"):
            self._current["_buttons"].append((attr["name"], attr.get("value", "")))
        elif tag == "textarea":
            self._textarea, self._text = attr.get("name", ""), []

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._textarea is not None:
            text = "".join(self._text)
            # HTML drops one newline right after <textarea>; Django's widget writes one.
            self._current[self._textarea] = text[1:] if text.startswith("\n") else text
            self._textarea = None
        elif tag == "form":
            self._current = self.outside


def page_forms(response: HttpResponse) -> list[dict[str, Any]]:
    parser = _FormParser()
    parser.feed(response.content.decode())
    parser.close()
    return [*parser.forms, parser.outside]


def form_values(response: HttpResponse, *, containing: str) -> dict[str, str]:
    """The values of the first form on the page that has a field named `containing` (see _FormParser)."""
    for form in page_forms(response):
        if containing in form:
            return {name: value for name, value in form.items() if not name.startswith("_")}
    raise AssertionError(f"no form with a field {containing!r} on the page")


def form_buttons(response: HttpResponse, *, containing: str) -> list[tuple[str, str]]:
    """(name, value) of the named submit buttons of the first form that has a field named `containing`."""
    for form in page_forms(response):
        if containing in form:
            return form["_buttons"]
    raise AssertionError(f"no form with a field {containing!r} on the page")


@dataclass(frozen=True)
class Outcome:
    """What one role gets from one request in the permission matrix.

    `location` is the exact Location of a redirect ("{path}" is the requested path, "{new_brief}"
    the newest brief's URL); `writes` the rows the request must add, per table; every other
    table is left as it was.
    """

    status: int
    message: str = ""
    location: str = ""
    writes: dict[str, int] = field(default_factory=dict)


TO_LOGIN = Outcome(302, location="/login/?next={path}")


def refused(message: str) -> Outcome:
    return Outcome(403, message=message)


def assert_outcome(response: HttpResponse, outcome: Outcome, *, path: str, before: dict[str, int]) -> None:
    assert response.status_code == outcome.status, response.content.decode()[:2000]
    if outcome.location:
        newest = Brief.objects.order_by("-id").first()
        expected = outcome.location.format(path=path, new_brief=newest.get_absolute_url() if newest else "(no brief)")
        assert response["Location"] == expected
    if outcome.message:
        assert escape(outcome.message) in response.content.decode()
    after = db_counts()
    assert {table: after[table] - before[table] for table in after} == {
        table: outcome.writes.get(table, 0) for table in after
    }


def client_for(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client
