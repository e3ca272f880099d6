"""A brief's working draft as the edit page shows it, and who else has it open (presence)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from publishing.models import Brief, Draft, EditorPresence
from publishing.roles import AnyUser
from publishing.selectors.revisions import get_latest_revision
from publishing.story import draft_fields

# A page that has sent no heartbeat for this long is closed (or its machine asleep): it is no longer
# shown and holds nothing, so no tab closed without a word leaves a lock behind.
PRESENCE_SECONDS = 60


@dataclass(frozen=True)
class DraftState:
    """The story the edit page starts from: the draft if there is one, else the latest revision.

    `version` is the draft's (0: none saved yet), which the page's saves name.
    """

    story: dict[str, Any]
    base_number: int
    version: int
    updated_by: User | None
    updated_at: datetime.datetime | None
    holder: User | None


@dataclass(frozen=True)
class Presence:
    username: str
    typing: bool
    seconds_ago: int  # since their last keystroke when typing, else since their page's last heartbeat


def get_draft(brief: Brief, *, lock: bool = False) -> Draft | None:
    """The brief's draft; with `lock`, its row is locked until the transaction ends."""
    drafts = Draft.objects.select_related("updated_by", "holder").filter(brief=brief)
    if lock:
        drafts = drafts.select_for_update(of=("self",))
    return drafts.first()


def get_draft_state(brief: Brief) -> DraftState:
    draft = get_draft(brief)
    if draft is not None:
        return DraftState(
            story=draft_fields(draft.story),
            base_number=draft.base_number,
            version=draft.version,
            updated_by=draft.updated_by,
            updated_at=draft.updated_at,
            holder=draft.holder,
        )
    latest = get_latest_revision(brief)
    story = draft_fields(latest.payload if latest is not None else {"title": brief.title})
    return DraftState(
        story=story,
        base_number=latest.number if latest is not None else 0,
        version=0,
        updated_by=None,
        updated_at=None,
        holder=None,
    )


def _fresh_since(now: datetime.datetime) -> datetime.datetime:
    return now - datetime.timedelta(seconds=PRESENCE_SECONDS)


def is_present(brief: Brief, user: User, *, now: datetime.datetime | None = None) -> bool:
    """Whether `user`'s edit page of the brief sent a heartbeat within PRESENCE_SECONDS."""
    since = _fresh_since(now or timezone.now())
    return EditorPresence.objects.filter(brief=brief, user=user, last_seen_at__gte=since).exists()


def get_other_holder(brief: Brief, state: DraftState, *, viewer: AnyUser) -> User | None:
    """The editor other than `viewer` whose saves go through now: the draft's holder, while their
    edit page is open. None when the viewer may save (no holder, the viewer, or the holder gone)."""
    holder = state.holder
    if holder is None or holder.pk == getattr(viewer, "pk", None) or not is_present(brief, holder):
        return None
    return holder


def list_presences(brief: Brief, *, viewer: AnyUser, now: datetime.datetime | None = None) -> list[Presence]:
    """Everyone but `viewer` whose edit page of the brief is open, typists first, then by name."""
    now = now or timezone.now()
    since = _fresh_since(now)
    rows = EditorPresence.objects.filter(brief=brief, last_seen_at__gte=since).select_related("user")
    if isinstance(viewer, User):
        rows = rows.exclude(user=viewer)
    presences = []
    for row in rows:
        typing = row.typing_at is not None and row.typing_at >= since
        seen = row.typing_at if typing and row.typing_at is not None else row.last_seen_at
        presences.append(
            Presence(username=row.user.username, typing=typing, seconds_ago=max(0, int((now - seen).total_seconds())))
        )
    return sorted(presences, key=lambda presence: (not presence.typing, presence.username))
