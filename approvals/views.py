from __future__ import annotations

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from approvals.actions import check_decide_revision
from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from approvals.forms import DecisionForm
from approvals.models import Approval
from publishing.errors import GalleyError, InvalidInput, NotFound
from publishing.roles import Role, require_role
from publishing.selectors import access_brief, get_revision, get_revision_page

# A refusal's status says whose move it is: fix the form (400), nothing there (404), not yours to
# make (403), or the revision moved on / the decision was made (409).
REFUSAL_STATUS: dict[type[GalleyError], int] = {
    InvalidInput: 400,
    NotFound: 404,
    SelfApproval: 403,
    StaleApproval: 409,
    DecisionAlreadyMade: 409,
}


@require_POST
def decide(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Approve or request changes on revision `number`, as reviewed with the posted payload hash.

    A refusal re-renders the revision page with the reason and the approver's comment kept.
    """
    require_role(request.user, Role.APPROVER, to="approve or request changes")
    decision = request.POST.get("decision", "")
    try:
        with transaction.atomic(durable=True):
            approval, created = check_decide_revision(
                public_id,
                revision_number=request.POST.get("revision_number", number),
                payload_hash=request.POST.get("payload_hash", ""),
                decision=decision,
                comment=request.POST.get("comment", ""),
                acting_user=request.user,
            )
    except GalleyError as exc:
        brief = access_brief(public_id, acting_user=request.user)
        revision = get_revision(brief, number)
        form = DecisionForm(request.POST)
        form.is_valid()
        form.add_error(None, exc.message)
        page = get_revision_page(brief, revision, viewer=request.user)
        return render(
            request,
            "publishing/revision_detail.html",
            {**page.as_context(), "decision_form": form},
            status=REFUSAL_STATUS.get(type(exc), 409),
        )
    label = Approval.Decision(approval.decision).label
    if created:
        messages.success(request, f"{label}: revision {approval.revision.number}.")
    else:
        messages.info(request, f"You had already recorded “{label}” on revision {approval.revision.number}.")
    return redirect(approval.revision)
