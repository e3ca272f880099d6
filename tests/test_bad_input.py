"""Bad input at every address of the site, for every role: no 5xx, and a refused request changes nothing.

The URLconf is walked, not listed: Galley's pages, the approvals, login and logout, and every page
of the admin (its index, login, password pages, each registered model's changelist, add, change,
history and delete pages, and the action forms on the changelists). For each address, signed in as
an editor, an approver and an operator, requests carry hostile values:

- in the path, in place of each parameter (ids, numbers, public ids);
- in the query, for each parameter the page's own forms and filter links use;
- in the body, for each field of every form the page shows (one field at a time, the others as
  rendered), and as whole bodies no form would send.

A page that only takes a POST gets hostile paths and bodies posted. A page the role may not open
is refused before any value is read, so it gets one hostile request per place.

The values are sent as bytes on the wire: NUL characters, bytes that are not UTF-8, the UTF-8-style
encoding of a lone surrogate (which is not UTF-8 either), huge strings, numbers where text is
expected and text where numbers are, negative and overlarge numbers, missing fields and files
where text is expected.

Every answer must be below 500. A GET, any answer of 400 or more, and any request carrying text
PostgreSQL cannot store (NUL, not UTF-8) must leave the database as it was: the same rows and the
same briefs, operations and approvals.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern
from pytest_django.asserts import assertContains

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.models import Brief, Revision
from workers.models import AuditEvent, Conflict, Operation

pytestmark = pytest.mark.django_db

ROLES = ["editor", "approver", "operator"]


@dataclass(frozen=True)
class Hostile:
    """One hostile value as it goes on the wire. `unstorable`: text PostgreSQL cannot hold, so any
    request carrying it must change nothing, whatever it answers."""

    name: str
    raw: bytes
    unstorable: bool = False


NUL = Hostile("NUL", b"a\x00b", unstorable=True)
NOT_UTF8 = Hostile("invalid UTF-8", b"caf\xe9 \xff\xfe", unstorable=True)
SURROGATE = Hostile("lone surrogate", b"\xed\xa0\x80", unstorable=True)
HUGE = Hostile("huge string", b"x" * 300_000)
TEXT = Hostile("text for a number", b"abc")
NEGATIVE = Hostile("negative number", b"-1")
OVERLARGE = Hostile("overlarge number", b"99999999999999999999")

# Paths and queries: every kind. A path keeps to a size a server accepts in its request line.
LONG = Hostile("long string", b"x" * 5_000)
PATH_VALUES = [NUL, NOT_UTF8, SURROGATE, LONG, TEXT, NEGATIVE, OVERLARGE]
QUERY_VALUES = PATH_VALUES
BODY_VALUES = [NUL, NOT_UTF8, SURROGATE, HUGE, TEXT, NEGATIVE, OVERLARGE]


# --- The site as a browser sees it: forms and filter links ------------------------------------------


class _PageParser(HTMLParser):
    """Each <form> (method, action, fields as a browser submits them) and the page's query links."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict[str, Any]] = []
        self.query_links: set[str] = set()
        self._form: dict[str, Any] | None = None
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {name: value or "" for name, value in attrs}
        if tag == "a" and attr.get("href", "").startswith("?"):
            self.query_links.add(attr["href"])
        if tag == "form":
            self._form = {"method": attr.get("method", "get").lower(), "action": attr.get("action", ""), "fields": {}}
            self.forms.append(self._form)
            return
        if self._form is None:
            return
        fields = self._form["fields"]
        if tag == "option" and self._select and attr.get("value") and not fields.get(self._select):
            # The first real choice (an admin action, a filter value), as a person would pick one.
            fields[self._select] = attr["value"]
        name = attr.get("name")
        if not name:
            return
        if tag == "input" and attr.get("type", "text") in {"submit", "button", "image"}:
            fields.setdefault(name, attr.get("value", ""))
        elif tag == "input" and attr.get("type") in {"checkbox", "radio"}:
            fields.setdefault(name, attr.get("value", "on"))
        elif tag == "input":
            fields[name] = attr.get("value", "")
        elif tag == "button":
            fields.setdefault(name, attr.get("value", ""))
        elif tag == "textarea":
            fields[name] = ""
            self._textarea = name
        elif tag == "select":
            self._select = name
            fields.setdefault(name, "")

    def handle_data(self, data: str) -> None:
        if self._form is not None and self._textarea is not None:
            self._form["fields"][self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None


@dataclass
class Page:
    # (the address the form posts to, "" for the page's own; its fields as rendered)
    post_forms: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    query_params: set[str] = field(default_factory=set)
    # The fields of its GET forms (search boxes, filters): free text, so long text too.
    search_params: set[str] = field(default_factory=set)


def read_page(html: str) -> Page:
    parser = _PageParser()
    parser.feed(html)
    page = Page()
    for form in parser.forms:
        fields = {name: value for name, value in form["fields"].items() if name != "csrfmiddlewaretoken"}
        if form["method"] == "post":
            page.post_forms.append((form["action"], fields))
        else:
            page.query_params.update(fields)
            page.search_params.update(fields)
    for link in parser.query_links:
        page.query_params.update(name for name, _value in parse_qsl(link[1:], keep_blank_values=True))
    return page


# --- Every address of the URLconf ---------------------------------------------------------------------


@dataclass(frozen=True)
class Address:
    """One URL pattern of the site with a value for each of its parameters."""

    name: str
    template: str  # the route, each parameter as {name}
    params: tuple[str, ...]
    area: str

    def url(self, values: dict[str, str]) -> str:
        return "/" + self.template.format(**values)


_ROUTE_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")
_REGEX_PARAM = re.compile(r"\(\?P<(\w+)>[^)]*\)")


def _addresses(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Address]:
    for pattern in patterns:
        route = str(pattern.pattern)
        if isinstance(pattern.pattern, RegexPattern):
            route = route.removeprefix("^").removesuffix("$")
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}:{pattern.namespace}" if namespace and pattern.namespace else pattern.namespace
            yield from _addresses(pattern.url_patterns, prefix + route, inner or namespace)
            continue
        assert isinstance(pattern, URLPattern)
        full = prefix + route
        params = tuple(_ROUTE_PARAM.findall(full) + _REGEX_PARAM.findall(full))
        template = _REGEX_PARAM.sub(lambda m: "{" + m.group(1) + "}", _ROUTE_PARAM.sub(r"{\1}", full))
        name = pattern.name or full
        name = f"{namespace}:{name}" if namespace else name
        model_admin = getattr(pattern.callback, "model_admin", None)
        if model_admin is not None:
            area = f"admin {model_admin.model._meta.app_label}"
        elif full.startswith("admin/"):
            area = "admin site"
        elif full.startswith("api/"):
            area = "api"
        else:
            area = "galley"
        yield Address(name=name, template=template, params=params, area=area)


def all_addresses() -> list[Address]:
    return list(_addresses(get_resolver().url_patterns))


AREAS = sorted({address.area for address in all_addresses()})


def valid_values(address: Address, site: dict[str, Any]) -> dict[str, str]:
    """A real value for each parameter of `address`, so each hostile value is the only thing wrong."""
    model = _admin_model(address)
    values = {
        "public_id": site["brief"].public_id,
        "number": "2",
        "run_number": "1",
        "id": str(site["users"]["operator"].pk),
        "app_label": "publishing",
        "url": "nothing-here/",
        "content_type_id": str(ContentType.objects.get_for_model(Brief).pk),
        "object_id": str(site["brief"].pk),
        # The JSON API's names for the same things.
        "brief_id": site["brief"].public_id,
        "operation_id": str(Operation.objects.order_by("pk").values_list("pk", flat=True).first()),
        "conflict_id": str(Conflict.objects.order_by("pk").values_list("pk", flat=True).first() or 1),
    }
    if model is not None:
        first = model._default_manager.order_by("pk").values_list("pk", flat=True).first()
        values["object_id"] = str(first if first is not None else 1)
    unknown = set(address.params) - set(values)
    assert not unknown, f"{address.name}: give the bad-input suite a real value for {sorted(unknown)}"
    return {name: values[name] for name in address.params}


def _admin_model(address: Address) -> Any:
    for model in admin.site._registry:
        if address.name.startswith(f"admin:{model._meta.app_label}_{model._meta.model_name}_"):
            return model
    return None


# --- Requests and what must hold for each --------------------------------------------------------------


def site_state() -> str:
    """A digest of what a request may change: row counts, and every brief's, operation's and approval's state."""
    brief, revision, approval = Brief._meta.db_table, Revision._meta.db_table, Approval._meta.db_table
    audit, operation = AuditEvent._meta.db_table, Operation._meta.db_table
    with connection.cursor() as cursor:
        # One statement per request keeps a few thousand requests fast.
        cursor.execute(
            f"""
            SELECT md5(concat_ws('|',
                (SELECT count(*) FROM {revision}), (SELECT count(*) FROM {audit}),
                (SELECT string_agg(concat_ws(',', public_id, title, source_hash, status, updated_at), ';' ORDER BY id)
                   FROM {brief}),
                (SELECT string_agg(concat_ws(',', key, status, attempts, updated_at), ';' ORDER BY id)
                   FROM {operation}),
                (SELECT string_agg(concat_ws(',', id, decision, payload_hash), ';' ORDER BY id) FROM {approval})
            ))
            """
        )
        return cursor.fetchone()[0]


@dataclass
class Probe:
    role: str
    client: Client
    user: Any
    # The database's state after the last request of any probe: requests run one at a time, so it
    # is the state before the next (one digest per request, not two).
    last_state: dict[str, str]
    failures: list[str] = field(default_factory=list)
    requests: int = 0
    # Where whole bodies were sent already: a form on every page (sign out) gets them once.
    bodies_sent_to: set[str] = field(default_factory=set)

    def send(self, method: str, url: str, *, what: str, unstorable: bool, **kwargs: Any) -> Any:
        before = self.last_state.get("digest") or site_state()
        response = getattr(self.client, method)(url, **kwargs)
        self.requests += 1
        after = self.last_state["digest"] = site_state()
        label = f"{self.role} {method.upper()} {url[:120]!r} {what}"
        if response.status_code >= 500:
            self.failures.append(f"{label}: {response.status_code}")
        elif after != before and (method == "get" or response.status_code >= 400 or unstorable):
            self.failures.append(f"{label}: answered {response.status_code} and changed the database")
        if "logout" in url:
            self.client.force_login(self.user)  # the next request is again this role's
        return response


def encoded_body(fields: dict[str, bytes | str]) -> bytes:
    return urlencode([(name, value) for name, value in fields.items()]).encode("ascii")


BOUNDARY = "bad-input-boundary"


def multipart_body(fields: dict[str, bytes | str]) -> bytes:
    """A multipart form with each value's bytes as they are (the test client would send bytes as numbers)."""
    parts = []
    for name, value in fields.items():
        raw = value if isinstance(value, bytes) else value.encode()
        parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + raw + b"\r\n")
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def probe_address(probe: Probe, address: Address, values: dict[str, str], page: Page, *, answered: int) -> None:
    if answered == 200:
        probe_page(probe, address, values, page)
    elif answered == 405:
        probe_post_only(probe, address, values)
    else:
        probe_closed_page(probe, address, values, page)


def _percent(raw: bytes) -> str:
    return "".join(f"%{byte:02X}" for byte in raw)


def probe_page(probe: Probe, address: Address, values: dict[str, str], page: Page) -> None:
    """Every hostile value in every place, at a page this role may open."""
    url = address.url(values)
    # The path: each parameter in turn, its bytes percent-encoded. Galley's pages are also posted
    # to; the admin reads an object id the same way for GET and POST.
    methods = ("get", "post") if address.area == "galley" else ("get",)
    for param in address.params:
        for hostile in PATH_VALUES:
            bad = address.url({**values, param: _percent(hostile.raw)})
            for method in methods:
                probe.send(method, bad, what=f"path {param}={hostile.name}", unstorable=hostile.unstorable)

    # The query: the parameters of the page's forms and links. Text that cannot be stored is refused
    # for the address as a whole, so one request puts it in every parameter; the values a view
    # parses (numbers, dates, lengths) go into one parameter at a time.
    params = sorted(page.query_params | ({"page"} if address.area == "galley" else set()))
    for hostile in [value for value in QUERY_VALUES if value.unstorable]:
        query = urlencode({param: hostile.raw for param in params or ["q"]})
        probe.send("get", f"{url}?{query}", what=f"query (every parameter)={hostile.name}", unstorable=True)
    for param in params:
        for hostile in [value for value in QUERY_VALUES if not value.unstorable]:
            if hostile is LONG and param not in page.search_params:
                continue  # a link's parameter holds an id, a choice or a number: the other values test it
            query = urlencode({param: hostile.raw})
            probe.send("get", f"{url}?{query}", what=f"query {param}={hostile.name}", unstorable=False)

    # The body: each field of each form on the page, one at a time, sent where the form sends it.
    for action, form in page.post_forms:
        target = action or url
        for name in form:
            for hostile in BODY_VALUES:
                probe.send(
                    "post",
                    target,
                    what=f"field {name}={hostile.name}",
                    unstorable=hostile.unstorable,
                    data=encoded_body({**form, name: hostile.raw}),
                    content_type="application/x-www-form-urlencoded",
                )
            probe.send(
                "post",
                target,
                what=f"field {name}={NOT_UTF8.name} (multipart)",
                unstorable=True,
                data=multipart_body({**form, name: NOT_UTF8.raw}),
                content_type=f"multipart/form-data; boundary={BOUNDARY}",
            )
            rest = {key: value for key, value in form.items() if key != name}
            probe.send("post", target, what=f"field {name} missing", unstorable=False, data=rest)
            probe.send(
                "post",
                target,
                what=f"field {name} sent as a file",
                unstorable=False,
                data={**rest, name: SimpleUploadedFile("field.txt", b"a file, not text")},
            )

    # Whole bodies no form sends, where the page's forms send theirs.
    for target in dict.fromkeys(action or url for action, _form in page.post_forms):
        send_whole_bodies(probe, target)


# Bodies no form sends. The ones that are not text, or too large to read, must change nothing.
WHOLE_BODIES = [
    ("JSON instead of a form", b'{"title": 1}', "application/json", False),
    ("broken multipart", b"--x\r\nnot a part", "multipart/form-data; boundary=x", True),
    ("over the upload limit", b"t=" + b"x" * 3_000_000, "application/x-www-form-urlencoded", True),
    ("a field name with NUL", b"a%00b=1", "application/x-www-form-urlencoded", True),
]


def send_whole_bodies(probe: Probe, url: str) -> None:
    if url in probe.bodies_sent_to:
        return
    probe.bodies_sent_to.add(url)
    for what, raw, content_type, unstorable in WHOLE_BODIES:
        probe.send("post", url, what=f"body: {what}", unstorable=unstorable, data=raw, content_type=content_type)


def probe_post_only(probe: Probe, address: Address, values: dict[str, str]) -> None:
    """A page that only takes a POST (a decision, "use this suggestion", sign out): hostile paths
    and whole bodies, posted."""
    for param in address.params:
        for hostile in PATH_VALUES:
            bad = address.url({**values, param: _percent(hostile.raw)})
            probe.send("post", bad, what=f"path {param}={hostile.name}", unstorable=hostile.unstorable)
    send_whole_bodies(probe, address.url(values))


def probe_closed_page(probe: Probe, address: Address, values: dict[str, str], page: Page) -> None:
    """At a page this role may not open no view reads a value: the refusal comes first, and text no
    page may carry is refused before it. One request with every parameter hostile, and one post of
    every form with every field hostile, are enough there."""
    bad = {param: _percent(NUL.raw) for param in address.params}
    probe.send("get", f"{address.url(bad)}?{urlencode({'q': NUL.raw})}", what="path and query=NUL", unstorable=True)
    for action, form in page.post_forms:
        probe.send(
            "post",
            action or address.url(values),
            what=f"form (every field)={NOT_UTF8.name}",
            unstorable=True,
            data=encoded_body({name: NOT_UTF8.raw for name in form} or {"q": NOT_UTF8.raw}),
            content_type="application/x-www-form-urlencoded",
        )


# --- The site's data, made through the real actions -----------------------------------------------------


@pytest.fixture
def site(users, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    revision = revise(brief, "Dockers returned at noon.")
    with transaction.atomic():
        check_decide_revision(
            brief.public_id,
            revision_number=revision.number,
            payload_hash=revision.payload_hash,
            decision=Approval.Decision.APPROVED,
            acting_user=users["approver"],
        )
    return {"brief": brief, "users": users}


def open_pages(
    probes: list[Probe], addresses: list[Address], values: dict[str, dict[str, str]]
) -> tuple[dict[str, Page], dict[tuple[str, str], int]]:
    """Every role opens every page as it is rendered. Returns the forms and query parameters each
    page shows to any role, and what each (role, page) answered."""
    pages: dict[str, Page] = {address.name: Page() for address in addresses}
    answers: dict[tuple[str, str], int] = {}
    for probe in probes:
        for address in addresses:
            response = probe.send("get", address.url(values[address.name]), what="(as rendered)", unstorable=False)
            answers[probe.role, address.name] = response.status_code
            if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
                continue
            found, page = read_page(response.content.decode()), pages[address.name]
            page.query_params |= found.query_params
            page.search_params |= found.search_params
            page.post_forms += [form for form in found.post_forms if form not in page.post_forms]
    return pages, answers


def test_bad_input__every_address_is_covered(site):
    """The walk finds every page the site serves, and knows a real value for each of their parameters."""
    addresses = all_addresses()
    names = {address.name for address in addresses}
    for address in addresses:
        valid_values(address, site)  # fails naming any parameter the suite has no value for
    assert {"publishing:brief_new", "publishing:revision_edit", "approvals:decide", "login", "logout"} <= names
    assert {"admin:index", "admin:login", "admin:password_change"} <= names
    for model in admin.site._registry:
        for view in ("changelist", "add", "change", "history", "delete"):
            assert f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}" in names
    assert {"galley", "admin site"} <= set(AREAS)


@pytest.mark.parametrize("area", AREAS)
def test_bad_input__hostile_paths_queries_and_forms__no_5xx_and_refusals_change_nothing(area, site):
    """Every role at every address of the area. One test per area: each page is read once, by every
    role, and the forms any of them sees are sent by all of them."""
    addresses = [address for address in all_addresses() if address.area == area]
    values = {address.name: valid_values(address, site) for address in addresses}
    probes, last_state = [], {}
    for role in ROLES:
        client = Client(raise_request_exception=False)
        client.force_login(site["users"][role])
        probes.append(Probe(role, client, site["users"][role], last_state))
    pages, answers = open_pages(probes, addresses, values)

    for probe in probes:
        for address in addresses:
            answered = answers[probe.role, address.name]
            probe_address(probe, address, values[address.name], pages[address.name], answered=answered)

    failures = [failure for probe in probes for failure in probe.failures]
    requests = sum(probe.requests for probe in probes)
    assert requests > 0
    assert not failures, f"{len(failures)} of {requests} requests:\n" + "\n".join(failures)


# --- The refusals the walk relies on, one by one --------------------------------------------------------


def _operator_client(site: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(site["users"]["operator"])
    return client


@pytest.mark.parametrize("query", ["q=caf%E9", "status=%ED%A0%80", "page=%FF"])
@pytest.mark.parametrize("path", ["/", "/admin/publishing/brief/"])
def test_bad_input__query_not_utf8__400_with_a_clear_message(site, path, query):
    response = _operator_client(site).get(f"{path}?{query}")

    assertContains(response, "The address is not valid UTF-8 text", status_code=400)


@pytest.mark.parametrize("segment", ["%FF", "brief-001%ED%A0%80"])
def test_bad_input__path_not_utf8__404_that_names_what_is_missing(site, segment):
    response = _operator_client(site).get(f"/briefs/{segment}/")

    assertContains(response, f"There is no brief {segment}.", status_code=404)


def test_bad_input__admin_action_reason_with_nul__400_shows_what_was_sent_and_changes_nothing(site):
    operation = Operation.objects.order_by("id").first()
    before = site_state()

    response = _operator_client(site).post(
        "/admin/workers/operation/",
        {"action": "cancel_with_reason", "_selected_action": [str(operation.pk)], "index": "0", "reason": "dup\x00e"},
    )

    assertContains(response, "The form contains a NUL character (in reason)", status_code=400)
    assertContains(response, "dup[NUL]e", status_code=400)  # what was typed, the NUL shown where it was
    assert site_state() == before


def test_bad_input__admin_action_on_rows_that_are_no_ids__400_and_nothing_changed(site):
    before = site_state()

    response = _operator_client(site).post(
        "/admin/workers/operation/",
        {"action": "retry_now", "_selected_action": ["abc"], "index": "0", "reason": ""},
    )

    assertContains(response, "The selected rows must be operations ids; &#x27;abc&#x27; is not one.", status_code=400)
    assert site_state() == before


@pytest.mark.parametrize("year", ["99999999999", "0", "-5"])
def test_bad_input__admin_date_hierarchy_year_no_date_holds__400_with_a_clear_message(site, year):
    response = _operator_client(site).get(f"/admin/workers/auditevent/?created_at__year={year}")

    assertContains(response, f"{year}-1-1 is not a date, so it cannot filter by created at.", status_code=400)


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_bad_input__sign_in_with_a_username_no_account_can_have__400_and_the_password_not_shown(path):
    response = Client().post(path, {"username": "u" * 151, "password": "hunter2-secret"})

    assertContains(response, "A username is at most 150 characters; this one has 151.", status_code=400)
    assert "hunter2-secret" not in response.content.decode()


def test_bad_input__sign_in_with_nul__400_shows_the_username_not_the_password():
    response = Client().post("/login/", {"username": "eddie\x00", "password": "hunter2-secret"})

    assertContains(response, "The form contains a NUL character (in username)", status_code=400)
    assertContains(response, "eddie[NUL]", status_code=400)
    assert "hunter2-secret" not in response.content.decode()


def test_bad_input__form_over_the_upload_limit__400_with_a_clear_message_and_nothing_saved(site):
    client = Client()
    client.force_login(site["users"]["editor"])
    before = site_state()

    response = client.post(
        "/briefs/new/",
        b"title=Big&source_material=" + b"x" * 3_000_000,
        content_type="application/x-www-form-urlencoded",
    )

    assertContains(response, "The form is larger than the 2,621,440 bytes this site accepts.", status_code=400)
    assert site_state() == before


@pytest.mark.parametrize("path", ["/api/v1/briefs?q=caf%E9", "/api/v1/briefs/brief-001%00"])
def test_bad_input__api_address_refused__problem_details_not_a_page(path):
    response = Client().get(path)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["type"] == "urn:galley:problem:invalid-input"
    assert response.json()["status"] == 400
