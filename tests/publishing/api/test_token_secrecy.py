"""An API token never shows beyond its prefix (issue 18 item 4): not in a log line, an answer or
any stored row, whatever form of Authorization header a client sends it in.

Requests go through Django's whole stack with DEBUG on (as `make run` serves), every log record
of every logger captured (caplog, at DEBUG) and what the settings' console handler writes read
back (console_log): the first catches a secret logged anywhere, the second is what the log holds.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import Client

from publishing.actions.api_tokens import check_revoke_api_token
from publishing.models import ApiToken
from publishing.redaction import TOKEN_SHOWN_CHARS
from tests.publishing.api.support import API, ApiClient, problem, token_for
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

WINDOW = 8  # a run of this many hidden characters anywhere is a leak


def hidden_runs(secret: str) -> list[str]:
    """Every run of WINDOW characters of the part of `secret` that must never be shown, in the
    clear and as a `Basic` header would carry it."""
    hidden = secret[TOKEN_SHOWN_CHARS:]
    runs = [hidden[start : start + WINDOW] for start in range(len(hidden) - WINDOW + 1)]
    return [*runs, base64.b64encode(secret.encode()).decode()[TOKEN_SHOWN_CHARS:][:WINDOW]]


def assert_never_shown(text: str, secret: str, *, where: str) -> None:
    leaked = [run for run in hidden_runs(secret) if run in text]
    assert not leaked, f"{where} shows the token beyond its prefix: {leaked[0]!r} in {text[:2000]!r}"


def wrong_forms(secret: str) -> dict[str, str]:
    basic_pair = base64.b64encode(f"eddie:{secret}".encode()).decode()
    return {
        "basic": f"Basic {secret}",
        "basic-user-and-token": f"Basic {basic_pair}",
        "token": f"Token {secret}",
        "bare": secret,
        "bearer-twice": f"Bearer Bearer {secret}",
        "bearer-with-a-suffix": f"Bearer {secret}x",
        "bearer-without-a-space": f"Bearer{secret}",
        "lowercase-scheme-wrong-token": f"token {secret}",
    }


FORMS = list(wrong_forms("galley_x" * 6))


@pytest.fixture
def console_log() -> Iterator[io.StringIO]:
    """What the console handler of the settings' LOGGING writes, while the test runs."""
    (console,) = [handler for handler in logging.getLogger().handlers if type(handler) is logging.StreamHandler]
    written = io.StringIO()
    previous = console.setStream(written)
    yield written
    console.setStream(previous)


@pytest.mark.parametrize("form", FORMS)
def test_api_auth__token_in_a_wrong_authorization_form__401_and_no_log_line_or_answer_shows_it(
    form, editor, settings, caplog, console_log
):
    settings.DEBUG = True  # ninja logged the whole header under DEBUG ("Unexpected auth - 'Basic galley_…'")
    secret = token_for(editor)
    header = wrong_forms(secret)[form]
    caplog.set_level(logging.DEBUG)

    client = ApiClient(None)
    answers = [
        client.client.get(f"{API}/briefs", headers={"Authorization": header}),
        client.client.post(
            f"{API}/briefs",
            json.dumps({"title": "Harbour strike"}),
            content_type="application/json",
            headers={"Authorization": header, "Idempotency-Key": "k-1"},
        ),
    ]

    for answer in answers:
        assert answer.status_code == 401, answer.content
        assert problem(answer)["type"] == "urn:galley:problem:unauthenticated"
        assert_never_shown(answer.content.decode(), secret, where="the answer")
        assert_never_shown(str(dict(answer.headers)), secret, where="the answer's headers")
    logged = "\n".join(
        record.getMessage() + (logging.Formatter().formatException(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    assert_never_shown(logged, secret, where="a log record")
    assert "Unauthorized: /api/v1/briefs" in console_log.getvalue()  # the console did log these requests
    assert_never_shown(console_log.getvalue(), secret, where="the console log")
    assert ApiClient(secret).get("/briefs").status_code == 200  # the token itself is live


def test_log_lines__a_token_or_an_authorization_value_is_cut_to_its_prefix(editor, console_log):
    """The second wall: whatever logs a secret, the console handler writes its prefix only."""
    secret = token_for(editor)
    log = logging.getLogger("galley.tests.secrets")

    log.warning("Unexpected auth - 'Basic %s'", secret)
    log.warning("headers %s", {"Authorization": f"Token {secret}", "HTTP_AUTHORIZATION": secret})
    log.warning("Authorization: Bearer some-other-service-key")
    log.warning("sent Bearer another-service-key; a Bearer token without it is refused; basic checks passed")
    try:
        raise ValueError(f"refused {secret}")
    except ValueError:
        log.exception("bare %s", secret)

    err = console_log.getvalue()
    assert_never_shown(err, secret, where="the console log")
    assert "some-other-service-key" not in err
    assert f"{secret[:TOKEN_SHOWN_CHARS]}…" in err  # the prefix still tells which token it was
    assert "Authorization: [redacted]" in err
    assert "sent Bearer [redacted]; a Bearer token without it is refused; basic checks passed" in err


def test_audit_and_every_table__never_hold_an_api_token(editor, operator, capsys):
    call_command("create_api_token", editor.username, "--name", "ci")
    secret = capsys.readouterr().out.strip()
    api = ApiClient(secret)
    assert api.post("/briefs", {"title": "Harbour strike", "source_material": "Dockers."}).status_code == 201
    assert api.get("/briefs").status_code == 200
    for header in wrong_forms(secret).values():
        api.client.get(f"{API}/briefs", headers={"Authorization": header})
    with transaction.atomic(durable=True):
        check_revoke_api_token(ApiToken.objects.get(name="ci"), acting_user=operator)
    assert api.get("/briefs").status_code == 401
    assert token_for(operator)  # another token made through the action, as the tests' own

    events = list(AuditEvent.objects.filter(event_type__startswith="api_token.").values())
    assert {event["event_type"] for event in events} == {"api_token.created", "api_token.revoked"}
    assert secret[:TOKEN_SHOWN_CHARS] in str(events)  # they name the token by its prefix
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT t::text FROM "{table}" t')
            rows = "\n".join(row for (row,) in cursor.fetchall())
            assert_never_shown(rows, secret, where=f"table {table}")


@pytest.mark.django_db(transaction=True)
def test_api_auth__server_error_while_checking_a_token__debug_page_does_not_show_it(editor, settings):
    """A database error that is no outage (here the token check cancelled by a statement timeout
    while another session holds the token table; a lock timeout would be the busy 503) is a 500; with
    DEBUG on, Django's error page lists every frame's variables, the token check's among them, and
    must not list the token."""
    settings.DEBUG = True
    secret = token_for(editor)
    holder = connections.create_connection("default")  # another session, holding the token table
    holder.set_autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {ApiToken._meta.db_table} IN ACCESS EXCLUSIVE MODE")
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '100ms'")
    try:
        client = Client(raise_request_exception=False)
        answer = client.get(f"{API}/briefs", headers={"Authorization": f"Bearer {secret}"})
    finally:
        holder.rollback()
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")

    assert answer.status_code == 500
    page = answer.content.decode()
    assert "QueryCanceled" in page and "get_token_user" in page  # the page of that error, its frames shown
    assert_never_shown(page, secret, where="the debug error page")
