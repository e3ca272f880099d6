from __future__ import annotations

from zoneinfo import ZoneInfo

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from approvals.actions import (
    check_also_publish,
    check_assign_brief,
    check_decide_revision,
    check_post_comment,
    check_resolve_thread,
)
from approvals.errors import DecisionAlreadyMade, SelfApproval, StaleApproval
from approvals.forms import CommentForm, DecisionForm
from approvals.models import Approval
from approvals.notifications import do_mark_read
from approvals.schedules import check_cancel_schedule, check_reschedule_publication, database_now
from approvals.selectors import get_revision_schedule, list_inbox, list_notifications
from publishing.errors import GalleyError, InvalidInput, NotFound, PermissionRefused
from publishing.middleware import check_form_text, checks_own_form_text
from publishing.roles import AnyUser, Role, can_view, require_reviewer, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.review import get_revision_page
from publishing.selectors.revisions import get_revision

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


def _revision_page_refused(
    request: HttpRequest,
    public_id: str,
    number: int,
    exc: GalleyError,
    *,
    decision_form: DecisionForm | None = None,
    comment_form: CommentForm | None = None,
) -> HttpResponse:
    """The revision page again, with the refused form (its reason added, the typed text in it)."""
    brief = access_brief(public_id, acting_user=request.user)
    revision = get_revision(brief, number)
    page = get_revision_page(brief, revision, viewer=request.user)
    context = {**page.as_context(), "decision_form": decision_form or DecisionForm.for_revision(revision)}
    if comment_form is not None:
        context["comment_form"] = comment_form
    return render(request, "publishing/revision_detail.html", context, status=refusal_status(exc))


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
                # A form that offered channels sends the ticked ones (none ticked is refused); one that
                # did not (a single channel) leaves them to the brief.
                channels=request.POST.getlist("channels") if request.POST.get("channels_offered") else None,
                **(form.schedule() if request.POST.get("decision") == Approval.Decision.APPROVED else {}),
                acting_user=request.user,
            )
    except GalleyError as exc:
        form.add_error(None, exc.message)
        return _revision_page_refused(request, public_id, number, exc, decision_form=form)
    label = Approval.Decision(approval.decision).label
    # The completing approval's time, when it set one (an earlier approval's is only in its audit record).
    asked_a_time = request.POST.get("decision") == Approval.Decision.APPROVED and bool(form.schedule())
    schedule = get_revision_schedule(approval.revision) if created and asked_a_time else None
    if schedule is not None:
        messages.success(
            request,
            f"{label}: revision {approval.revision.number}, to be published at {schedule.local:%Y-%m-%d %H:%M} "
            f"{schedule.zone} ({schedule.publish_at:%H:%M} UTC)"
            + (": that time has passed, so it is published now." if schedule.publish_at <= database_now() else "."),
        )
    elif created and asked_a_time:
        messages.success(
            request,
            f"{label}: revision {approval.revision.number}. Your publish time is recorded with your approval; the "
            "approval that completes the policy decides when it is published.",
        )
    elif created:
        messages.success(request, f"{label}: revision {approval.revision.number}.")
    else:
        messages.info(request, f"You had already recorded “{label}” on revision {approval.revision.number}.")
    return redirect(approval.revision)


@require_POST
def also_publish(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Send approved revision `number` to one more channel ("also publish to"), audited."""
    try:
        with transaction.atomic(durable=True):
            added = check_also_publish(
                public_id, revision_number=number, channel=request.POST.get("channel", ""), acting_user=request.user
            )
    except GalleyError as exc:
        return _refused(request, exc, title="Not added")
    channel = request.POST.get("channel", "")
    if added:
        messages.success(request, f"Revision {number} will be published to {channel} too.")
    else:
        messages.info(request, f"Revision {number} was already going to {channel}.")
    return redirect("publishing:revision", public_id, number)


@require_POST
def reschedule(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Move scheduled revision `number` to the posted time and zone on every channel, audited."""
    try:
        with transaction.atomic(durable=True):
            schedule, changed = check_reschedule_publication(
                public_id,
                revision_number=number,
                publish_at=request.POST.get("publish_at", ""),
                zone=request.POST.get("zone", ""),
                acting_user=request.user,
            )
    except GalleyError as exc:
        return _refused(request, exc, title="Not rescheduled")
    if changed:
        when = schedule.publish_at.astimezone(ZoneInfo(schedule.zone))
        messages.success(request, f"Revision {number} will be published at {when:%Y-%m-%d %H:%M} {schedule.zone}.")
    else:
        messages.info(request, f"Revision {number} was already scheduled for that time.")
    return redirect("publishing:revision", public_id, number)


@require_POST
def cancel_schedule(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Cancel scheduled revision `number` on every channel, with the posted reason, audited."""
    try:
        with transaction.atomic(durable=True):
            _schedule, changed = check_cancel_schedule(
                public_id, revision_number=number, reason=request.POST.get("reason", ""), acting_user=request.user
            )
    except GalleyError as exc:
        return _refused(request, exc, title="Not cancelled")
    if changed:
        messages.success(
            request, f"Revision {number} will not be published. To publish the story, approve a new revision."
        )
    else:
        messages.info(request, f"Revision {number}'s schedule was already cancelled.")
    return redirect("publishing:revision", public_id, number)


INBOX_PAGE_SIZE = 50
NOTIFICATIONS_PAGE_SIZE = 50


def _refused(request: HttpRequest, exc: GalleyError, *, title: str) -> HttpResponse:
    return render(request, "refused.html", {"message": exc.message, "title": title}, status=refusal_status(exc))


@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    """Awaiting my review: briefs in review assigned to me or to a group of mine, longest waiting first."""
    user = require_role(request.user, Role.APPROVER, to="see the review inbox")
    page = Paginator(list_inbox(user), INBOX_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "approvals/inbox.html", {"page": page, "now": timezone.now()})


@require_POST
def assign(request: HttpRequest, public_id: str) -> HttpResponse:
    """Assign the brief's review to an approver or to the Approvers group."""
    require_reviewer(request.user, to="assign a brief for review")
    try:
        with transaction.atomic(durable=True):
            assignment, changed = check_assign_brief(
                public_id, assignee=request.POST.get("assignee"), acting_user=request.user
            )
    except GalleyError as exc:
        return _refused(request, exc, title="Not assigned")
    if changed:
        messages.success(request, f"{assignment.brief.public_id} is assigned to {assignment.assignee_name}.")
    else:
        messages.info(request, f"{assignment.brief.public_id} was already assigned to {assignment.assignee_name}.")
    return redirect(assignment.brief)


@checks_own_form_text
@require_POST
def comment(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Start a comment thread on revision `number`, or reply to one. A refusal re-renders the
    revision page with the reason beside the form, the typed text in it."""
    require_reviewer(request.user, to="comment on a revision")
    form = CommentForm(request.POST)
    try:
        check_form_text(request, form)
        with transaction.atomic(durable=True):
            posted = check_post_comment(
                public_id,
                revision_number=number,
                body=request.POST.get("body", ""),
                reply_to=request.POST.get("reply_to"),
                acting_user=request.user,
            )
    except GalleyError as exc:
        form.add_error(None, exc.message)
        return _revision_page_refused(request, public_id, number, exc, comment_form=form)
    messages.success(request, "Reply posted." if posted.parent_id else "Comment posted.")
    return redirect(posted)


@require_POST
def resolve(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Resolve (`resolved` "1") or reopen (anything else) the thread of the posted comment."""
    require_reviewer(request.user, to="resolve or reopen a comment thread")
    resolved = request.POST.get("resolved") == "1"
    try:
        with transaction.atomic(durable=True):
            thread, changed = check_resolve_thread(
                public_id,
                revision_number=number,
                comment_id=request.POST.get("comment"),
                resolved=resolved,
                acting_user=request.user,
            )
    except GalleyError as exc:
        return _refused(request, exc, title="Thread unchanged")
    if changed:
        messages.success(request, "Thread resolved." if resolved else "Thread reopened.")
    return redirect(thread)


def require_reviewer_or_operator(user: AnyUser) -> User:
    """Notifications are for whoever holds a role: the events they tell concern each role."""
    if not isinstance(user, User) or not can_view(user):
        raise PermissionRefused("You need the Editors, Approvers or Operators role to see notifications.")
    return user


@require_GET
def notifications(request: HttpRequest) -> HttpResponse:
    user = require_reviewer_or_operator(request.user)
    page = Paginator(list_notifications(user), NOTIFICATIONS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "approvals/notifications.html", {"page": page})


@require_POST
def mark_read(request: HttpRequest) -> HttpResponse:
    """Mark one notification (`notification`: its id) or, without one, all of them read."""
    user = require_reviewer_or_operator(request.user)
    raw = request.POST.get("notification", "")
    try:
        notification_id = int(raw) if raw else None
    except ValueError:
        return _refused(request, InvalidInput("The notification is not a number; reload the page."), title="Not marked")
    with transaction.atomic(durable=True):
        do_mark_read(user, notification_id=notification_id)
    return redirect("approvals:notifications")
