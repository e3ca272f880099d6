"""Sign-in throttling (django-axes, galley.login_throttle): failed sign-ins are counted per account
and address and, against a separate, much higher limit, per address; a lockout refuses even the
right password and says which lock and for how long, a success resets the count, and every failure
is recorded (an access-failure row and a log line). Behind a trusted proxy the address is the one
its header names."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.test import Client
from django.utils import timezone

from tests.processes import BASE_DIR, process_env

LIMIT = 5
ADDRESS_LIMIT = 100
RIGHT = "correct-horse-battery"


@pytest.fixture(autouse=True)
def _throttling(settings):
    """The shipped defaults, pinned so a GALLEY_LOGIN_* variable in the environment changes nothing here."""
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT = ADDRESS_LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    settings.GALLEY_CLIENT_IP_META_KEY = ""


def sign_in(
    client: Client, username: str, password: str, *, address: str = "10.0.0.1", path: str = "/login/", **meta: str
):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address, **meta)


def signed_in_as(client: Client) -> str | None:
    return client.session.get("_auth_user_id")


def assert_locked_out(response, *, minutes: int = 15, scope: str = "account") -> None:
    assert response.status_code == 429
    text = " ".join(response.content.decode().split())
    unit = "minute" if minutes == 1 else "minutes"
    assert f"Sign-in is locked for {minutes} {unit}" in text
    assert f"Try again in {minutes} {unit}" in text
    assert "even with the right" in text
    if scope == "account":
        assert f"{LIMIT} failed attempts for this account from this address." in text
        assert "Other accounts sign in as usual." in text
    else:
        assert f"{ADDRESS_LIMIT} failed attempts from this address, for any account." in text


def test_login__failed_logins_are_throttled_per_account_and_address(client, editor):
    answers = [sign_in(client, "eddie", f"guess-{n}", address="10.0.1.1") for n in range(LIMIT)]

    assert [answer.status_code for answer in answers] == [200] * (LIMIT - 1) + [429]
    assert "Please enter a correct username and password." in answers[0].content.decode()
    assert_locked_out(answers[-1])
    assert_locked_out(sign_in(client, "eddie", RIGHT, address="10.0.1.1"))
    assert signed_in_as(client) is None
    # The lock is this account's from this address: from another one the right password works.
    elsewhere = Client()
    assert sign_in(elsewhere, "eddie", RIGHT, address="10.0.2.1").status_code == 302
    assert signed_in_as(elsewhere) == str(editor.pk)


def test_login__one_account_locked_from_a_shared_address__another_account_from_it_signs_in(client, editor, make_user):
    # The report: behind one proxy or NAT, five wrong passwords for one account locked the newsroom.
    edna = make_user("edna")
    for n in range(LIMIT + 3):  # and further attempts during the lock
        sign_in(client, "eddie", f"guess-{n}", address="10.0.3.3")
    assert_locked_out(sign_in(client, "eddie", RIGHT, address="10.0.3.3"))

    colleague = Client()
    assert sign_in(colleague, "edna", "typo", address="10.0.3.3").status_code == 200  # her own first failure
    assert sign_in(colleague, "edna", RIGHT, address="10.0.3.3").status_code == 302
    assert signed_in_as(colleague) == str(edna.pk)


def test_login__failed_logins_are_throttled_per_address(client, editor, make_user):
    edna = make_user("edna")
    # Many accounts guessed from one address, each fewer times than its own limit: the address's
    # count reaches its separate, higher limit, and then every account from it is locked.
    guesses = [(f"someone-{n // (LIMIT - 1)}", f"guess-{n}") for n in range(ADDRESS_LIMIT)]
    for username, password in guesses[:-1]:
        assert sign_in(client, username, password, address="10.0.3.3").status_code == 200
    below = Client()
    assert sign_in(below, "edna", RIGHT, address="10.0.3.3").status_code == 302  # one short: still open
    below.post("/logout/")

    assert_locked_out(sign_in(client, *guesses[-1], address="10.0.3.3"), scope="address")
    assert_locked_out(sign_in(below, "edna", RIGHT, address="10.0.3.3"), scope="address")
    assert_locked_out(sign_in(Client(), "eddie", RIGHT, address="10.0.3.3"), scope="address")
    # The accounts themselves are not locked: from another address the right password works.
    elsewhere = Client()
    assert sign_in(elsewhere, "edna", RIGHT, address="10.0.4.4").status_code == 302
    assert signed_in_as(elsewhere) == str(edna.pk)


def test_login__behind_a_trusted_proxy__the_address_is_the_one_its_header_names(client, editor, make_user, settings):
    settings.GALLEY_CLIENT_IP_META_KEY = "HTTP_X_FORWARDED_FOR"  # GALLEY_CLIENT_IP_HEADER=X-Forwarded-For
    edna = make_user("edna")
    proxy = "10.9.9.9"  # every request arrives from the proxy
    for n in range(LIMIT):
        # What the client sent (left) is not trusted; what the proxy added (right-most) is.
        forwarded = f"198.51.100.{n}, 203.0.113.7"
        sign_in(client, "eddie", f"guess-{n}", address=proxy, HTTP_X_FORWARDED_FOR=forwarded)

    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.7"}
    assert_locked_out(sign_in(client, "eddie", RIGHT, address=proxy, HTTP_X_FORWARDED_FOR="203.0.113.7"))
    # Another client behind the same proxy is another address: the same account signs in there.
    other = Client()
    assert sign_in(other, "eddie", RIGHT, address=proxy, HTTP_X_FORWARDED_FOR="203.0.113.8").status_code == 302
    # Without the header (a request that came past the proxy) the connection's address counts.
    direct = Client()
    assert sign_in(direct, "edna", "typo", address="10.0.8.8").status_code == 200
    assert AccessAttempt.objects.get(username="edna").ip_address == "10.0.8.8"
    assert sign_in(direct, "edna", RIGHT, address="10.0.8.8").status_code == 302
    assert signed_in_as(direct) == str(edna.pk)


def test_login__without_a_trusted_proxy__a_forwarded_header_is_ignored(client, editor):
    # Off by default: a client naming a new address each time still counts as its connection's.
    answers = [
        sign_in(client, "eddie", f"guess-{n}", address="10.0.5.1", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")
        for n in range(LIMIT)
    ]

    assert_locked_out(answers[-1])
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"10.0.5.1"}


def test_login__thirty_fast_wrong_passwords__locked_after_the_limit_and_the_right_one_refused(client, editor):
    # The report: 30 wrong passwords in 22 s were all tried, and the right one then worked.
    answers = [sign_in(client, "eddie", f"guess-{n}") for n in range(30)]

    assert sum(answer.status_code == 200 for answer in answers) == LIMIT - 1
    assert all(answer.status_code == 429 for answer in answers[LIMIT - 1 :])
    assert_locked_out(sign_in(client, "eddie", RIGHT))
    assert signed_in_as(client) is None


def test_login__a_success_resets_the_failure_count(client, editor):
    for n in range(LIMIT - 1):
        sign_in(client, "eddie", f"guess-{n}")
    assert sign_in(client, "eddie", RIGHT).status_code == 302
    assert AccessAttempt.objects.count() == 0
    client.post("/logout/")

    # A fresh allowance: LIMIT - 1 more failures do not lock, and the right password still works.
    for n in range(LIMIT - 1):
        assert sign_in(client, "eddie", f"again-{n}").status_code == 200
    assert sign_in(client, "eddie", RIGHT).status_code == 302
    assert signed_in_as(client) == str(editor.pk)


def test_login__lockout_lasts_the_cool_off_and_then_ends(client, editor):
    for n in range(LIMIT):
        sign_in(client, "eddie", f"guess-{n}")
    # Almost the whole cool-off later, still locked (and that attempt starts it again).
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=14))
    assert_locked_out(sign_in(client, "eddie", RIGHT))

    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=15, seconds=1))
    assert sign_in(client, "eddie", RIGHT).status_code == 302
    assert signed_in_as(client) == str(editor.pk)


def test_login__lockout_message_names_the_configured_cool_off(client, editor, settings):
    settings.AXES_COOLOFF_TIME = timedelta(minutes=1)
    for n in range(LIMIT):
        answer = sign_in(client, "eddie", f"guess-{n}")

    assert_locked_out(answer, minutes=1)


def test_login__failed_login_is_recorded_for_audit(client, editor, caplog):
    sign_in(client, "eddie", "guess", address="10.0.5.5")

    attempt = AccessAttempt.objects.get()
    assert (attempt.username, attempt.ip_address, attempt.failures_since_start) == ("eddie", "10.0.5.5", 1)
    assert attempt.path_info == "/login/"
    assert "guess" not in attempt.post_data  # the password is masked
    failure = AccessFailureLog.objects.get()
    assert (failure.username, failure.ip_address, failure.locked_out) == ("eddie", "10.0.5.5", False)
    # The log line, as the settings' logging configuration lets it through (caplog listens at the root).
    logged = [record for record in caplog.records if record.name.startswith("axes")]
    assert [record.levelname for record in logged] == ["WARNING"]
    assert logged[0].getMessage() == (
        'AXES: New login failure by {username: "eddie", ip_address: "10.0.5.5", path_info: "/login/"}. '
        "Created new record in the database."
    )


@pytest.mark.parametrize("log_level", [logging.INFO, logging.ERROR], ids=["INFO", "ERROR"])
def test_login__failed_logins_are_logged_whatever_log_level_says(client, editor, caplog, log_level):
    # LOG_LEVEL sets the root logger's level; the "axes" logger's own level decides what it emits.
    root = logging.getLogger()
    configured = root.level
    root.setLevel(log_level)
    try:
        sign_in(client, "eddie", "guess", address="10.0.7.7")
    finally:
        root.setLevel(configured)

    assert [record.getMessage()[:40] for record in caplog.records if record.name.startswith("axes")] == [
        'AXES: New login failure by {username: "e'
    ]
    assert caplog.handler in root.handlers  # caplog hears what the console handler beside it hears


def test_login__lockout_is_recorded_for_audit(client, editor, caplog):
    for n in range(LIMIT):
        sign_in(client, "eddie", f"guess-{n}")
    sign_in(client, "eddie", RIGHT)

    assert list(AccessFailureLog.objects.order_by("id").values_list("locked_out", flat=True)) == [False] * (
        LIMIT - 1
    ) + [True, True]
    assert any("Locking out" in record.getMessage() for record in caplog.records if record.name.startswith("axes"))


def test_admin_login__failed_logins_are_throttled_too(client, users):
    for n in range(LIMIT):
        sign_in(client, "otto", f"guess-{n}", path="/admin/login/")

    locked = sign_in(client, "otto", RIGHT, path="/admin/login/")

    assert_locked_out(locked)
    assert signed_in_as(client) is None
    assert AccessFailureLog.objects.filter(username="otto", path_info="/admin/login/").count() == LIMIT + 1


def test_admin__failed_logins_are_listed_read_only(client, django_user_model):
    admin_user = django_user_model.objects.create_superuser("root", password=RIGHT)
    sign_in(Client(), "eddie", "guess", address="10.0.6.6")
    client.force_login(admin_user)

    failures = client.get("/admin/axes/accessfailurelog/")
    attempts = client.get("/admin/axes/accessattempt/")

    assert failures.status_code == attempts.status_code == 200
    assert "10.0.6.6" in failures.content.decode()
    assert "10.0.6.6" in attempts.content.decode()
    assert client.get("/admin/axes/accessfailurelog/add/").status_code == 403


def settings_in_a_process(**environment: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.GALLEY_CLIENT_IP_META_KEY or '-', s.GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT)"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env=process_env(**environment),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.integration
def test_settings__trusted_proxy_header_off_by_default__on_from_the_environment__address_limit_checked():
    assert settings_in_a_process(GALLEY_CLIENT_IP_HEADER="").stdout.split() == ["-", "100"]
    configured = settings_in_a_process(
        GALLEY_CLIENT_IP_HEADER="X-Forwarded-For", GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT="250"
    )
    assert configured.stdout.split() == ["HTTP_X_FORWARDED_FOR", "250"], configured.stderr
    refused = settings_in_a_process(GALLEY_LOGIN_FAILURE_LIMIT="10", GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT="5")
    assert refused.returncode != 0
    assert "GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT must be at least GALLEY_LOGIN_FAILURE_LIMIT" in refused.stderr
