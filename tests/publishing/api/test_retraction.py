"""POST /api/v1/briefs/{id}/retraction (docs/api.md#retraction, docs/retractions.md): approvers only, a reason
and `confirm: true`, Idempotency-Key like every write; the brief's JSON shows each channel's retraction."""

from __future__ import annotations

import pytest

from publishing.identities import RETRACT, retract_key
from tests.publishing.api.support import problem
from workers.drain import drain
from workers.models import AuditEvent, Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_retries")]

BODY = {"reason": "Legal asked for a takedown.", "confirm": True}


def test_retraction__approver__200_per_channel__replayed_by_key__shown_in_the_brief(approver_api, published_brief):
    path = f"/briefs/{published_brief.public_id}/retraction"
    answer = approver_api.post(path, BODY, key="retract-once")
    again = approver_api.post(path, BODY, key="retract-once")

    assert answer.status_code == 200, answer.content
    assert answer.json() == again.json() and again["Idempotent-Replayed"] == "true"
    body = answer.json()
    assert (body["status"], body["reason"]) == ("retracted", BODY["reason"])
    assert [(r["channel"], r["revision"], r["retracted_at"]) for r in body["retractions"]] == [("web", 1, None)]
    assert Operation.objects.filter(kind=RETRACT).count() == 1
    assert AuditEvent.objects.filter(event_type="brief.retraction_requested").count() == 1

    drain(worker_id="w-test", kinds=[RETRACT], time_budget=30, idle_wait=0.5)
    shown = approver_api.get(f"/briefs/{published_brief.public_id}").json()
    assert shown["status"] == "retracted" and shown["retraction_reason"] == BODY["reason"]
    (retraction,) = shown["retractions"]
    assert retraction["status"] == "succeeded" and retraction["retracted_at"] is not None
    assert Operation.objects.get(kind=RETRACT).key == retract_key(published_brief.public_id, 1)


@pytest.mark.parametrize(
    ("role", "body", "status", "detail"),
    [
        ("editor", BODY, 403, "Approvers can retract"),
        ("approver", {**BODY, "confirm": False}, 400, "Confirm the retraction"),
        ("approver", {**BODY, "reason": ""}, 400, "reason for the retraction is required"),
        ("approver", {"reason": "x"}, 400, "confirm"),
        ("approver", {**BODY, "retract_at": "2030-01-01T09:00:00"}, 400, "time zone"),
    ],
    ids=["editor", "not-confirmed", "no-reason", "confirm-missing", "naive-time"],
)
def test_retraction__refused__nothing_written(as_role, published_brief, role, body, status, detail):
    response = as_role(role).post(f"/briefs/{published_brief.public_id}/retraction", body)
    assert response.status_code == status, response.content
    assert detail in problem(response)["detail"]
    assert not Operation.objects.filter(kind=RETRACT).exists()
