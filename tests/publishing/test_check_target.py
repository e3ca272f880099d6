"""`manage.py check_target` against a real reference target: it says what it found, or exactly
what is wrong, and exits non-zero then. A target that does not confirm a revision fence passes
with a warning: Galley cannot stop a late packet alone (docs/operations.md#late-packet)."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from galley.reference_target import Faults
from publishing.actions.channels import do_save_channel
from publishing.clients import target as target_client
from tests.processes import BASE_DIR, child_database_url, free_port, process_env, stop, wait_for_http
from tests.reference_target import TOKEN
from workers.service import run_startup_checks

pytestmark = pytest.mark.django_db(transaction=True)  # check_target reads the channels

FOUND = "it answers the protocol and accepts GALLEY_TARGET_TOKEN"
LATE_PACKET = "Galley cannot stop a late packet alone"


def check_target() -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("check_target", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_check_target__reference_target__ok(target):
    out, err = check_target()

    assert out == f"target ok: §7.4 target at {target.url}: {FOUND}; its revision fence is on\n"
    assert err == ""
    assert target.ledger() == []


def test_check_target__fence_off__passes_with_a_warning_that_a_late_packet_can_land(start_target):
    target = start_target(Faults(fence_off=True))

    out, err = check_target()

    assert out == f"target ok: §7.4 target at {target.url}: {FOUND}\n"
    assert err.startswith('WARNING: the target does not confirm a revision fence (GET /v1/status says "fence": false).')
    assert LATE_PACKET in err
    assert "409 stale_revision" in err


def test_check_target__fence_switched_off_on_a_running_target__status_says_so(target):
    target.faults = Faults(fence_off=True)

    _out, err = check_target()

    assert err.startswith("WARNING: the target does not confirm a revision fence")


@contextlib.contextmanager
def target_without_a_status_route(*, status_drops: bool = False) -> Iterator[str]:
    """A protocol target holding nothing and defining no GET /v1/status: every GET answers 404 not_found.
    With `status_drops`, GET /v1/status closes the connection without an answer instead."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if status_drops and self.path == "/v1/status":
                self.close_connection = True
                return
            body = json.dumps({"error": "not_found"}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_check_target__target_without_a_status_route__passes_with_a_warning(settings):
    # A faithful target need not answer GET /v1/status (docs/target-protocol.md#status: optional).
    settings.GALLEY_TARGET_KIND = "reference"
    settings.GALLEY_TARGET_TOKEN = TOKEN
    with target_without_a_status_route() as url:
        settings.GALLEY_TARGET_URL = url
        out, err = check_target()

    assert out.startswith("target ok: ")
    assert err.startswith("WARNING: the target does not confirm a revision fence (GET /v1/status answered 404).")


def test_check_target__status_cannot_be_asked__passes_with_a_warning(settings):
    settings.GALLEY_TARGET_KIND = "reference"
    settings.GALLEY_TARGET_TOKEN = TOKEN
    with target_without_a_status_route(status_drops=True) as url:
        settings.GALLEY_TARGET_URL = url
        out, err = check_target()

    assert out.startswith("target ok: ")
    assert err.startswith("WARNING: the target does not confirm a revision fence (GET /v1/status could not be asked: ")


def test_fence_warning__worker_startup_checks_run_again__one_warning_per_process(start_target, caplog, monkeypatch):
    unfenced = start_target(Faults(fence_off=True))
    monkeypatch.setattr(target_client, "_fence_warned", False)  # as in a process that has not warned yet

    outcomes = [run_startup_checks()["publishing target"] for _ in range(3)]

    assert outcomes == [f"ok: §7.4 target at {unfenced.url}: {FOUND}"] * 3
    warnings = [record for record in caplog.records if "does not confirm a revision fence" in record.getMessage()]
    assert [(record.levelname, record.name) for record in warnings] == [("WARNING", "publishing.clients.target")]
    assert LATE_PACKET in warnings[0].getMessage()


def test_fence_warning__worker_startup_check_against_a_fenced_target__no_warning(target, caplog, monkeypatch):
    monkeypatch.setattr(target_client, "_fence_warned", False)

    outcome = run_startup_checks()["publishing target"]

    assert outcome == f"ok: §7.4 target at {target.url}: {FOUND}; its revision fence is on"
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_reference_target_status__says_whether_its_fence_is_on(start_target):
    fenced = start_target()
    unfenced = start_target(Faults(fence_off=True))
    auth = {"Authorization": f"Bearer {TOKEN}"}

    assert httpx.get(f"{fenced.url}/v1/status", headers=auth, timeout=5).json() == {
        "target": "galley-reference-target",
        "fence": True,
    }
    assert httpx.get(f"{unfenced.url}/v1/status", headers=auth, timeout=5).json()["fence"] is False
    assert httpx.get(f"{fenced.url}/v1/status", timeout=5).status_code == 401


@pytest.mark.acceptance
@pytest.mark.parametrize("fence", ["on", "off"])
def test_check_target__reference_target_program__warns_only_when_its_fence_is_off(tmp_path, fence):
    port = free_port()
    argv = [sys.executable, "-m", "galley.reference_target", "--port", str(port), "--token", TOKEN]
    # check_target reads the channels: the test database's.
    env = process_env(GALLEY_VAR_DIR=str(tmp_path), GALLEY_TARGET_TOKEN=TOKEN, DATABASE_URL=child_database_url())
    program = subprocess.Popen(
        [*argv, *(["--fence-off"] if fence == "off" else [])],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/_health", process=program, timeout=60)
        checked = subprocess.run(
            [sys.executable, "manage.py", "check_target"],
            cwd=BASE_DIR,
            env={**env, "GALLEY_TARGET_KIND": "reference", "GALLEY_TARGET_URL": f"http://127.0.0.1:{port}"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop(program)

    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("target ok: ")
    if fence == "on":
        assert "its revision fence is on" in checked.stdout
        assert "WARNING" not in checked.stderr
    else:
        assert "WARNING: the target does not confirm a revision fence" in checked.stderr
        assert LATE_PACKET in checked.stderr


def test_check_target__wrong_token__says_which_setting(target, settings):
    settings.GALLEY_TARGET_TOKEN = "not-the-token"
    with pytest.raises(CommandError, match=r"not ready: The target refused our credentials; check GALLEY_TARGET_TOKEN"):
        call_command("check_target")


def test_check_target__nothing_listening__says_so(settings):
    settings.GALLEY_TARGET_URL = f"http://127.0.0.1:{free_port()}"
    settings.GALLEY_TARGET_TOKEN = TOKEN
    with pytest.raises(CommandError, match=r"not ready: Connection to the target failed"):
        call_command("check_target")


# --- several channels: one line each, non-zero if any is not ready ---------------------------------------


def add_channel(slug: str, url: str, token: str, *, enabled: bool = True) -> None:
    with transaction.atomic():
        do_save_channel(
            None,
            values={"slug": slug, "name": slug, "base_url": url, "enabled": enabled},
            secret=token,
            acting_user=None,
        )


def test_check_target__every_enabled_channel__one_line_each(target, start_target, settings):
    partner = start_target(Faults(fence_off=True))
    settings.GALLEY_TARGET_URL = target.url  # start_target pointed the settings at the last one
    add_channel("partner-feed", partner.url, TOKEN)
    add_channel("archive", f"http://127.0.0.1:{free_port()}", TOKEN, enabled=False)

    out, err = check_target()

    assert out.splitlines() == [
        f"target ok: §7.4 target at {target.url}: {FOUND}; its revision fence is on",
        f"partner-feed: ok: §7.4 target at {partner.url}: it answers the protocol and accepts "
        "the channel's credentials (admin: Publishing > Channels)",
    ]
    assert err.startswith("partner-feed: WARNING: the target does not confirm a revision fence")


def test_check_target__one_channel_not_ready__named__exit_non_zero__the_others_still_checked(target):
    add_channel("partner-feed", f"http://127.0.0.1:{free_port()}", TOKEN)
    out = StringIO()

    with pytest.raises(CommandError, match=r"^partner-feed: not ready: Connection to the target failed"):
        call_command("check_target", stdout=out)
    assert out.getvalue().startswith("target ok: ")


def test_check_target__channel_option__checks_that_channel_only(target, start_target, settings):
    partner = start_target()
    settings.GALLEY_TARGET_URL = f"http://127.0.0.1:{free_port()}"  # the primary is down: not checked
    add_channel("partner-feed", partner.url, "not-the-token")
    out = StringIO()

    with pytest.raises(
        CommandError, match=r"^partner-feed: not ready: The target refused our credentials; check the channel's"
    ):
        call_command("check_target", "--channel", "partner-feed", stdout=out)
    with pytest.raises(CommandError, match="There is no channel 'nowhere'"):
        call_command("check_target", "--channel", "nowhere")
    assert out.getvalue() == ""
