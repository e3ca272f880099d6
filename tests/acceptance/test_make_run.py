"""`make run` as a user runs it: the launcher as a real process, its own embedded PostgreSQL,
a real HTTP login, then Ctrl-C (SIGINT) and a check that nothing it started is left running."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.processes import free_port

BASE_DIR = Path(__file__).resolve().parents[2]
READY_DEADLINE_SECONDS = 180


def processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if text in cmdline and proc.pid != os.getpid():
            found.append(proc)
    return found


@pytest.mark.acceptance
def test_make_run__serves_login__demo_approver_signs_in__ctrl_c_leaves_nothing(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(GALLEY_VAR_DIR=str(tmp_path), DEBUG="true")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "galley.launcher", "--port", str(port)],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_DEADLINE_SECONDS
        while True:
            assert launcher.poll() is None, launcher.stdout.read()
            try:
                if httpx.get(f"{base_url}/login/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "login page not served within 3 minutes"
            time.sleep(0.3)

        credentials = json.loads((tmp_path / "demo-credentials.json").read_text())
        with httpx.Client(base_url=base_url, timeout=10) as client:
            login_page = client.get("/login/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text).group(1)
            response = client.post(
                "/login/",
                data={
                    "username": "approver",
                    "password": credentials["approver"],
                    "csrfmiddlewaretoken": token,
                },
                headers={"Referer": f"{base_url}/login/"},
            )
            assert response.status_code == 302
            assert response.headers["location"] == "/"
            dashboard = client.get("/")
            assert dashboard.status_code == 200
            assert "approver" in dashboard.text and "Briefs" in dashboard.text
    finally:
        launcher.send_signal(signal.SIGINT)
        output, _ = launcher.communicate(timeout=60)

    assert launcher.returncode == 0, output
    assert "Demo users" in output and "approver" in output
    assert "embedded PostgreSQL stopped" in output
    assert processes_mentioning(str(tmp_path)) == []
    assert processes_mentioning(f"runserver 127.0.0.1:{port}") == []
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base_url}/login/", timeout=2)


@pytest.mark.acceptance
def test_make_run__rerun_keeps_data(tmp_path):
    """Data and demo credentials survive a restart: the second run reuses var/."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(GALLEY_VAR_DIR=str(tmp_path), DEBUG="true")
    for run in range(2):
        port = free_port()
        launcher = subprocess.Popen(
            [sys.executable, "-m", "galley.launcher", "--port", str(port)],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + READY_DEADLINE_SECONDS
            while True:
                assert launcher.poll() is None
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/login/", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline
                time.sleep(0.3)
            if run == 0:
                first_credentials = (tmp_path / "demo-credentials.json").read_text()
                # A brief written through manage.py against the running embedded server.
                created = subprocess.run(
                    [sys.executable, "manage.py", "shell", "--no-imports", "-c", SHELL_CREATE_BRIEF],
                    cwd=BASE_DIR,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                assert "brief-001" in created.stdout
            else:
                assert (tmp_path / "demo-credentials.json").read_text() == first_credentials
                listed = subprocess.run(
                    [sys.executable, "manage.py", "shell", "--no-imports", "-c", SHELL_LIST_BRIEFS],
                    cwd=BASE_DIR,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                assert listed.stdout.split() == ["brief-001"]
        finally:
            launcher.send_signal(signal.SIGINT)
            launcher.communicate(timeout=60)
        assert launcher.returncode == 0


SHELL_CREATE_BRIEF = """
from django.contrib.auth import get_user_model
from django.db import transaction
from publishing.actions import check_create_brief
with transaction.atomic(durable=True):
    editor = get_user_model().objects.get(username="editor")
    brief = check_create_brief(title="Kept", source_material="", acting_user=editor)
print(brief.public_id)
"""

SHELL_LIST_BRIEFS = """
from publishing.models import Brief
print(" ".join(Brief.objects.values_list("public_id", flat=True)))
"""
