"""Operator endpoints: operations, dead letters and conflicts, and the admin's actions on them.

Publish and verify operations are settled through publishing.actions.resolutions (the same
checks as the admin's Publication problems); other operations (summary steps) through the
machinery's operator actions, as the admin's operation list does. Every action is audited and
idempotent: a repeat answers `changed: false` and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from ninja import Field, Path, Query, Router, Schema

from publishing.actions.resolutions import (
    NOTE_MAX_CHARS,
    Outcome,
    check_adopt_target_revision,
    check_cancel_publication,
    check_publish_as_next_revision,
    check_retry_publication,
)
from publishing.api.common import (
    PROBLEMS,
    TEXT,
    WRITE_PROBLEMS,
    BodyIn,
    idempotency_key_header,
    idempotent_post,
)
from publishing.errors import InvalidInput, NotFound
from publishing.identities import PUBLICATION_KINDS
from publishing.roles import Role, require_role
from publishing.validation import MAX_DB_INT, clean_text
from workers.actions.operator import do_cancel_operation, do_resolve_conflict, do_retry_operation_now
from workers.models import Conflict, Operation, OperationStatus

router = Router(tags=["operators"])

MAX_PAGE = 100
RowId = Annotated[int, Path(ge=1, le=2**63 - 1)]


class OperationOut(Schema):
    id: int
    key: str
    kind: str
    subject_type: str
    subject_id: str
    status: OperationStatus
    attempts: int
    waits: int
    max_attempts: int
    next_attempt_at: datetime
    deadline: datetime
    last_error_kind: str
    last_error_message: str
    needs_operator: bool
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class OperationPage(Schema):
    items: list[OperationOut]
    next_cursor: int | None = Field(description="Pass as `before` for the next page; null on the last page.")


class OperationFilters(Schema):
    status: OperationStatus | None = None
    kind: str | None = Field(None, max_length=64, pattern=r"^[a-z0-9_.]*$")
    before: int | None = Field(None, ge=1, le=MAX_DB_INT, description="Only operations with a smaller id.")
    limit: int = Field(50, ge=1, le=MAX_PAGE)


class ConflictOut(Schema):
    id: int
    operation_id: int
    operation_key: str
    kind: str
    source: str
    existing_payload_hash: str
    conflicting_payload_hash: str
    target_state: dict[str, Any] | None
    detail: str
    created_at: datetime
    resolved_at: datetime | None
    resolution: str


class ConflictPage(Schema):
    items: list[ConflictOut]
    next_cursor: int | None = Field(description="Pass as `before` for the next page; null on the last page.")


class ConflictFilters(Schema):
    resolved: bool = False
    before: int | None = Field(None, ge=1, le=MAX_DB_INT, description="Only conflicts with a smaller id.")
    limit: int = Field(50, ge=1, le=MAX_PAGE)


class CancelIn(BodyIn):
    reason: str = Field(
        description="Why; the editors see it on the brief.", min_length=1, max_length=NOTE_MAX_CHARS, pattern=TEXT
    )


class ResolveIn(BodyIn):
    resolution: str = Field(min_length=1, max_length=NOTE_MAX_CHARS, pattern=TEXT)


class OutcomeOut(Schema):
    changed: bool
    message: str
    operation: OperationOut | None = None


def _operator(request: HttpRequest) -> User:
    return require_role(request.auth, Role.OPERATOR, to="see and settle operations")  # type: ignore[attr-defined]


def operation_out(operation: Operation) -> OperationOut:
    return OperationOut.model_validate(operation, from_attributes=True)


def _page(operations: QuerySet[Operation], filters: OperationFilters) -> OperationPage:
    if filters.status:
        operations = operations.filter(status=filters.status)
    if filters.kind:
        operations = operations.filter(kind=filters.kind)
    page, next_cursor = _newest_first(operations, before=filters.before, limit=filters.limit)
    return OperationPage(items=[operation_out(row) for row in page], next_cursor=next_cursor)


Row = TypeVar("Row", Operation, Conflict)


def _newest_first(rows: QuerySet[Row], *, before: int | None, limit: int) -> tuple[list[Row], int | None]:
    """One page of `rows` by descending id below `before`, and the `before` of the next page (None on
    the last): the id order is the insertion order, so pages never overlap or skip while rows are added."""
    if before:
        rows = rows.filter(id__lt=before)
    fetched = list(rows.order_by("-id")[: limit + 1])
    page = fetched[:limit]
    return page, page[-1].id if len(fetched) > limit else None


@router.get("/operations", response={200: OperationPage, **PROBLEMS}, summary="List operations")
def list_operations(request: HttpRequest, filters: Query[OperationFilters]) -> OperationPage:
    """Every operation, newest first (Operators), by status and kind."""
    _operator(request)
    return _page(Operation.objects.all(), filters)


@router.get("/dead-letters", response={200: OperationPage, **PROBLEMS}, summary="List dead letters")
def list_dead_letters(request: HttpRequest, filters: Query[OperationFilters]) -> OperationPage:
    """Operations whose attempts or deadline ran out, or that the target refused (Operators)."""
    _operator(request)
    return _page(Operation.objects.filter(status=OperationStatus.DEAD), filters)


@router.get("/operations/{operation_id}", response={200: OperationOut, **PROBLEMS}, summary="Get an operation")
def get_operation(request: HttpRequest, operation_id: RowId) -> OperationOut:
    _operator(request)
    return operation_out(_get_operation(operation_id))


@router.get("/conflicts", response={200: ConflictPage, **PROBLEMS}, summary="List conflicts")
def list_conflicts(request: HttpRequest, filters: Query[ConflictFilters]) -> ConflictPage:
    """Open conflicts (or, with `resolved=true`, resolved ones), newest first (Operators), a page at a
    time like the operations."""
    _operator(request)
    conflicts = Conflict.objects.select_related("operation").filter(resolved_at__isnull=not filters.resolved)
    page, next_cursor = _newest_first(conflicts, before=filters.before, limit=filters.limit)
    return ConflictPage(items=[_conflict_out(conflict) for conflict in page], next_cursor=next_cursor)


def _conflict_out(conflict: Conflict) -> ConflictOut:
    return ConflictOut(
        id=conflict.id,
        operation_id=conflict.operation_id,
        operation_key=conflict.operation.key,
        kind=conflict.kind,
        source=conflict.source,
        existing_payload_hash=conflict.existing_payload_hash,
        conflicting_payload_hash=conflict.conflicting_payload_hash,
        target_state=conflict.target_state,
        detail=conflict.detail,
        created_at=conflict.created_at,
        resolved_at=conflict.resolved_at,
        resolution=conflict.resolution,
    )


def _get_operation(operation_id: int) -> Operation:
    operation = Operation.objects.filter(id=operation_id).first()
    if operation is None:
        raise NotFound(f"There is no operation {operation_id}.")
    return operation


def _is_publication(operation: Operation) -> bool:
    return operation.kind in PUBLICATION_KINDS


def _outcome(operation_id: int, outcome: Outcome) -> tuple[int, OutcomeOut]:
    operation = Operation.objects.get(id=operation_id)
    return 200, OutcomeOut(changed=outcome.changed, message=outcome.message, operation=operation_out(operation))


def _machinery_outcome(operation: Operation, changed: bool, done: str) -> Outcome:
    if changed:
        return Outcome(True, done)
    return Outcome(False, f"Nothing to do: {operation.key} is {operation.get_status_display().lower()} now.")


@router.post("/operations/{operation_id}/retry", response={200: OutcomeOut, **WRITE_PROBLEMS}, summary="Retry now")
def retry_operation(
    request: HttpRequest, operation_id: RowId, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Run a dead, conflicted or waiting operation again now, after a fix (Operators)."""
    return idempotent_post(request, idempotency_key, _rerun(operation_id, look_up=False))


@router.post(
    "/operations/{operation_id}/look-up",
    response={200: OutcomeOut, **WRITE_PROBLEMS},
    summary="Reconcile with the target",
)
def look_up_operation(
    request: HttpRequest, operation_id: RowId, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """The next attempt looks the key up at the target and adopts what it holds, before sending anything."""
    return idempotent_post(request, idempotency_key, _rerun(operation_id, look_up=True))


def _rerun(operation_id: int, *, look_up: bool) -> Callable[[User], tuple[int, OutcomeOut]]:
    """The write of retry (look_up False) and look-up: a publication's operation through the
    publication's checks (approval, newer revision), any other through the machinery."""

    def write(user: User) -> tuple[int, OutcomeOut]:
        user = require_role(user, Role.OPERATOR, to="settle operations")
        operation = _get_operation(operation_id)
        if _is_publication(operation):
            return _outcome(operation_id, check_retry_publication(operation, acting_user=user, look_up=look_up))
        changed = do_retry_operation_now(operation, acting_user=user, reconcile=look_up)
        done = f"Reconciling {operation.key} now." if look_up else f"Running {operation.key} again now."
        return _outcome(operation_id, _machinery_outcome(operation, changed, done))

    return write


@router.post(
    "/operations/{operation_id}/adopt",
    response={200: OutcomeOut, **WRITE_PROBLEMS},
    summary="Adopt what the target holds",
)
def adopt_operation(
    request: HttpRequest, operation_id: RowId, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Adopt the approved revision the target holds (publish and verify operations only)."""
    return idempotent_post(
        request,
        idempotency_key,
        _settle_publication(operation_id, check_adopt_target_revision, nothing="nothing to adopt"),
    )


@router.post(
    "/operations/{operation_id}/publish-as-next-revision",
    response={200: OutcomeOut, **WRITE_PROBLEMS},
    summary="Publish as the next revision",
)
def publish_as_next_revision_operation(
    request: HttpRequest, operation_id: RowId, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """A stale revision: write the refused revision's approved content again as the brief's next revision
    (above the one the target holds), which needs its own approval, and cancel this publish for it."""
    return idempotent_post(
        request,
        idempotency_key,
        _settle_publication(operation_id, check_publish_as_next_revision, nothing="nothing to publish again"),
    )


def _settle_publication(
    operation_id: int, action: Callable[..., Outcome], *, nothing: str
) -> Callable[[User], tuple[int, OutcomeOut]]:
    """The write of an action only a publication's operation has (adopt, publish as the next revision)."""

    def write(user: User) -> tuple[int, OutcomeOut]:
        user = require_role(user, Role.OPERATOR, to="settle operations")
        operation = _get_operation(operation_id)
        if not _is_publication(operation):
            raise InvalidInput(f"{operation.key} is not a publication's operation: there is {nothing}.")
        return _outcome(operation_id, action(operation, acting_user=user))

    return write


@router.post(
    "/operations/{operation_id}/cancel", response={200: OutcomeOut, **WRITE_PROBLEMS}, summary="Cancel with a reason"
)
def cancel_operation(
    request: HttpRequest, operation_id: RowId, data: CancelIn, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    def write(user: User) -> tuple[int, OutcomeOut]:
        user = require_role(user, Role.OPERATOR, to="settle operations")
        operation = _get_operation(operation_id)
        if _is_publication(operation):
            return _outcome(operation_id, check_cancel_publication(operation, reason=data.reason, acting_user=user))
        reason = clean_text(data.reason, field="The reason", max_chars=NOTE_MAX_CHARS, required=True)
        changed = do_cancel_operation(operation, reason=f"cancelled by an operator: {reason}", acting_user=user)
        return _outcome(operation_id, _machinery_outcome(operation, changed, f"Cancelled {operation.key}."))

    return idempotent_post(request, idempotency_key, write)


@router.post("/conflicts/{conflict_id}/resolve", response={200: OutcomeOut, **WRITE_PROBLEMS}, summary="Mark resolved")
def resolve_conflict(
    request: HttpRequest, conflict_id: RowId, data: ResolveIn, idempotency_key: str = idempotency_key_header()
) -> HttpResponse:
    """Mark a conflict resolved, with the resolution (Operators)."""

    def write(user: User) -> tuple[int, OutcomeOut]:
        user = require_role(user, Role.OPERATOR, to="settle operations")
        resolution = clean_text(data.resolution, field="The resolution", max_chars=NOTE_MAX_CHARS, required=True)
        conflict = Conflict.objects.filter(id=conflict_id).first()
        if conflict is None:
            raise NotFound(f"There is no conflict {conflict_id}.")
        changed = do_resolve_conflict(conflict, resolution=resolution, acting_user=user)
        message = "Marked resolved." if changed else "Nothing to do: the conflict was already resolved."
        return 200, OutcomeOut(changed=changed, message=message)

    return idempotent_post(request, idempotency_key, write)
