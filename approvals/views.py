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
from publishing.errors import GalleyError, InvalidInput, NotFound, PermissionRefused
from publishing.middleware import check_form_text, checks_own_form_text
from publishing.roles import Role, require_role
from publishing.selectors import access_brief, get_revision, get_revision_page

# A refusal's status says whose move it is: fix the form (400), nothing there (404), not yours to
# make (403), or the revision moved on / the decision was made (409). Looked up along the
# exception's classes, so a refusal of a kind not named here is the sender's to fix (400), never a
# conflict it is not.
REFUSAL_STATUS: dict[type[GalleyError], int] = {
    InvalidInput: 400,
    NotFound: 404,
    PermissionRefused: 403,
    SelfApproval: 403,
    StaleApproval: 409,
    DecisionAlreadyMade: 409,
    GalleyError: 400,
}


def refusal_status(exc: GalleyError) -> int:
    return next(REFUSAL_STATUS[kind] for kind in type(exc).__mro__ if kind in REFUSAL_STATUS)


@checks_own_form_text
@require_POST
def decide(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Approve or request changes on revision `number`, as reviewed with the posted payload hash.

    A refusal re-renders the revision page with the reason and the approver's comment kept. A
    damaged form (hidden fields that are no revision number or hash, or another revision's) is
    refused before the action runs.
    """
    require_role(request.user, Role.APPROVER, to="approve or request changes")
    form = DecisionForm(request.POST)
    try:
        check_form_text(request, form)
        if errors := form.shape_errors(number=number):
            raise InvalidInput(" ".join(errors))
        with transaction.atomic(durable=True):
            approval, created = check_decide_revision(
                public_id,
                revision_number=form.cleaned_data["revision_number"],
                payload_hash=form.cleaned_data["payload_hash"],
                decision=request.POST.get("decision", ""),
                comment=request.POST.get("comment", ""),
                acting_user=request.user,
            )
    except GalleyError as exc:
        brief = access_brief(public_id, acting_user=request.user)
        revision = get_revision(brief, number)
        form.add_error(None, exc.message)
        page = get_revision_page(brief, revision, viewer=request.user)
        return render(
            request,
            "publishing/revision_detail.html",
            {**page.as_context(), "decision_form": form},
            status=refusal_status(exc),
        )
    label = Approval.Decision(approval.decision).label
    if created:
        messages.success(request, f"{label}: revision {approval.revision.number}.")
    else:
        messages.info(request, f"You had already recorded “{label}” on revision {approval.revision.number}.")
    return redirect(approval.revision)
