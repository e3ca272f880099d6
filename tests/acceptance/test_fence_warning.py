"""The fence warning does not cry wolf (issue 18, item 9): a real worker process started against a target
that confirms its revision fence (GET /v1/status → "fence": true) logs no fence warning; against one that
says "fence": false, or has no status route (404), it logs exactly one, at WARNING."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.processes import Child, child_database_url, free_port, process_env, start, stop, wait_for_http
from tests.publishing.test_check_target import target_without_a_status_route
from tests.reference_target import TOKEN

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FENCE_WARNING = "the target does not confirm a revision fence"


@pytest.fixture
def target_url(request, tmp_path) -> Iterator[str]:
    """The reference target program with its fence on or off, or a protocol target with no status
    route (docs/target-protocol.md#status)."""
    if request.param == "no-status-route":
        with target_without_a_status_route() as url:
            yield url
        return
    port = free_port()
    argv = ["-m", "galley.reference_target", "--port", str(port), "--db", str(tmp_path / "target.sqlite3")]
    argv += [f"--token={TOKEN}", *(["--fence-off"] if request.param == "fence-off" else [])]
    program = start(argv, env=process_env(), log=tmp_path / "target.log")
    try:
        wait_for_http(f"http://127.0.0.1:{port}/_health", process=program)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(program)


@pytest.mark.parametrize(
    ("target_url", "warnings"),
    [("fence-on", 0), ("fence-off", 1), ("no-status-route", 1)],
    indirect=["target_url"],
)
def test_fence_warning__worker_start__warns_once_only_when_the_fence_is_not_confirmed(
    spawn: Callable[..., Child], target_url: str, warnings: int
):
    env = process_env(
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        GALLEY_TARGET_KIND="reference",
        GALLEY_TARGET_URL=target_url,
        GALLEY_TARGET_TOKEN=TOKEN,
    )
    worker = spawn("worker", "run_worker", "--until-idle", "--worker-id", "fence-check", "--poll", "0.2", env=env)

    assert worker.wait(timeout=120) == 0, worker.output()

    output = worker.output()
    assert "publishing target: ok: " in output, output
    lines = [line for line in output.splitlines() if FENCE_WARNING in line]
    assert len(lines) == warnings, output
    for line in lines:
        assert " WARNING publishing.clients.target " in line
        assert "Galley cannot stop a late packet alone" in line
    if warnings == 0:
        assert "its revision fence is on" in output
