"""Thin views: parse, call one action or selector, render. Refusals become messages or 403/404."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_http_methods, require_POST

from approvals.forms import AT, NOW, DecisionForm, default_zone, zone_choices
from approvals.schedules import ScheduleRequest, clean_schedule
from approvals.selectors import list_added_channels
from publishing.actions.briefs import (
    NewBriefFormReused,
    check_change_brief_channels,
    check_submit_new_brief_form,
    check_update_source_material,
)
from publishing.actions.drafts import (
    check_record_presence,
    check_save_draft,
    check_submit_draft,
    check_take_over_draft,
)
from publishing.actions.legal import check_flag_legal_review, check_lift_legal_review
from publishing.actions.retractions import check_retract_brief
from publishing.actions.revisions import check_restore_revision, check_use_suggestion
from publishing.diffs import diff_payloads
from publishing.errors import (
    DraftConflict,
    DraftHeld,
    GalleyError,
    InvalidInput,
    NotFound,
    PermissionRefused,
    RevisionConflict,
)
from publishing.forms import BriefFilterForm, BriefForm, RevisionForm, SourceMaterialForm, story_form_fields
from publishing.live import Partial, live_partial
from publishing.middleware import check_form_text, checks_own_form_text
from publishing.models import Brief, Draft
from publishing.roles import Role, can_view, require_role
from publishing.selectors.briefs import access_brief, list_briefs
from publishing.selectors.channels import get_channel_receipts, tally_receipts
from publishing.selectors.corrections import has_publication, list_corrections
from publishing.selectors.drafts import get_draft_state, get_other_holder, list_presences
from publishing.selectors.drift import get_drift_notice
from publishing.selectors.preview import get_story_preview
from publishing.selectors.publications import list_brief_badges
from publishing.selectors.retractions import list_channel_retractions, list_holdings
from publishing.selectors.review import RevisionPage, get_revision_page
from publishing.selectors.revisions import (
    get_latest_revision,
    get_revision,
    get_revision_comparison,
    list_revision_numbers,
)
from publishing.selectors.summaries import get_pipeline_view
from publishing.story import CORRECTION_KEYS, STORY_KEYS, TAGS_LABEL, TEXT_FIELDS
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
    query, status, partly, scheduled = "", "", False, ""
    if filters.is_valid():
        query, status = filters.cleaned_data["q"], filters.cleaned_data["status"]
        partly = filters.cleaned_data["publication"] == "partial"
        scheduled = filters.cleaned_data["schedule"]
    # The selector's aggregate (latest revision number) makes Django drop Meta.ordering, and
    # pages of an unordered list overlap and skip rows: order explicitly, newest first.
    briefs = list_briefs(query=query, status=status, partly_published=partly, schedule=scheduled)
    page = Paginator(briefs, BRIEFS_PER_PAGE).get_page(request.GET.get("page"))
    # list_briefs annotates each brief of a page with its latest revision number.
    badges = list_brief_badges((brief, getattr(brief, "latest_revision_number", None)) for brief in page)
    rows = [(brief, badges[brief.pk]) for brief in page]
    # The pagination links keep every filter.
    kept = request.GET.copy()
    kept.pop("page", None)
    return {
        "page": page,
        "rows": rows,
        "filters": filters,
        "live_query": request.GET.urlencode(),
        "filter_query": f"{kept.urlencode()}&" if kept else "",
    }


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
                channels=BriefForm.chosen(request.POST),
                desk=request.POST.get("desk"),
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
    next step, the revision links, the receipt per channel, the corrections, the summary pipeline, the timeline —
    from one read of the brief, so that the page and each poll show one state, never one region
    ahead of another."""
    latest = get_latest_revision(brief)
    receipts = get_channel_receipts(brief)
    if receipts:
        # A channel added after the approval says who added it (the approval's own set needs no word).
        added = list_added_channels(brief, receipts[0].revision)
        receipts = [
            dataclasses.replace(r, added_by=str(added[r.channel].added_by), added_at=added[r.channel].created_at)
            if r.channel in added
            else r
            for r in receipts
        ]
    return {
        "brief": brief,
        "latest": latest,
        # Revisions are numbered 1… with no gap (list_revision_numbers): the latest says them all.
        "revision_numbers": list(range(latest.number, 0, -1)) if latest is not None else [],
        "badge": list_brief_badges([(brief, latest.number if latest else None)])[brief.pk],
        "receipts": receipts,
        "published_on": tally_receipts(receipts),
        "corrections": list_corrections(brief),
        "pipeline": get_pipeline_view(brief),
        "timeline": get_brief_timeline(brief, viewer=request.user),
        "presences": list_presences(brief, viewer=request.user),
        "retractions": list_channel_retractions(brief),
    }


@live_partial("publishing:brief")
def brief_live(request: HttpRequest, public_id: str) -> Partial:
    """Always live: whatever the brief's status, someone may act on it at any moment (a decision, a
    publish, an editor's next revision of a published brief)."""
    brief = access_brief(public_id, acting_user=request.user)
    return Partial("publishing/brief_live.html", _brief_live_context(request, brief), live=True)


@require_POST
def legal_review_flag(request: HttpRequest, public_id: str) -> HttpResponse:
    """ "Needs legal review" (editors, approvers): the brief's approval then also needs Legal's."""
    return _set_legal_review(
        request,
        public_id,
        check_flag_legal_review,
        done="Flagged as needing legal review: an approval from Legal is required now.",
        already="The brief was already flagged as needing legal review.",
    )


@require_POST
def legal_review_lift(request: HttpRequest, public_id: str) -> HttpResponse:
    """ "Lift legal review" (Legal only)."""
    return _set_legal_review(
        request,
        public_id,
        check_lift_legal_review,
        done="Legal review lifted: Legal's approval is no longer required.",
        already="The brief was not flagged as needing legal review.",
    )


def _set_legal_review(
    request: HttpRequest, public_id: str, check: Callable[..., bool], *, done: str, already: str
) -> HttpResponse:
    """Run the flag's action; back to the brief page with what happened, or why not."""
    try:
        with transaction.atomic(durable=True):
            changed = check(public_id, acting_user=request.user)
    except GalleyError as exc:
        messages.error(request, exc.message)
    else:
        if changed:
            messages.success(request, done)
        else:
            messages.info(request, already)
    return redirect("publishing:brief", public_id)


def _retract_when(when: str, retract_at: str, zone: str) -> ScheduleRequest | None:
    """The retract form's "now / at" as the action takes it; raises InvalidInput as an approval's time does."""
    if when not in (NOW, AT):
        raise InvalidInput("The form's retract choice is neither now nor at; reload the page.")
    if when == NOW:
        return None
    if not retract_at.strip():
        # "Retract at" with no time never falls back to now: the time was the point.
        raise InvalidInput("Choose the date and time to retract at, or choose Retract now.")
    return clean_schedule(retract_at, zone)


@require_http_methods(["GET", "POST"])
def brief_retract(request: HttpRequest, public_id: str) -> HttpResponse:
    """Retract (approvers), the second step of two: the page lists each channel and the revision it
    holds and asks for the reason, when (now, or at a date, time and zone: the approve form's fields,
    read by approvals.schedules.clean_schedule) and a confirmation; the POST takes the brief down on
    every one of them (docs/retractions.md). A refusal redraws the page with what was typed and why."""
    require_role(request.user, Role.APPROVER, to="retract a brief")
    brief = access_brief(public_id, acting_user=request.user)
    reason, error = "", ""
    when, retract_at, zone = NOW, "", ""
    if request.method == "POST":
        reason = request.POST.get("reason", "")
        when = request.POST.get("publish_when", NOW)
        retract_at, zone = request.POST.get("publish_at", ""), request.POST.get("zone", "")
        try:
            at = _retract_when(when, retract_at, zone)
            with transaction.atomic(durable=True):
                enqueued = check_retract_brief(
                    public_id,
                    reason=reason,
                    confirm=request.POST.get("confirm") == "yes",
                    acting_user=request.user,
                    retract_at=at.at if at is not None else None,
                    zone=at.zone if at is not None else "",
                )
        except GalleyError as exc:
            error = exc.message
        else:
            done = f"at {at.local():%Y-%m-%d %H:%M} {at.zone}" if at is not None and not at.passed else "now"
            messages.success(
                request,
                f"{public_id} is being taken down {done} on {len(enqueued)} channel(s); each shows “Retracted” "
                "once it is read back as retracted there.",
            )
            return redirect(brief)
    context = {
        "brief": brief,
        "holdings": list_holdings(brief),
        "reason": reason,
        "error": error,
        # The approve form's "Publish now / at" partial (approvals/_publish_when.html), in a retraction's words.
        "when": when,
        "publish_at": retract_at,
        "zone": zone,
        "zones": zone_choices(),
        "default_zone": default_zone(),
        "now_value": NOW,
        "at_value": AT,
        "now_label": "Retract now",
        "at_label": "Retract at",
        "note": "Every channel listed takes the article down at that time (the database's clock), not before.",
    }
    return render(request, "publishing/brief_retract.html", context, status=400 if error else 200)


@checks_own_form_text
@require_http_methods(["GET", "POST"])
def brief_source_edit(request: HttpRequest, public_id: str) -> HttpResponse:
    """Replace the source material; a new summary run starts and older runs stop."""
    require_role(request.user, Role.EDITOR, to="edit briefs")
    brief = access_brief(public_id, acting_user=request.user)
    current = {"source_material": brief.source_material, "channels": [channel.slug for channel in brief.channels.all()]}
    form = SourceMaterialForm(request.POST or None, initial=current)
    if request.method == "POST":
        try:
            check_form_text(request, form)
            with transaction.atomic(durable=True):
                check_update_source_material(
                    public_id, source_material=request.POST.get("source_material", ""), acting_user=request.user
                )
                chosen = SourceMaterialForm.chosen(request.POST)
                if chosen is not None:
                    check_change_brief_channels(public_id, channels=chosen, acting_user=request.user)
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
    # newer one exists, only a publish still under way (on any channel) can change what the page shows.
    live = page.publication_state.in_progress or page.is_current or any(r.in_progress for r in page.receipts)
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


def _posted_story(request: HttpRequest) -> dict[str, str]:
    """The story as the edit form sent it; a correction mark sent for a brief nothing holds (the form
    offers none) is refused by the actions."""
    return {name: request.POST.get(name, "") for name in (*STORY_KEYS, *CORRECTION_KEYS)}


def _edit_context(brief: Brief, form: RevisionForm, request: HttpRequest, **extra: Any) -> dict[str, Any]:
    latest = get_latest_revision(brief)
    state = get_draft_state(brief)
    return {
        "brief": brief,
        "latest": latest,
        "form": form,
        "draft": state,
        # A revision written by another way (the API, a restore, a suggestion) since the draft began.
        "draft_behind": latest is not None and state.base_number < latest.number,
        "presences": list_presences(brief, viewer=request.user),
        "held_by": get_other_holder(brief, state, viewer=request.user),
        # The draft as last saved (the latest revision before any), however unfinished: draft.js
        # replaces it with draft_save's rendering after each autosave.
        "preview": get_story_preview(state.story),
        **extra,
    }


@checks_own_form_text
@require_http_methods(["GET", "POST"])
def revision_edit(request: HttpRequest, public_id: str) -> HttpResponse:
    """Edit the brief's working draft; "Submit for review" makes it the next revision.

    The page's script autosaves the draft (draft_save); without it, "Save draft" does. On a
    revision conflict nothing is written: the editor keeps their text and sees every field of the
    newer revision beside it; only the explicit overwrite writes over it. A draft saved meanwhile
    elsewhere is shown beside the editor's text; only "keep mine" saves over it."""
    require_role(request.user, Role.EDITOR, to="edit briefs")
    brief = access_brief(public_id, acting_user=request.user)
    if request.method != "POST":
        state = get_draft_state(brief)
        form = RevisionForm(
            initial=RevisionForm.initial_from(state.story, base_number=state.base_number, draft_version=state.version),
            offers_correction=has_publication(brief),
        )
        return render(request, "publishing/revision_form.html", _edit_context(brief, form, request))

    # The overwrite button names the newest revision the editor has seen in full and chose to
    # replace; any other submission is based on the revision the editor started from.
    submitting = request.POST.get("action") == "submit" or "overwrite_number" in request.POST
    base_number = request.POST.get("overwrite_number") or request.POST.get("base_number")
    form = RevisionForm(request.POST, offers_correction=has_publication(brief))
    try:
        check_form_text(request, form)
        with transaction.atomic(durable=True):
            if submitting:
                revision, created = check_submit_draft(
                    public_id,
                    version=request.POST.get("draft_version") or 0,
                    base_number=base_number,
                    story=_posted_story(request),
                    acting_user=request.user,
                )
            else:
                check_save_draft(
                    public_id,
                    version=request.POST.get("draft_version") or 0,
                    base_number=base_number,
                    story=_posted_story(request),
                    acting_user=request.user,
                )
    except RevisionConflict as exc:
        return _render_conflict(request, brief, exc)
    except DraftConflict as exc:
        return _render_draft_conflict(request, brief, exc)
    except GalleyError as exc:
        form.add_error(None, exc.message)
        return render(request, "publishing/revision_form.html", _edit_context(brief, form, request), status=400)
    if not submitting:
        messages.success(request, "Draft saved. It is not a revision yet: submit it for review when it is ready.")
        return redirect("publishing:revision_edit", public_id)
    if created:
        messages.success(request, f"Revision {revision.number} submitted for review.")
    else:
        messages.info(request, f"No changes: revision {revision.number} already holds this text.")
    return redirect(revision)


def _render_draft_conflict(request: HttpRequest, brief: Brief, conflict: DraftConflict) -> HttpResponse:
    """The edit form again with the editor's text, the draft saved meanwhile beside it; the form now
    names that draft's version, so saving it again is the explicit "keep mine"."""
    theirs = story_form_fields(conflict.draft.story)
    form = RevisionForm(
        {**request.POST.dict(), "draft_version": conflict.draft.version}, offers_correction=has_publication(brief)
    )
    form.add_error(None, conflict.message)
    fields = _side_by_side(theirs, _posted_story(request))
    draft_conflict = {
        "draft": conflict.draft,
        "theirs": f"Draft saved meanwhile by {conflict.draft.updated_by}",
        "fields": fields,
    }
    context = _edit_context(brief, form, request, draft_conflict=draft_conflict)
    return render(request, "publishing/revision_form.html", context, status=409)


_STORY_LABELS = {**{field.name: field.label for field in TEXT_FIELDS}, "tags": TAGS_LABEL}


def _side_by_side(theirs: dict[str, str], mine: dict[str, str]) -> list[dict[str, Any]]:
    """Every field of the story, theirs beside the editor's, for a conflict page."""
    return [
        {
            "name": name,
            "label": label,
            "theirs": theirs[name],
            "mine": mine[name],
            "differs": theirs[name].strip() != mine[name].strip(),
        }
        for name, label in _STORY_LABELS.items()
    ]


def _refusal_json(exc: GalleyError) -> JsonResponse:
    """An action's refusal as the edit page's script reads it: the message, the status the middleware
    would give the page (403, 404), else 400."""
    status = 403 if isinstance(exc, PermissionRefused) else 404 if isinstance(exc, NotFound) else 400
    return JsonResponse({"message": exc.message}, status=status)


def _draft_json(draft: Draft) -> dict[str, Any]:
    """The draft as the edit page's script uses it; `preview` is the page's preview partial rendered
    from it, so the page never renders Markdown itself."""
    return {
        "version": draft.version,
        "base_number": draft.base_number,
        "updated_by": str(draft.updated_by),
        "updated_at": draft.updated_at.isoformat(),
        "story": story_form_fields(draft.story),
        "preview": render_to_string("publishing/_story_preview.html", get_story_preview(draft.story)),
    }


@checks_own_form_text
@require_POST
def draft_save(request: HttpRequest, public_id: str) -> JsonResponse:
    """The edit page's autosave (publishing/static/publishing/draft.js): 200 with the draft's new
    version and its preview; 409 with the draft saved meanwhile (`theirs`); 423 while another editor holds it;
    400 with the message for text that cannot be saved. Never a revision, never a notification."""
    try:
        check_form_text(request, RevisionForm(offers_correction=True))
        with transaction.atomic(durable=True):
            draft = check_save_draft(
                public_id,
                version=request.POST.get("draft_version"),
                base_number=request.POST.get("base_number"),
                story=_posted_story(request),
                acting_user=request.user,
            )
    except DraftConflict as exc:
        return JsonResponse({"message": exc.message, "theirs": _draft_json(exc.draft)}, status=409)
    except DraftHeld as exc:
        return JsonResponse({"message": exc.message, "holder": str(exc.holder)}, status=423)
    except GalleyError as exc:
        return _refusal_json(exc)
    return JsonResponse({"saved": _draft_json(draft)})


@require_POST
def draft_presence(request: HttpRequest, public_id: str) -> JsonResponse:
    """The edit page's heartbeat (`typing=1` while the editor types, `leaving=1` as the page goes):
    records their presence and answers who else is there and who holds the draft, as the page shows it."""
    try:
        with transaction.atomic(durable=True):
            check_record_presence(
                public_id,
                typing=request.POST.get("typing") == "1",
                leaving=request.POST.get("leaving") == "1",
                acting_user=request.user,
            )
    except GalleyError as exc:
        return _refusal_json(exc)
    brief = access_brief(public_id, acting_user=request.user)
    state = get_draft_state(brief)
    presences = list_presences(brief, viewer=request.user)
    return JsonResponse(
        {
            "held_by": str(held_by) if (held_by := get_other_holder(brief, state, viewer=request.user)) else "",
            "html": render_to_string("publishing/_presence.html", {"presences": presences}, request=request),
        }
    )


@require_POST
def draft_take_over(request: HttpRequest, public_id: str) -> HttpResponse:
    """ "Take over editing": the acting editor's saves go through, the other editor's page stops
    saving. Answers JSON to the page's script, else back to the edit page."""
    with transaction.atomic(durable=True):
        draft = check_take_over_draft(public_id, acting_user=request.user)
    if request.headers.get("Accept") == "application/json":
        return JsonResponse(_draft_json(draft))
    messages.success(request, "You took over editing: your saves go through now.")
    return redirect("publishing:revision_edit", public_id)


def _render_conflict(request: HttpRequest, brief: Brief, conflict: RevisionConflict) -> HttpResponse:
    """The edit form again, the editor's text kept and still based on the revision they started
    from, with the newer revision's every field beside it and what changed since that base."""
    newer = conflict.newer
    # The draft is as it was (a refused submission writes nothing); the form names its version, so
    # the overwrite is refused only if the draft moves on again.
    draft_version = get_draft_state(brief).version
    form = RevisionForm(
        {**request.POST.dict(), "base_number": conflict.base_number, "draft_version": draft_version},
        offers_correction=has_publication(brief),
    )
    form.add_error(None, conflict.message)
    if newer is None or conflict.base_number > newer.number:
        # A base that does not exist is a damaged form, not someone else's edit.
        return render(request, "publishing/revision_form.html", _edit_context(brief, form, request), status=400)
    base = get_revision(brief, conflict.base_number) if conflict.base_number > 0 else None
    # Every field of the story beside the editor's: the form carries them all, so an overwrite
    # writes each as it is shown here.
    theirs = story_form_fields(newer.payload)
    fields = _side_by_side(theirs, _posted_story(request))
    context = {
        **_edit_context(brief, form, request),
        "latest": newer,
        "conflict": {
            "newer": newer,
            "theirs": f"Revision {newer.number} (saved meanwhile by {newer.author})",
            "fields": fields,
        },
        "conflict_diff": diff_payloads(
            base.payload if base else None,
            newer.payload,
            old_label=f"revision {conflict.base_number} (what you edited)",
            new_label=f"revision {newer.number} (saved meanwhile by {newer.author})",
        ),
    }
    return render(request, "publishing/revision_form.html", context, status=409)
