"""`make run` as a user runs it: the launcher as a real process with its own embedded PostgreSQL,
django-q2 cluster and reference target; real HTTP through the web UI; then Ctrl-C (SIGINT) and
a check that nothing it started is left running."""

from __future__ import annotations

import contextlib
import html
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from tests.processes import BASE_DIR, free_port, process_env, wait_for_http

READY_DEADLINE_SECONDS = 180
# A bound against hanging, not a speed requirement: a healthy run publishes within seconds (the test
# prints how long it took), a loaded machine may take far longer.
PUBLISHED_DEADLINE_SECONDS = 120


@dataclass
class RunningGalley:
    process: subprocess.Popen[str]
    base_url: str
    target_url: str
    var_dir: Path
    children: list[psutil.Process]
    output: str = ""
    # Every line the launcher and its children have printed so far, read as it comes: a pipe left
    # unread would fill within minutes of a long test and block the processes writing to it.
    lines: list[str] = field(default_factory=list)

    def credentials(self) -> dict[str, str]:
        return json.loads((self.var_dir / "demo-credentials.json").read_text())

    def printed(self) -> str:
        """What has been printed up to now, while the launcher still runs."""
        return "".join(self.lines)


@pytest.fixture
def var_dir() -> Iterator[Path]:
    """The run's var/ folder, outside pytest's own temporary folders: PostgreSQL runs as its own user
    (pgserver's, under root), which must enter every folder above its data, and another pytest session
    starting on the machine sets pytest's shared folder back to owner-only."""
    folder = Path(tempfile.mkdtemp(prefix="galley-make-run-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def make_run(var_dir: Path) -> Iterator[RunningGalley]:
    """Run the launcher like `make run` (embedded database under `var_dir`), then Ctrl-C it."""
    port, target_port, partner_port = free_port(), free_port(), free_port()
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "galley.launcher",
            *("--port", str(port), "--target-port", str(target_port), "--partner-target-port", str(partner_port)),
        ],
        cwd=BASE_DIR,
        env=process_env(DATABASE_URL="", GALLEY_TARGET_URL="", GALLEY_VAR_DIR=str(var_dir), DEBUG="true"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    running = RunningGalley(
        launcher, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{target_port}", var_dir, children=[]
    )
    reader = threading.Thread(target=running.lines.extend, args=(launcher.stdout,), daemon=True)
    reader.start()

    def stop() -> None:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=60)
        reader.join(timeout=60)  # the pipe closes when the last process writing to it has gone
        launcher.stdout.close()
        running.output = running.printed()

    try:
        wait_for_http(f"{running.base_url}/login/", process=launcher, timeout=READY_DEADLINE_SECONDS)
        wait_for_http(f"{running.target_url}/_health", process=launcher, timeout=30)
        wait_for_http(f"http://127.0.0.1:{partner_port}/_health", process=launcher, timeout=30)
        running.children = psutil.Process(launcher.pid).children(recursive=True)
        yield running
    except AssertionError as failure:
        # Whatever failed, the launcher's own account of it belongs in the report.
        stop()
        raise AssertionError(f"{failure}\n--- launcher output ---\n{running.output}") from failure
    finally:
        if launcher.returncode is None:
            stop()


@contextlib.contextmanager
def sign_in(base_url: str, username: str, password: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        response = post_form(client, "/login/", {"username": username, "password": password})
        assert response.status_code == 302, response.text
        yield client


def post_form(client: httpx.Client, path: str, data: dict[str, str], *, form_page: str | None = None) -> httpx.Response:
    """POST like a browser: take the CSRF token from the page that shows the form."""
    page = client.get(form_page or path)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return client.post(
        path,
        data={**data, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{client.base_url}{form_page or path}"},
    )


def hidden_value(page: str, name: str) -> str:
    return html.unescape(re.search(rf'name="{name}" value="([^"]*)"', page).group(1))


@pytest.mark.acceptance
def test_make_run__serves_login__demo_approver_signs_in__ctrl_c_leaves_nothing(var_dir):
    with make_run(var_dir) as galley:
        names = {" ".join(child.cmdline()) for child in galley.children}
        assert any("runserver" in name for name in names)
        assert any("qcluster" in name for name in names)
        assert sum("galley.reference_target" in name for name in names) == 2  # web and partner-feed
        with sign_in(galley.base_url, "approver", galley.credentials()["approver"]) as client:
            dashboard = client.get("/")
            assert dashboard.status_code == 200
            assert "approver" in dashboard.text and "Briefs" in dashboard.text

    assert galley.process.returncode == 0, galley.output
    assert "Demo users" in galley.output and "approver" in galley.output
    assert "Channels: web (the GALLEY_TARGET_* settings) and partner-feed at http://127.0.0.1:" in galley.output
    assert "embedded PostgreSQL stopped" in galley.output
    still_running = [child.pid for child in galley.children if child.is_running() and child.status() != "zombie"]
    assert still_running == []
    assert not any(str(var_dir) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{galley.base_url}/login/", timeout=2)


@pytest.mark.acceptance
def test_make_run__approving_in_the_web_ui_publishes_within_seconds_with_a_working_permalink(var_dir):
    with make_run(var_dir) as galley:
        credentials = galley.credentials()
        with sign_in(galley.base_url, "editor", credentials["editor"]) as editor:
            created = post_form(editor, "/briefs/new/", {"title": "Harbour strike", "source_material": "Dockers."})
            assert created.status_code == 302
            brief_url = created.headers["location"]
            public_id = brief_url.strip("/").split("/")[-1]
            written = post_form(
                editor,
                f"{brief_url}edit/",
                {
                    "base_number": "0",
                    "title": "Harbour strike ends",
                    "body": "Dockers return <b>today</b>.",
                    "action": "submit",
                },
            )
            assert written.status_code == 302
            revision_url = written.headers["location"]
            assert revision_url == f"/briefs/{public_id}/revisions/1/"

        with sign_in(galley.base_url, "approver", credentials["approver"]) as approver:
            page = approver.get(revision_url).text
            decided = post_form(
                approver,
                f"/briefs/{public_id}/revisions/1/decision/",
                {
                    "revision_number": hidden_value(page, "revision_number"),
                    "payload_hash": hidden_value(page, "payload_hash"),
                    "decision": "approved",
                    "comment": "",
                },
                form_page=revision_url,
            )
            assert decided.status_code == 302
            approved_at = time.monotonic()
            while True:
                page = approver.get(revision_url).text
                # The publication card, not a channel receipt (a receipt says "published" before its read-back).
                if 'id="publication" data-state="published"' in page:
                    break
                assert time.monotonic() - approved_at < PUBLISHED_DEADLINE_SECONDS, page
                time.sleep(0.3)
            print(f"published {time.monotonic() - approved_at:.2f} s after the approval")
            permalink = html.unescape(re.search(r'data-testid="permalink">([^<]+)<', page).group(1))
            payload_hash = re.search(r'data-testid="payload-hash">([0-9a-f]{64})<', page).group(1)

        article = httpx.get(permalink, timeout=5)
        assert article.status_code == 200
        assert "Harbour strike ends" in article.text
        assert "&lt;b&gt;today&lt;/b&gt;" in article.text
        # The approved hash is what the target holds for the key (its ledger); the page only shows the article.
        ledger = httpx.get(f"{galley.target_url}/_ledger", timeout=5).json()["applications"]
        assert [(entry["operation_key"], entry["payload_hash"]) for entry in ledger] == [
            (f"publish:{public_id}:revision-1", payload_hash)
        ]
    assert galley.process.returncode == 0, galley.output


@pytest.mark.acceptance
def test_make_run__rerun_keeps_data(var_dir):
    """Data and demo credentials survive a restart: the second run reuses var/."""
    with make_run(var_dir) as galley:
        first_credentials = galley.credentials()
        with sign_in(galley.base_url, "editor", first_credentials["editor"]) as editor:
            created = post_form(editor, "/briefs/new/", {"title": "Kept", "source_material": ""})
            assert created.status_code == 302
    with make_run(var_dir) as galley:
        assert galley.credentials() == first_credentials
        with sign_in(galley.base_url, "editor", first_credentials["editor"]) as editor:
            dashboard = editor.get("/").text
            assert dashboard.count("<code>brief-") == 1 and "Kept" in dashboard


@pytest.mark.acceptance
def test_make_run__creating_a_brief_in_the_web_ui_runs_the_summary_steps_into_a_first_revision(var_dir):
    with make_run(var_dir) as galley:
        credentials = galley.credentials()
        with sign_in(galley.base_url, "editor", credentials["editor"]) as editor:
            created = post_form(
                editor,
                "/briefs/new/",
                {
                    "title": "Harbour strike",
                    "source_material": (
                        "Dockers at the port walked out at dawn on Monday. The union says pay has not kept up. "
                        "Ships are waiting offshore. The port authority called for talks on Tuesday."
                    ),
                },
            )
            assert created.status_code == 302
            brief_url = created.headers["location"]
            started = time.monotonic()
            seen: list[tuple[str, ...]] = []
            while True:
                page = editor.get(brief_url).text
                states = tuple(re.findall(r'data-step="(\w+)" data-state="(\w+)"', page))
                if not seen or seen[-1] != states:
                    seen.append(states)
                if "/revisions/1/" in page and states and all(state == "succeeded" for _step, state in states):
                    break
                assert time.monotonic() - started < PUBLISHED_DEADLINE_SECONDS, (seen, page)
                time.sleep(0.2)
            print(
                f"summary steps done {time.monotonic() - started:.2f} s after creating the brief; states seen: {seen}"
            )
            assert [step for step, _state in states] == ["outline", "draft", "headline", "standfirst", "quality_gate"]
            assert 'http-equiv="refresh"' not in page

        with sign_in(galley.base_url, "approver", credentials["approver"]) as approver:
            revision_page = approver.get(f"{brief_url}revisions/1/").text
            assert "galley-ai" in revision_page
            assert 'name="payload_hash"' in revision_page and 'value="approved"' in revision_page
    assert galley.process.returncode == 0, galley.output
