"""Real processes for acceptance tests: start Galley's commands, wait until they answer, stop or kill them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx
from django.db import connection

from galley.testing.ports import free_port  # noqa: F401  (for the tests that import it from here)

BASE_DIR = Path(__file__).resolve().parents[1]


def child_database_url(*, host: str | None = None, port: int | None = None) -> str:
    """The test database (test_<name>) as a URL for child processes; DATABASE_URL names only the server.

    `host` and `port` put another address in it (a pooler in front of the server, tests/pgbouncer.py)."""
    settings = connection.settings_dict
    user = quote(settings["USER"] or "", safe="")
    password = quote(settings["PASSWORD"] or "", safe="")
    auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
    host = (settings["HOST"] or "") if host is None else host
    port = (settings["PORT"] or "") if port is None else port
    query = {key: str(value) for key, value in (settings.get("OPTIONS") or {}).items()}
    if host.startswith("/"):
        netloc = auth
        query["host"] = host
    else:
        # libpq's lists (docs/operations.md#failover): a host list with one port each, or one for all.
        hosts = host.split(",")
        ports = str(port).split(",") if port else [""]
        ports = ports * len(hosts) if len(ports) == 1 else ports
        pairs = zip((f"[{name}]" if ":" in name else name for name in hosts), ports, strict=True)
        netloc = auth + ",".join(f"{name}:{number}" if number else name for name, number in pairs)
    url = f"postgresql://{netloc}/{quote(settings['NAME'], safe='')}"
    return f"{url}?{urlencode(query)}" if query else url


def process_env(**overrides: str) -> dict[str, str]:
    """This test process's environment (same database, same secret key) plus overrides.

    A value of "" removes the variable.
    """
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "galley.settings")
    for name, value in overrides.items():
        if value == "":
            env.pop(name, None)
        else:
            env[name] = value
    return env


def start(argv: list[str], *, env: Mapping[str, str], log: Path | None = None) -> subprocess.Popen[str]:
    """Start `python <argv>` from the checkout in its own process group; output to `log` (or a pipe)."""
    command = [sys.executable, *argv]
    options = {"cwd": BASE_DIR, "env": dict(env), "stderr": subprocess.STDOUT, "text": True, "start_new_session": True}
    if log is None:
        return subprocess.Popen(command, stdout=subprocess.PIPE, **options)
    # The child keeps its own copy of the descriptor; the parent's is closed at once.
    with open(log, "a") as out:
        return subprocess.Popen(command, stdout=out, **options)


def manage(*args: str, env: Mapping[str, str], log: Path | None = None) -> subprocess.Popen[str]:
    return start(["manage.py", *args], env=env, log=log)


def wait_for_http(url: str, *, process: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until `url` answers 2xx, failing at once if `process` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, f"{process.args} exited with {process.returncode} before {url} answered"
        try:
            if httpx.get(url, timeout=1).is_success:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer within {timeout} s"
        time.sleep(0.1)


def stop(process: subprocess.Popen[str], *, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    """Send `sig` to the process and wait, then SIGKILL what is left of its group. Returns the exit code.

    SIGTERM goes to the process alone (a django-q2 cluster stops its workers in order when its
    main process asks them, and hangs when all are signalled at once); SIGKILL goes to the group.
    """
    if process.poll() is None:
        if sig == signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        else:
            process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return process.returncode


def kill(process: subprocess.Popen[str]) -> None:
    """kill -9 the process group: no cleanup, no atexit, no commit."""
    stop(process, sig=signal.SIGKILL)


@dataclass
class Child:
    name: str
    process: subprocess.Popen[str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait(self, timeout: float = 60) -> int:
        """The exit code; the test fails (with the child's output) if it runs longer than `timeout`."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill(self.process)
            raise AssertionError(f"{self.name} still ran after {timeout} s\n{self.output()}") from None

    def wait_for_output(self, text: str, *, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.process.poll() is None, (
                f"{self.name} exited ({self.process.returncode}) before saying {text!r}\n{self.output()}"
            )
            assert time.monotonic() < deadline, f"{self.name} did not say {text!r} within {timeout} s\n{self.output()}"
            time.sleep(0.1)


def run_worker(spawn: Callable[..., Child], name: str, *, env: Mapping[str, str]) -> Child:
    """A `run_worker --until-idle` child named `name` (also its worker id), through the `spawn` fixture."""
    return spawn(name, "run_worker", "--until-idle", "--worker-id", name, "--poll", "0.2", env=env)


def wait_until(condition: Callable[[], object], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.02)
