"""Nothing lost in a retraction (docs/invariants.md#i12, #i16): a real worker process dies after the
retraction was sent and before its finalize; a fresh one finishes, and the target holds exactly one
retraction, observed (read-back retracted, permalink 410) and recorded by Galley.

The processes and the editorial side are test_crash_points' (the reference target as its own process,
`run_worker --until-idle` children, the real actions)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.db import transaction

from publishing.actions.retractions import check_retract_brief
from publishing.identities import retract_key
from publishing.models import Brief, Publication
from tests.acceptance import test_crash_points
from tests.acceptance.test_crash_points import (
    CRASH_EXIT_CODE,
    LEASE_SECONDS,
    TIMEOUT_SECONDS,
    TOKEN,
    Target,
    approve,
    worker_env,
    write_revision,
)
from tests.processes import kill, run_worker, wait_until
from workers.models import Attempt, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

# The reference target as its own process: test_crash_points' fixture, shared.
start_target = test_crash_points.start_target


def retractions(target: Target) -> list[dict[str, Any]]:
    response = httpx.get(f"{target.url}/_retractions", timeout=5)
    assert response.status_code == 200
    return response.json()["retractions"]


def published_then_retracted(target: Target, spawn, editor, approver) -> tuple[str, str]:
    """A brief published and verified by a worker that ran until idle, then retracted by the approver:
    (its public id, the retraction key)."""
    revision = write_revision(editor)
    approve(revision, approver)
    publisher = run_worker(spawn, "publisher", env=worker_env(target))
    assert publisher.wait(timeout=120) == 0, publisher.output()
    public_id = revision.brief.public_id
    with transaction.atomic(durable=True):
        check_retract_brief(public_id, reason="Legal asked for a takedown.", confirm=True, acting_user=approver)
    return public_id, retract_key(public_id, revision.number)


def assert_retracted_exactly_once(public_id: str, key: str, target: Target) -> None:
    assert [row["operation_key"] for row in retractions(target)] == [key]
    operation = Operation.objects.get(key=key)
    assert operation.status == Operation.Status.SUCCEEDED
    assert list(Operation.objects.unfinished().values_list("key", "status")) == []
    publication = Publication.objects.get(brief__public_id=public_id)
    assert publication.retracted_at is not None
    back = httpx.get(
        f"{target.url}/v1/publications/{publication.external_id}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=5,
    ).json()
    assert back["retracted"] is True
    assert httpx.get(publication.permalink, timeout=5).status_code == 410
    assert Brief.objects.get(public_id=public_id).status == Brief.Status.RETRACTED
    for attempt in Attempt.objects.filter(operation=operation):
        assert attempt.finished_at is not None, f"{attempt} was never closed"
    # The fresh worker's attempt followed one that may have had its effect: it read back first.
    assert Attempt.objects.filter(operation=operation, worker_id="fresh").get().ambiguous


@pytest.mark.parametrize("point", ["after_target_response:retract", "before_finalize:retract"])
def test_i16_i12__worker_killed_between_send_and_finalize__one_retraction_after_restart(
    point: str, start_target, spawn, editor, approver
):
    target = start_target()
    public_id, key = published_then_retracted(target, spawn, editor, approver)

    crashy = run_worker(
        spawn, "crashy", env=worker_env(target, crash_point=point, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS)
    )
    assert crashy.wait(timeout=120) == CRASH_EXIT_CODE, crashy.output()
    assert f"crash point {point} reached" in crashy.output()
    assert len(retractions(target)) == 1  # sent and applied, never recorded
    assert Operation.objects.get(key=key).status == Operation.Status.RUNNING
    assert Publication.objects.get(brief__public_id=public_id).retracted_at is None

    fresh = run_worker(spawn, "fresh", env=worker_env(target))
    assert fresh.wait(timeout=120) == 0, fresh.output()

    assert_retracted_exactly_once(public_id, key, target)
    assert "adopting the target's existing retraction" in fresh.output()


def test_i16_i12__worker_sigkilled_after_the_target_applied_the_retraction__one_retraction_after_restart(
    start_target, spawn, editor, approver
):
    """A real SIGKILL: the worker freezes right after the send (GALLEY_FREEZE_POINT), before anything is
    recorded, and the test kills it once the target shows the retraction applied."""
    target = start_target()
    public_id, key = published_then_retracted(target, spawn, editor, approver)

    crashy = run_worker(
        spawn,
        "crashy",
        env=worker_env(
            target,
            lease=LEASE_SECONDS,
            timeout=TIMEOUT_SECONDS,
            GALLEY_FREEZE_POINT="after_target_response:retract",
        ),
    )
    wait_until(lambda: retractions(target), timeout=120, what="the target's retraction")
    assert crashy.process.poll() is None, crashy.output()
    kill(crashy.process)
    assert crashy.process.returncode == -9
    assert Publication.objects.get(brief__public_id=public_id).retracted_at is None

    fresh = run_worker(spawn, "fresh", env=worker_env(target))
    assert fresh.wait(timeout=120) == 0, fresh.output()

    assert_retracted_exactly_once(public_id, key, target)
