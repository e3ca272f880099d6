"""A summary run that cannot go on ends in a shown outcome with the editor's next step (issue: source
"Hi there." → quality gate dead, yet the page said "Summary run 1 · Running" forever)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from pytest_django.asserts import assertContains, assertNotContains

from publishing.actions.briefs import check_create_brief
from publishing.identities import SUMMARY_STEP, step_key
from tests.web import client_for
from workers.drain import drain
from workers.models import Operation

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}


def _gate_fails(editor):
    """The offline provider on a source too short to summarise: the quality gate refuses the result."""
    brief = check_create_brief(title="Greeting", source_material="Hi there.", acting_user=editor)
    drain(worker_id="w-outcome", kinds=[SUMMARY_STEP], time_budget=60, idle_wait=0.5)
    gate = Operation.objects.get(key=step_key(brief.public_id, 1, "quality_gate"))
    assert (gate.status, gate.last_error_kind, gate.needs_operator) == ("dead", "quality_gate", False)
    return brief, gate


def test_summary_run__quality_gate_dead__stopped_with_reason_and_the_editors_next_step(editor, approver):
    brief, gate = _gate_fails(editor)

    page = client_for(editor).get(brief.get_absolute_url())

    assertContains(page, 'id="pipeline" data-run="1" data-status="stopped"')
    assertContains(page, '<span class="status status-stopped">Stopped at “Quality gate”</span>')
    assertNotContains(page, '<span class="status status-running">Running</span>')
    assertContains(page, "The summary stopped at step “Quality gate”</strong>, so it wrote no revision")
    assertContains(page, gate.last_error_message)
    edit, source = (
        reverse("publishing:revision_edit", args=[brief.public_id]),
        reverse("publishing:source_edit", args=[brief.public_id]),
    )
    assertContains(page, f'<a href="{edit}">write revision 1 yourself</a>')
    assertContains(page, f'<a href="{source}">edit the source material</a> to start a new summary run')
    assertNotContains(page, "An operator has been told")  # the policy left this one to the editors
    # The timeline says the run ended, and how, in its one entry.
    assertContains(page, "AI summary: failed at step “Quality gate”; no revision came of it")
    # An approver is told what an editor can do, without links they could not follow.
    assertContains(
        client_for(approver).get(brief.get_absolute_url()),
        "An editor can write revision 1 themselves, or edit the source material to start a new summary run.",
    )


def test_summary_run__stopped__the_live_partial_says_so_too(editor):
    brief, _gate = _gate_fails(editor)

    response = client_for(editor).get(reverse("publishing:brief_live", args=[brief.public_id]), **HTMX)

    assertContains(response, 'data-status="stopped"')
    assertContains(response, "write revision 1 yourself")
