"""Real processes for acceptance tests: start Galley's commands, wait until they answer, stop or kill them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    out = open(log, "a") if log is not None else subprocess.PIPE  # noqa: SIM115 (handed to the child)
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=BASE_DIR,
        env=dict(env),
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


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
    """Send `sig` to the process group and wait; SIGKILL if it does not exit in time. Returns the exit code."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            process.wait()
    return process.returncode


def kill(process: subprocess.Popen[str]) -> None:
    """kill -9 the process group: no cleanup, no atexit, no commit."""
    stop(process, sig=signal.SIGKILL)
