"""Nothing lost in a retraction (docs/invariants.md#i12, #i16): a real worker process dies after a
retraction was sent and before its finalize; a fresh one finishes, and each of the two channels holding
the brief (two reference target processes) holds exactly one retraction, observed (read-back retracted,
permalink 410) and recorded by Galley.

The processes and the editorial side are test_crash_points' and test_channel_hang's (reference targets as
processes of their own, `run_worker --until-idle` children, the real actions)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.db import transaction

from publishing.actions.retractions import check_retract_brief
from publishing.identities import retract_key
from publishing.models import Brief, Publication
from tests.acceptance import test_channel_hang, test_crash_points
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

# Reference targets as processes of their own, the settings' one and a default channel's: the fixtures
# of test_crash_points and test_channel_hang, shared.
start_target = test_crash_points.start_target
process_channel = test_channel_hang.process_channel
PARTNER = "partner-feed"


def retractions(url: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/_retractions", timeout=5)
    assert response.status_code == 200
    return response.json()["retractions"]


def two_channels(start_target, process_channel) -> tuple[Target, dict[str, str]]:
    """The settings' target (channel web) and partner-feed's, each a process; by slug, their addresses."""
    target = start_target()
    partner_url, _process = process_channel(PARTNER)
    return target, {"web": target.url, PARTNER: partner_url}


def applied_anywhere(urls: dict[str, str]) -> int:
    return sum(len(retractions(url)) for url in urls.values())


def published_then_retracted(target: Target, spawn, editor, approver) -> str:
    """A brief published and verified on every default channel by a worker that ran until idle, then
    retracted by the approver: its public id."""
    revision = write_revision(editor)
    approve(revision, approver)
    publisher = run_worker(spawn, "publisher", env=worker_env(target))
    assert publisher.wait(timeout=120) == 0, publisher.output()
    public_id = revision.brief.public_id
    with transaction.atomic(durable=True):
        enqueued = check_retract_brief(
            public_id, reason="Legal asked for a takedown.", confirm=True, acting_user=approver
        )
    assert len(enqueued) == 2
    return public_id


def assert_retracted_exactly_once_per_channel(public_id: str, urls: dict[str, str]) -> None:
    assert list(Operation.objects.unfinished().values_list("key", "status")) == []
    tokens = {"web": TOKEN, PARTNER: test_channel_hang.TOKEN}
    for slug, url in urls.items():
        key = retract_key(public_id, 1, slug)
        assert [row["operation_key"] for row in retractions(url)] == [key], slug
        operation = Operation.objects.get(key=key)
        assert operation.status == Operation.Status.SUCCEEDED
        publication = Publication.objects.get(brief__public_id=public_id, channel__slug=slug)
        assert publication.retracted_at is not None
        back = httpx.get(
            f"{url}/v1/publications/{publication.external_id}",
            headers={"Authorization": f"Bearer {tokens[slug]}"},
            timeout=5,
        ).json()
        assert back["retracted"] is True
        assert httpx.get(publication.permalink, timeout=5).status_code == 410
        for attempt in Attempt.objects.filter(operation=operation):
            assert attempt.finished_at is not None, f"{attempt} was never closed"
    assert Brief.objects.get(public_id=public_id).status == Brief.Status.RETRACTED
    # The crashed attempt may have had its effect: the fresh worker's attempt after it read back first.
    assert Attempt.objects.filter(operation__kind="retract", worker_id="fresh", ambiguous=True).exists()


@pytest.mark.parametrize("point", ["after_target_response:retract", "before_finalize:retract"])
def test_i16_i12__worker_killed_between_send_and_finalize__one_retraction_after_restart(
    point: str, start_target, process_channel, spawn, editor, approver
):
    target, urls = two_channels(start_target, process_channel)
    public_id = published_then_retracted(target, spawn, editor, approver)

    crashy = run_worker(
        spawn, "crashy", env=worker_env(target, crash_point=point, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS)
    )
    assert crashy.wait(timeout=120) == CRASH_EXIT_CODE, crashy.output()
    assert f"crash point {point} reached" in crashy.output()
    assert applied_anywhere(urls) >= 1  # sent and applied on one channel at least, recorded on none
    assert Operation.objects.filter(kind="retract", status=Operation.Status.RUNNING).exists()
    assert not Publication.objects.filter(brief__public_id=public_id, retracted_at__isnull=False).exists()

    fresh = run_worker(spawn, "fresh", env=worker_env(target))
    assert fresh.wait(timeout=120) == 0, fresh.output()

    assert_retracted_exactly_once_per_channel(public_id, urls)
    assert "adopting the target's existing retraction" in fresh.output()


def test_i16_i12__worker_sigkilled_after_the_target_applied_the_retraction__one_retraction_after_restart(
    start_target, process_channel, spawn, editor, approver
):
    """A real SIGKILL: the worker freezes right after the send (GALLEY_FREEZE_POINT), before anything is
    recorded, and the test kills it once the target shows the retraction applied."""
    target, urls = two_channels(start_target, process_channel)
    public_id = published_then_retracted(target, spawn, editor, approver)

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
    wait_until(lambda: applied_anywhere(urls), timeout=120, what="a target's retraction")
    assert crashy.process.poll() is None, crashy.output()
    kill(crashy.process)
    assert crashy.process.returncode == -9
    assert not Publication.objects.filter(brief__public_id=public_id, retracted_at__isnull=False).exists()

    fresh = run_worker(spawn, "fresh", env=worker_env(target))
    assert fresh.wait(timeout=120) == 0, fresh.output()

    assert_retracted_exactly_once_per_channel(public_id, urls)
