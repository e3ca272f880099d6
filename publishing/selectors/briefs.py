"""Briefs: the permission-checked fetch (with an optional row lock) and the paged, searched list."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import overload

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Upper

from publishing.errors import NotFound, PermissionRefused
from publishing.models import Brief, Revision, current_headline
from publishing.roles import AnyUser, can_view
from publishing.selectors.channels import only_partly_published, with_publication_counts
from publishing.selectors.overdue import overdue_schedules, unfired_schedules

# The dashboard's schedule filter: the briefs with a publish of each kind (publishing.selectors.overdue).
SCHEDULE_FILTERS = {"scheduled": unfired_schedules, "overdue": overdue_schedules}


def access_brief(public_id: str, *, acting_user: AnyUser, lock: bool = False) -> Brief:
    """The brief, if the user may see it; with `lock`, its row is locked until the transaction ends."""
    if not can_view(acting_user):
        raise PermissionRefused("You need the Editors, Approvers or Operators role to see briefs.")
    # Its desk comes along: every decision and the revision page read its approval policy.
    briefs = Brief.objects.select_related("author", "desk").annotate(headline=current_headline())
    if lock:
        briefs = briefs.select_for_update(of=("self",))
    try:
        return briefs.get(public_id=public_id)
    except Brief.DoesNotExist:
        raise NotFound(f"There is no brief {public_id}.") from None


# Newest first; the id breaks ties, so pages never overlap or skip a row. Migration 0009's
# indexes hold this order, alone and after the status.
BRIEF_LIST_ORDER = ("-created_at", "-id")


class BriefList:
    """Briefs as Paginator takes them: len() counts them, a slice reads one page of them.

    A slice is one query in two steps: first the page's ids, read from an index alone (the
    order, the status filter and the searched columns are all in it, so each row OFFSET skips
    costs an index entry, not a table row, a join and a subquery); then only those rows, with
    their author, their latest revision number and their current headline (probes into the
    (brief, number) unique index), and on how many of its channels each is published
    (publishing.selectors.channels.with_publication_counts). A plain queryset computes all of that
    for every row it skips.
    """

    def __init__(self, briefs: QuerySet[Brief]) -> None:
        self.briefs = briefs  # filtered and in BRIEF_LIST_ORDER; only its count and ids are read

    def __len__(self) -> int:
        return self.briefs.count()

    def __iter__(self) -> Iterator[Brief]:
        return iter(self[:])

    @overload
    def __getitem__(self, index: int) -> Brief: ...
    @overload
    def __getitem__(self, index: slice) -> list[Brief]: ...
    def __getitem__(self, index: int | slice) -> Brief | list[Brief]:
        if isinstance(index, int):
            return self[index : index + 1][0]
        latest = Revision.objects.filter(brief=OuterRef("pk")).order_by("-number").values("number")[:1]
        page = (
            with_publication_counts(Brief.objects.filter(pk__in=self.briefs.values_list("pk", flat=True)[index]))
            .select_related("author")
            .annotate(latest_revision_number=Subquery(latest))
            .annotate(headline=current_headline())
            .order_by(*BRIEF_LIST_ORDER)
        )
        return list(page)


def list_briefs(*, query: str = "", status: str = "", partly_published: bool = False, schedule: str = "") -> BriefList:
    """Briefs newest first whose current headline or creation title contains `query`, or whose
    public id is `query`, in `status`; with `partly_published`, only those published on some of
    their channels but not all; with `schedule` "scheduled", only those with a schedule not yet fired,
    "overdue", only those with an overdue schedule (SCHEDULE_FILTERS)."""
    briefs = Brief.objects.order_by(*BRIEF_LIST_ORDER)
    if query:
        # Public ids are lowercase (constraint brief_public_id_form): matching the lowered query
        # is iexact without an UPPER() of every row's id.
        # The creation title is matched as icontains does (UPPER on both sides), against the stored
        # upper-cased title, so no row's title is folded again; the current headline, from the
        # latest revision, costs a probe of the (brief, number) index for each brief searched.
        needle = Upper(Value(query))
        briefs = briefs.annotate(headline_search=Upper(current_headline())).filter(
            Q(title_search__contains=needle) | Q(headline_search__contains=needle) | Q(public_id=query.strip().lower())
        )
    if status:
        briefs = briefs.filter(status=status)
    if partly_published:
        # Partial publication needs a publish operation and a verified publication: the subqueries
        # run per brief that passed the other filters, each an index probe.
        briefs = only_partly_published(briefs)
    if schedule:
        # A semi-join per brief that passed the other filters, on the subject index of the operations.
        briefs = briefs.filter(Exists(SCHEDULE_FILTERS[schedule]().filter(subject_id=OuterRef("public_id"))))
    return BriefList(briefs)


def list_headlines(public_ids: Iterable[str]) -> dict[str, str]:
    """The current headline of each of these briefs, by public id (one query; none for no ids)."""
    wanted = sorted(set(public_ids))
    if not wanted:
        return {}
    briefs = Brief.objects.filter(public_id__in=wanted).annotate(headline=current_headline())
    return dict(briefs.values_list("public_id", "headline"))
