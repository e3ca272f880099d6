"""The review workflow's blocks on publishing's pages: {% revision_threads %}, {% brief_review %}, and the
schedule's ({% publish_when_fields %}, {% revision_schedule %}, {% brief_schedule %}).

Tags rather than view context, so publishing's views stay as they are; each block is one or two
queries, whatever the number of threads."""

from __future__ import annotations

from typing import Any

from django import template

from approvals.actions import APPROVERS_GROUP
from approvals.forms import AT, NOW, CommentForm, DecisionForm, default_zone, zone_choices
from approvals.schedules import database_now
from approvals.selectors import (
    Schedule,
    get_open_assignment,
    get_revision_schedule,
    get_schedule,
    list_assignable_approvers,
    list_brief_threads,
    list_threads,
)
from publishing.models import Brief, Revision

register = template.Library()


def _may_review(context: template.Context) -> bool:
    return bool(context.get("is_editor") or context.get("is_approver"))


@register.inclusion_tag("approvals/_threads.html", takes_context=True)
def revision_threads(context: template.Context, revision: Revision) -> dict[str, Any]:
    """The revision's comment threads with reply, resolve and reopen, and a form for a new thread.
    A refused comment (`comment_form` in the page's context) comes back in the form it was sent
    from, with its text and the reason."""
    threads = list(list_threads(revision))
    sent = context.get("comment_form")
    refused_in = sent.replies_to() if isinstance(sent, CommentForm) else None
    # A reply to no thread of this revision comes back on its own, said to be unposted, never in the
    # new-thread form: there a second click would start a thread the author did not mean to start.
    orphan = refused_in is not None and refused_in != "" and refused_in not in {str(thread.pk) for thread in threads}
    return {
        "revision": revision,
        "threads": threads,
        "may_review": _may_review(context),
        "sent_form": sent,
        "refused_in": refused_in,
        "orphan_reply": sent if orphan else None,
        "new_form": sent if refused_in == "" else CommentForm(),
        "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("approvals/_brief_review.html", takes_context=True)
def brief_review(context: template.Context, brief: Brief) -> dict[str, Any]:
    """Who reviews the brief (and the form to assign it), and every revision's comment threads."""
    may_review = _may_review(context)
    return {
        "brief": brief,
        "assignment": get_open_assignment(brief),
        "approvers": list(list_assignable_approvers()) if may_review else [],
        "group_value": APPROVERS_GROUP,
        "threads": list(list_brief_threads(brief)),
        "may_review": may_review,
        "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("approvals/_publish_when.html")
def publish_when_fields(form: DecisionForm) -> dict[str, Any]:
    """The decision form's "Publish now / at": a date and time and a zone select (the browser's zone is chosen
    by publishing/schedule.js; without script, the site's). A refused form comes back with what was typed."""
    bound = form.is_bound
    return {
        "when": form.data.get("publish_when", NOW) if bound else NOW,
        "publish_at": form.data.get("publish_at", "") if bound else "",
        "zone": form.data.get("zone", "") if bound else "",
        "zones": zone_choices(),
        "default_zone": default_zone(),
        "now_value": NOW,
        "at_value": AT,
    }


def _schedule_block(context: template.Context, schedule: Schedule | None, *, brief: Brief) -> dict[str, Any]:
    return {
        **_status(schedule),
        "brief": brief,
        "may_change": bool(schedule and schedule.may_change and context.get("is_approver")),
        "zones": zone_choices(),
        "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("approvals/_schedule_status.html")
def revision_schedule_status(revision: Revision) -> dict[str, Any]:
    """The live part of revision_schedule, for the revision page's poll."""
    return _status(get_revision_schedule(revision))


@register.inclusion_tag("approvals/_schedule_status.html")
def brief_schedule_status(brief: Brief) -> dict[str, Any]:
    """The live part of brief_schedule, for the brief page's poll."""
    return _status(get_schedule(brief))


def _status(schedule: Schedule | None) -> dict[str, Any]:
    # The countdown counts on the database's clock, not the browser's: schedule.js corrects by the difference.
    server_now = database_now() if schedule is not None and schedule.may_change else None
    return {"schedule": schedule, "server_now": server_now}


@register.inclusion_tag("approvals/_schedule.html", takes_context=True)
def revision_schedule(context: template.Context, revision: Revision) -> dict[str, Any]:
    """Revision N's schedule: T in its zone and in UTC, a countdown, each channel's firing and lateness, and for
    an approver while it waits, reschedule and cancel."""
    return _schedule_block(context, get_revision_schedule(revision), brief=revision.brief)


@register.inclusion_tag("approvals/_schedule.html", takes_context=True)
def brief_schedule(context: template.Context, brief: Brief) -> dict[str, Any]:
    """The brief's newest scheduled revision's schedule, as revision_schedule shows it."""
    return _schedule_block(context, get_schedule(brief), brief=brief)
