"""Schedules through the JSON API (docs/api.md#schedules): approve with publish_at and zone, the schedule in the
revision's and the brief's JSON, reschedule (POST …/schedule) and cancel (DELETE …/schedule), and clear 400 and
409 refusals."""

from __future__ import annotations

import json

import pytest

from approvals.schedules import database_now
from publishing.identities import PUBLISH
from tests.approvals.conftest import BODY
from tests.publishing.api.support import API, ApiClient, problem, token_for
from workers.actions.claims import claim_operations
from workers.models import AuditEvent, Operation

pytestmark = pytest.mark.django_db


def approve(api: ApiClient, revision, **schedule):
    body = {"decision": "approved", "payload_hash": revision.payload_hash, **schedule}
    return api.post(f"/briefs/{revision.brief.public_id}/revisions/{revision.number}/decisions", body)


def cancel(api: ApiClient, revision, body):
    return api.client.delete(
        f"{API}/briefs/{revision.brief.public_id}/revisions/{revision.number}/schedule",
        json.dumps(body),
        content_type="application/json",
        headers=api.headers,
    )


def test_api__approve_at_local_time_and_zone__201_with_the_schedule__shown_on_revision_and_brief(
    story, revise, approver
):
    revision = revise(story, BODY)
    api = ApiClient(token_for(approver))

    response = approve(api, revision, publish_at="2027-03-28T10:00", zone="Europe/Amsterdam")

    assert response.status_code == 201, response.content
    schedule = response.json()["schedule"]
    assert schedule["publish_at"] == "2027-03-28T08:00:00Z"
    assert (schedule["zone"], schedule["local_time"]) == ("Europe/Amsterdam", "2027-03-28T10:00:00+02:00")
    assert schedule["state"] == "waiting"
    assert [(c["channel"], c["status"], c["fired_at"]) for c in schedule["channels"]] == [
        ("partner-feed", "pending", None),
        ("web", "pending", None),
    ]
    assert api.get(f"/briefs/{story.public_id}/revisions/1").json()["schedule"] == schedule
    assert api.get(f"/briefs/{story.public_id}").json()["schedule"] == schedule


def test_api__approve_now__schedule_null(story, revise, approver):
    revision = revise(story, BODY)
    response = approve(ApiClient(token_for(approver)), revision)
    assert response.status_code == 201 and response.json()["schedule"] is None


@pytest.mark.parametrize(
    ("schedule", "detail"),
    [
        ({"publish_at": "2027-03-28T02:30", "zone": "Europe/Amsterdam"}, "does not exist in Europe/Amsterdam"),
        ({"publish_at": "2027-03-28T10:00", "zone": "Nowhere/Town"}, "is not a time zone"),
        ({"publish_at": "soon"}, "is not a date and time"),
    ],
)
def test_api__approve_at_bad_time__400_clear__nothing_written(story, revise, approver, schedule, detail):
    revision = revise(story, BODY)
    response = approve(ApiClient(token_for(approver)), revision, **schedule)
    assert response.status_code == 400
    assert detail in problem(response)["detail"]
    assert not Operation.objects.filter(kind=PUBLISH).exists()


def test_api__reschedule_then_cancel__audited__409_once_fired(story, revise, approver, approver2):
    revision = revise(story, BODY)
    approve(ApiClient(token_for(approver)), revision, publish_at="2027-01-15T10:00+01:00")
    api = ApiClient(token_for(approver2))
    path = f"/briefs/{story.public_id}/revisions/1/schedule"

    moved = api.post(path, {"publish_at": "2027-01-20T09:00", "zone": "Europe/Amsterdam"})
    assert moved.status_code == 200, moved.content
    assert moved.json()["changed"] is True
    assert moved.json()["schedule"]["publish_at"] == "2027-01-20T08:00:00Z"
    assert AuditEvent.objects.filter(event_type="revision.rescheduled", actor=approver2).count() == 1
    assert problem(api.post(path, {"publish_at": "2027-02-30T09:00"}))["status"] == 400

    assert cancel(api, revision, {}).status_code in (400, 422)  # a reason is required
    cancelled = cancel(api, revision, {"reason": "The source asked us to hold it."})
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["schedule"]["state"] == "cancelled"
    assert cancelled.json()["schedule"]["cancel_reason"] == "The source asked us to hold it."
    assert cancel(api, revision, {"reason": "Again."}).json()["changed"] is False
    assert problem(api.post(path, {"publish_at": "2027-01-21T09:00+00:00"}))["status"] == 409


def test_api__reschedule_after_a_channel_fired__409_names_the_channel_and_time(story, revise, approver, approver2):
    revision = revise(story, BODY)
    approve(ApiClient(token_for(approver)), revision, publish_at=database_now().isoformat())
    claim_operations(worker_id="w-api", limit=1, kinds=[PUBLISH])
    api = ApiClient(token_for(approver2))

    response = api.post(f"/briefs/{story.public_id}/revisions/1/schedule", {"publish_at": "2027-01-21T09:00+00:00"})

    body = problem(response)
    assert response.status_code == 409
    assert "already fired on" in body["detail"] and " at 20" in body["detail"]
    assert problem(cancel(api, revision, {"reason": "Hold it."}))["status"] == 409


def test_api__reschedule_by_an_editor__403(story, revise, approver, editor):
    revision = revise(story, BODY)
    approve(ApiClient(token_for(approver)), revision, publish_at="2027-01-15T10:00+01:00")
    response = ApiClient(token_for(editor)).post(
        f"/briefs/{story.public_id}/revisions/1/schedule", {"publish_at": "2027-01-16T10:00+01:00"}
    )
    assert response.status_code == 403
