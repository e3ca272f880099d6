"""Fixtures for acceptance tests, which start real processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.processes import Child, kill, manage


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """spawn(name, *manage_args, env=...): a manage.py child process whose output goes to tmp_path/<name>.log.

    Whatever is still running at the end, even a SIGSTOPped worker, is killed with its process group.
    """
    children: list[Child] = []

    def start(name: str, *args: str, env: dict[str, str]) -> Child:
        log = tmp_path / f"{name}.log"
        children.append(Child(name, manage(*args, env=env, log=log), log))
        return children[-1]

    yield start
    for child in children:
        if child.process.poll() is None:
            kill(child.process)  # SIGKILL ends a stopped process too
