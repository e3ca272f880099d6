"""Thin views: parse, call one action or selector, render. Refusals become messages or 403/404."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from approvals.forms import DecisionForm
from publishing.actions.briefs import NewBriefFormReused, check_submit_new_brief_form, check_update_source_material
from publishing.actions.revisions import check_create_revision, check_restore_revision, check_use_suggestion
from publishing.diffs import diff_payloads
from publishing.errors import GalleyError, InvalidInput, PermissionRefused, RevisionConflict
from publishing.forms import BriefFilterForm, BriefForm, RevisionForm, SourceMaterialForm
from publishing.live import Partial, live_partial
from publishing.middleware import check_form_text, checks_own_form_text
from publishing.models import Brief
from publishing.roles import Role, can_view, require_role
from publishing.selectors.briefs import access_brief, list_briefs
from publishing.selectors.drift import get_drift_notice
from publishing.selectors.preview import get_story_preview
from publishing.selectors.publications import list_brief_badges
from publishing.selectors.review import RevisionPage, get_revision_page
from publishing.selectors.revisions import (
    get_latest_revision,
    get_revision,
    get_revision_comparison,
    list_revision_numbers,
)
from publishing.selectors.summaries import get_pipeline_view
from publishing.timeline import get_brief_timeline

BRIEFS_PER_PAGE = 20


def _require_viewer(request: HttpRequest) -> None:
    if not can_view(request.user):
        raise PermissionRefused("You need the Editors, Approvers or Operators role to use Galley.")


@require_http_methods(["GET"])
def dashboard(request: HttpRequest) -> HttpResponse:
    _require_viewer(request)
    return render(request, "publishing/dashboard.html", _dashboard_context(request))


def _dashboard_context(request: HttpRequest) -> dict[str, Any]:
    filters = BriefFilterForm(request.GET or None)
    query, status = "", ""
    if filters.is_valid():
        query, status = filters.cleaned_data["q"], filters.cleaned_data["status"]
    # The selector's aggregate (latest revision number) makes Django drop Meta.ordering, and
    # pages of an unordered list overlap and skip rows: order explicitly, newest first.
    briefs = list_briefs(query=query, status=status)
    page = Paginator(briefs, BRIEFS_PER_PAGE).get_page(request.GET.get("page"))
    # list_briefs annotates each brief of a page with its latest revision number.
    badges = list_brief_badges((brief, getattr(brief, "latest_revision_number", None)) for brief in page)
    rows = [(brief, badges[brief.pk]) for brief in page]
    return {"page": page, "rows": rows, "filters": filters, "live_query": request.GET.urlencode()}


@live_partial("publishing:dashboard")
def dashboard_live(request: HttpRequest) -> Partial:
    """The dashboard's rows (statuses), for the same filters and page. Always live: any brief may
    move on at any moment — a decision, a publish, or an editor's new revision of a published or
    sent-back brief."""
    _require_viewer(request)
    return Partial("publishing/_brief_rows.html", _dashboard_context(request), live=True)


@checks_own_form_text
@require_http_methods(["GET", "POST"])
def brief_new(request: HttpRequest) -> HttpResponse:
    """Create a brief once per rendered form: the same form sent again leads to the brief it created."""
    require_role(request.user, Role.EDITOR, to="create briefs")
    if request.method != "POST":
        return render(request, "publishing/brief_form.html", {"form": BriefForm.blank()})
    try:
        check_form_text(request, BriefForm())
        with transaction.atomic(durable=True):
            brief, created = check_submit_new_brief_form(
                request.POST.get("form_token", ""),
                title=request.POST.get("title", ""),
                source_material=request.POST.get("source_material", ""),
                acting_user=request.user,
            )
    except NewBriefFormReused as exc:
        form = BriefForm.resubmittable(request.POST, new_token=True)
        form.add_error(None, exc.message)
        return render(request, "publishing/brief_form.html", {"form": form}, status=409)
    except GalleyError as exc:
        form = BriefForm.resubmittable(request.POST, new_token=False)
        form.add_error(None, exc.message)
        return render(request, "publishing/brief_form.html", {"form": form}, status=400)
    if created:
        messages.success(request, f"{brief.public_id} created.")
    else:
        messages.info(request, f"{brief.public_id} was already created from this form; nothing new was saved.")
    return redirect(brief)


@require_http_methods(["GET"])
def brief_detail(request: HttpRequest, public_id: str) -> HttpResponse:
    brief = access_brief(public_id, acting_user=request.user)
    context = {**_brief_live_context(request, brief), "drift": get_drift_notice(brief)}
    return render(request, "publishing/brief_detail.html", context)


def _brief_live_context(request: HttpRequest, brief: Brief) -> dict[str, Any]:
    """Every region of the brief page that can change — title, status, source and the editor's
    next step, the revision links, the summary pipeline, the timeline — from one read of the brief,
    so that the page and each poll show one state, never one region ahead of another."""
    latest = get_latest_revision(brief)
    return {
        "brief": brief,
        "latest": latest,
        # Revisions are numbered 1… with no gap (list_revision_numbers): the latest says them all.
        "revision_numbers": list(range(latest.number, 0, -1)) if latest is not None else [],
        "badge": list_brief_badges([(brief, latest.number if latest else None)])[brief.pk],
        "pipeline": get_pipeline_view(brief),
        "timeline": get_brief_timeline(brief, viewer=request.user),
    }


@live_partial("publishing:brief")
def brief_live(request: HttpRequest, public_id: str) -> Partial:
    """Always live: whatever the brief's status, someone may act on it at any moment (a decision, a
    publish, an editor's next revision of a published brief)."""
    brief = access_brief(public_id, acting_user=request.user)
    return Partial("publishing/brief_live.html", _brief_live_context(request, brief), live=True)


@checks_own_form_text
@require_http_methods(["GET", "POST"])
def brief_source_edit(request: HttpRequest, public_id: str) -> HttpResponse:
    """Replace the source material; a new summary run starts and older runs stop."""
    require_role(request.user, Role.EDITOR, to="edit briefs")
    brief = access_brief(public_id, acting_user=request.user)
    form = SourceMaterialForm(request.POST or None, initial={"source_material": brief.source_material})
    if request.method == "POST":
        try:
            check_form_text(request, form)
            with transaction.atomic(durable=True):
                check_update_source_material(
                    public_id, source_material=request.POST.get("source_material", ""), acting_user=request.user
                )
        except GalleyError as exc:
            form.add_error(None, exc.message)
            return render(request, "publishing/source_form.html", {"brief": brief, "form": form}, status=400)
        messages.success(request, "Source material saved; a new summary run has started.")
        return redirect(brief)
    return render(request, "publishing/source_form.html", {"brief": brief, "form": form})


@require_POST
def use_suggestion(request: HttpRequest, public_id: str, run_number: int) -> HttpResponse:
    """One click: what the editor takes of the pipeline's suggestion (its button's `take`: the
    headline as the title, the draft as the body, or both) becomes their next revision."""
    require_role(request.user, Role.EDITOR, to="edit briefs")
    try:
        with transaction.atomic(durable=True):
            revision, created = check_use_suggestion(
                public_id, run_number=run_number, take=request.POST.get("take"), acting_user=request.user
            )
    except GalleyError as exc:
        messages.error(request, exc.message)
        return redirect("publishing:brief", public_id)
    if created:
        messages.success(request, f"The suggestion is revision {revision.number} now.")
    else:
        messages.info(request, f"Revision {revision.number} already holds this text.")
    return redirect(revision)


@require_http_methods(["GET"])
def revision_detail(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    return _render_revision_page(request, public_id, number)


def _render_revision_page(
    request: HttpRequest, public_id: str, number: int, *, restore_error: str = "", status: int = 200
) -> HttpResponse:
    brief = access_brief(public_id, acting_user=request.user)
    revision = get_revision(brief, number)
    page = get_revision_page(brief, revision, viewer=request.user)
    context = {
        **_revision_live_context(page),
        **get_story_preview(revision.payload),
        "decision_form": DecisionForm.for_revision(revision),
        "restore_error": restore_error,
    }
    return render(request, "publishing/revision_detail.html", context, status=status)


def _revision_live_context(page: RevisionPage) -> dict[str, Any]:
    # While it is current, a decision, a publish or a newer revision may come any moment; once a
    # newer one exists, only a publish still under way can change what the page shows.
    live = page.publication_state.in_progress or page.is_current
    return {**page.as_context(), "live": live}


@live_partial("publishing:revision")
def revision_live(request: HttpRequest, public_id: str, number: int) -> Partial:
    """The revision page's status regions. A poll from a page that shows the decision form sends
    the form's revision number: if the form could only be refused now, the answer replaces it with
    a notice (live.js copies the typed comment into it)."""
    brief = access_brief(public_id, acting_user=request.user)
    page = get_revision_page(brief, get_revision(brief, number), viewer=request.user, with_diffs=False)
    context = {**_revision_live_context(page), "shows_decision_form": "revision_number" in request.GET}
    return Partial("publishing/revision_live.html", context, context["live"])


@require_POST
def revision_restore(request: HttpRequest, public_id: str, number: int) -> HttpResponse:
    """Write revision `number`'s content as the next revision, as an edit would: based on the latest
    revision the editor saw, refused (nothing written) when another was saved meanwhile."""
    require_role(request.user, Role.EDITOR, to="restore revisions")
    base_number = request.POST.get("base_number")
    try:
        with transaction.atomic(durable=True):
            revision, created = check_restore_revision(
                public_id, number=number, base_number=base_number, acting_user=request.user
            )
    except RevisionConflict as exc:
        message = exc.message
        if exc.newer is not None and exc.base_number <= exc.newer.number:
            message = (
                f"Revision {exc.newer.number} was saved after revision {exc.base_number}, the latest you saw. "
                f"Nothing was restored: see what revision {exc.newer.number} changed, then restore again "
                "if you still want to."
            )
        return _render_revision_page(request, public_id, number, restore_error=message, status=409)
    except InvalidInput as exc:
        return _render_revision_page(request, public_id, number, restore_error=exc.message, status=400)
    if created:
        messages.success(
            request, f"Revision {number} restored as revision {revision.number}; it needs approval like any other."
        )
    else:
        messages.info(request, f"Nothing new was saved: revision {revision.number} already holds this text.")
    return redirect(revision)


# A revision number as the compare form sends it; PostgreSQL's integer bounds the digits.
_REVISION_NUMBER = re.compile(r"[0-9]{1,9}")


def _revision_number(request: HttpRequest, name: str, label: str) -> int | None:
    raw = request.GET.get(name, "").strip()
    if not raw:
        return None
    if not _REVISION_NUMBER.fullmatch(raw) or int(raw) < 1:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise InvalidInput(f"{label} must be a revision number (1, 2, 3…); “{shown}” is not one.")
    return int(raw)


@require_http_methods(["GET"])
def revision_compare(request: HttpRequest, public_id: str) -> HttpResponse:
    """Any two revisions of a brief, word by word; by default the latest against the one before."""
    brief = access_brief(public_id, acting_user=request.user)
    try:
        comparison = get_revision_comparison(
            brief,
            from_number=_revision_number(request, "from", "From revision"),
            to_number=_revision_number(request, "to", "To revision"),
        )
    except InvalidInput as exc:
        context = {"brief": brief, "numbers": list_revision_numbers(brief), "error": exc.message}
        return render(request, "publishing/revision_compare.html", context, status=400)
    return render(
        request,
        "publishing/revision_compare.html",
        {"brief": brief, "numbers": comparison.numbers, "comparison": comparison},
    )


@checks_own_form_text
@require_http_methods(["GET", "POST"])
def revision_edit(request: HttpRequest, public_id: str) -> HttpResponse:
    """Edit creates the next revision. On a conflict nothing is written: the editor keeps their text
    and sees every field of the newer revision beside it; only the explicit overwrite writes over it."""
    require_role(request.user, Role.EDITOR, to="edit briefs")
    brief = access_brief(public_id, acting_user=request.user)
    if request.method != "POST":
        latest = get_latest_revision(brief)
        initial = {"base_number": 0, "title": brief.title, "body": ""}
        if latest is not None:
            initial = {"base_number": latest.number, "title": latest.title, "body": latest.body}
        form = RevisionForm(initial=initial)
        return render(request, "publishing/revision_form.html", {"brief": brief, "latest": latest, "form": form})

    # The overwrite button names the newest revision the editor has seen in full and chose to
    # replace; any other submission is based on the revision the editor started from.
    base_number = request.POST.get("overwrite_number") or request.POST.get("base_number")
    form = RevisionForm(request.POST)
    try:
        check_form_text(request, form)
        with transaction.atomic(durable=True):
            revision, created = check_create_revision(
                public_id,
                base_number=base_number,
                title=request.POST.get("title", ""),
                body=request.POST.get("body", ""),
                acting_user=request.user,
            )
    except RevisionConflict as exc:
        return _render_conflict(request, brief, exc)
    except GalleyError as exc:
        form.add_error(None, exc.message)
        context = {"brief": brief, "latest": get_latest_revision(brief), "form": form}
        return render(request, "publishing/revision_form.html", context, status=400)
    if created:
        messages.success(request, f"Revision {revision.number} saved.")
    else:
        messages.info(request, f"No changes: revision {revision.number} already holds this text.")
    return redirect(revision)


def _render_conflict(request: HttpRequest, brief: Brief, conflict: RevisionConflict) -> HttpResponse:
    """The edit form again, the editor's text kept and still based on the revision they started
    from, with the newer revision's every field beside it and what changed since that base."""
    newer = conflict.newer
    form = RevisionForm({**request.POST.dict(), "base_number": conflict.base_number})
    form.add_error(None, conflict.message)
    if newer is None or conflict.base_number > newer.number:
        # A base that does not exist is a damaged form, not someone else's edit.
        return render(
            request, "publishing/revision_form.html", {"brief": brief, "latest": newer, "form": form}, status=400
        )
    base = get_revision(brief, conflict.base_number) if conflict.base_number > 0 else None
    # Every field of the payload, the form's first; one the form does not carry would be dropped by
    # an overwrite, so it shows as missing from the editor's version.
    names = ["title", "body", *sorted(set(newer.payload) - {"title", "body"})]
    mine = {name: request.POST.get(name, "") for name in ("title", "body")}
    fields = [
        {
            "label": name.replace("_", " ").capitalize(),
            "theirs": str(newer.payload.get(name, "")),
            "mine": mine.get(name, ""),
            "differs": str(newer.payload.get(name, "")).strip() != mine.get(name, "").strip(),
        }
        for name in names
    ]
    context = {
        "brief": brief,
        "latest": newer,
        "form": form,
        "conflict": {"newer": newer, "fields": fields},
        "conflict_diff": diff_payloads(
            base.payload if base else None,
            newer.payload,
            old_label=f"revision {conflict.base_number} (what you edited)",
            new_label=f"revision {newer.number} (saved meanwhile by {newer.author})",
        ),
    }
    return render(request, "publishing/revision_form.html", context, status=409)
