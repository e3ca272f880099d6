"""/healthz and /readyz in-process, the security headers on a page, and the manage.py promise of
README.md#two-commands."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from django.db import connection

from galley import embedded_database
from tests.processes import BASE_DIR
from tests.web import policy_directives

pytestmark = pytest.mark.django_db


def test_healthz__answers_without_sign_in_or_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert (response.status_code, response.content) == (200, b"ok\n")
    assert response["Content-Type"] == "text/plain; charset=utf-8"


def test_readyz__migrated_database__ready_in_one_query(client, django_assert_num_queries):
    client.get("/readyz")  # the migration graph is read from disk once per process
    with django_assert_num_queries(1):
        response = client.get("/readyz")
    assert (response.status_code, response.content) == (200, b"ready\n")
    assert "no-cache" in response["Cache-Control"]


def test_readyz__migration_missing__503_naming_it(client):
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'publishing' AND name = "
            "(SELECT max(name) FROM django_migrations WHERE app = 'publishing') RETURNING name"
        )
        (latest,) = cursor.fetchone()
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.content.decode() == f"migrations not applied: publishing.{latest}\n"


def test_readyz__not_ready__one_warning_per_change_never_an_error(client, caplog):
    """A failed readiness probe is an expected answer: no ERROR per probe (Django's request logger
    logs every 5xx at ERROR), one WARNING when the answer changes, one line when it is ready again."""
    client.get("/readyz")  # ready: the process's last answer, whatever an earlier test left
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'publishing' AND name = "
            "(SELECT max(name) FROM django_migrations WHERE app = 'publishing') RETURNING app, name"
        )
        removed = cursor.fetchone()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        answers = [client.get("/readyz").status_code for _probe in range(3)]
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, now())", removed)
        answers.append(client.get("/readyz").status_code)

    assert answers == [503, 503, 503, 200]
    assert [record.levelname for record in caplog.records if record.levelno >= logging.ERROR] == []
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [f"readyz: not ready: migrations not applied: publishing.{removed[1]}"]
    assert [record.getMessage() for record in caplog.records if record.name == "galley.health"][-1] == (
        "readyz: ready again"
    )


def test_readyz__post__refused(client):
    assert client.post("/readyz").status_code == 405


def test_page__security_headers_over_https(client):
    response = client.get("/login/", secure=True)
    assert response["Strict-Transport-Security"] == "max-age=31536000"
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Content-Type-Options"] == "nosniff"
    policy = policy_directives(response["Content-Security-Policy"])
    assert policy["script-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"


def test_templates__no_inline_script():
    """The policy allows no inline script: no template may need one."""
    inline = re.compile(r"<script(?![^>]*\ssrc=)|\son[a-z]+\s*=|javascript:", re.IGNORECASE)
    offenders = [
        str(path.relative_to(BASE_DIR))
        for path in (BASE_DIR / "templates").rglob("*.html")
        if inline.search(path.read_text())
    ]
    assert offenders == []


def test_manage_py__reaches_the_make_run_database_with_no_environment():
    """README.md#two-commands: while `make run` runs, `.venv/bin/python manage.py shell` reaches its database as it is:
    no DATABASE_URL, no SECRET_KEY, no DEBUG (the embedded server's socket and the development key are
    found under var/)."""
    var = Path(tempfile.mkdtemp(prefix="galley-var-"))  # PostgreSQL's own user must enter it
    server = embedded_database.start(var / "pgdata", delete_on_exit=True)
    try:
        env = {
            name: value
            for name, value in os.environ.items()
            if name not in {"DATABASE_URL", "SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"}
        }
        env["GALLEY_VAR_DIR"] = str(var)
        result = subprocess.run(
            [
                str(BASE_DIR / ".venv/bin/python"),
                "manage.py",
                "shell",
                "-c",
                "from django.db import connection; "
                "connection.ensure_connection(); print(connection.settings_dict['HOST'])",
            ],
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[-1] == server.get_postmaster_info().socket_dir.as_posix()
        assert (var / "secret_key").exists()
    finally:
        server.cleanup()
        shutil.rmtree(var, ignore_errors=True)


def test_settings__database_url_without_secret_key__refused():
    env = {name: value for name, value in os.environ.items() if name not in {"SECRET_KEY", "DEBUG"}}
    result = subprocess.run(
        [str(BASE_DIR / ".venv/bin/python"), "manage.py", "check"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr
