"""`make bench`: benchmarks on the suite's throwaway PostgreSQL, run only when this folder is named.

`make test` (plain `pytest`, testpaths = tests) never runs them: every file here is ignored
unless the command line names tests/benchmarks or something inside it. Each benchmark hands
its Result to `bench_report`; the table is printed once at the end of the session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.benchmarks.support import Result, format_table

BENCHMARKS = Path(__file__).resolve().parent
_results = pytest.StashKey[list[Result]]()


def _named_on_command_line(config: pytest.Config) -> bool:
    here = config.invocation_params.dir
    for arg in config.args:
        path = (here / arg.split("::", 1)[0]).resolve()
        if path == BENCHMARKS or BENCHMARKS in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Called for the files of this folder only; skip them all unless the benchmarks were asked for."""
    return None if _named_on_command_line(config) else True


@pytest.fixture(autouse=True)
def _quiet_request_logs():
    """With -s every log line reaches the terminal; the per-request ones would bury the table."""
    loggers = [logging.getLogger(name) for name in ("httpx", "django-q")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


@pytest.fixture
def bench_report(request: pytest.FixtureRequest) -> Callable[[Result], None]:
    results = request.config.stash.setdefault(_results, [])
    return results.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    results = config.stash.get(_results, [])
    if not results:
        return
    terminalreporter.write_sep("=", "Galley benchmarks (each baseline measured in the same run)")
    for line in format_table(results):
        terminalreporter.write_line(line)
