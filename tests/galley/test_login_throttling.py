"""Sign-in throttling (django-axes): failed sign-ins are counted per account and per address, a
lockout refuses even the right password and says for how long, a success resets the count, and
every failure is recorded (an access-failure row and a log line)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.test import Client
from django.utils import timezone

LIMIT = 5
RIGHT = "correct-horse-battery"


@pytest.fixture(autouse=True)
def _throttling(settings):
    """The shipped defaults, pinned so a GALLEY_LOGIN_* variable in the environment changes nothing here."""
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def sign_in(client: Client, username: str, password: str, *, address: str = "10.0.0.1", path: str = "/login/"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def signed_in_as(client: Client) -> str | None:
    return client.session.get("_auth_user_id")


def assert_locked_out(response, *, minutes: int = 15) -> None:
    assert response.status_code == 429
    text = response.content.decode()
    unit = "minute" if minutes == 1 else "minutes"
    assert f"Sign-in is locked for {minutes} {unit}" in text
    assert f"Try again in {minutes} {unit}" in text
    assert "even with the right" in text


def test_login__failed_logins_are_throttled_per_account(client, editor):
    # One account guessed from a new address each time: the account's count still adds up.
    answers = [sign_in(client, "eddie", f"guess-{n}", address=f"10.0.1.{n}") for n in range(LIMIT)]

    assert [answer.status_code for answer in answers] == [200] * (LIMIT - 1) + [429]
    assert "Please enter a correct username and password." in answers[0].content.decode()
    assert_locked_out(answers[-1])
    locked = sign_in(client, "eddie", RIGHT, address="10.0.2.1")
    assert_locked_out(locked)
    assert signed_in_as(client) is None


def test_login__failed_logins_are_throttled_per_address(client, editor, make_user):
    make_user("edna")
    # Many accounts guessed from one address: the address is locked, for every account.
    for n in range(LIMIT):
        sign_in(client, f"someone-{n}", "guess", address="10.0.3.3")

    assert_locked_out(sign_in(client, "eddie", RIGHT, address="10.0.3.3"))
    assert signed_in_as(client) is None
    # The accounts themselves are not locked: from another address the right password works.
    elsewhere = Client()
    assert sign_in(elsewhere, "edna", RIGHT, address="10.0.4.4").status_code == 302
    assert signed_in_as(elsewhere) is not None


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
