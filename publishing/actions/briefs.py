"""Briefs: creating one and replacing its source material; each starts a summary run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from psycopg.rows import dict_row

from publishing.actions.desks import clean_desk
from publishing.actions.summaries import do_start_summary_run
from publishing.errors import GalleyError, InvalidInput
from publishing.hashing import source_hash
from publishing.identities import brief_public_id
from publishing.models import Brief, Channel, Desk
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.briefs import access_brief
from publishing.selectors.channel_sets import list_default_channels, list_enabled_channels
from publishing.selectors.desks import get_default_desk
from publishing.sql import NEXT_BRIEF_NUMBER_SQL
from publishing.story import TITLE_MAX_CHARS
from publishing.validation import clean_text
from workers.audit import record_audit_event
from workers.prepared import execute_prepared, the_row


class NewBriefFormReused(GalleyError):
    """The new-brief form with this token already created `brief`, from other text; nothing was written."""

    def __init__(self, brief: Brief) -> None:
        super().__init__(
            f"This form already created {brief.public_id} (“{brief.title}”), from other text. Nothing new was "
            "saved: your text is kept below; send it again to create another brief with it."
        )
        self.brief = brief


def check_create_brief(
    *, title: Any, source_material: Any, channels: Any = None, desk: Any = None, acting_user: AnyUser
) -> Brief:
    """Create a brief; every call creates one (the new-brief form goes through check_submit_new_brief_form).
    `channels`: slugs of enabled channels, None for the default ones; `desk`: a desk's slug, None for
    the default desk."""
    acting_user = require_role(acting_user, Role.EDITOR, to="create briefs")
    title, source_material = _clean_brief_text(title, source_material)
    brief, _created = do_create_brief(
        title=title,
        source_material=source_material,
        channels=clean_channels(channels),
        desk=clean_desk(desk),
        acting_user=acting_user,
    )
    return brief


def check_submit_new_brief_form(
    form_token: Any,
    *,
    title: Any,
    source_material: Any,
    channels: Any = None,
    desk: Any = None,
    acting_user: AnyUser,
) -> tuple[Brief, bool]:
    """Create the brief a new-brief form asks for, once per form: returns (brief, created).

    `form_token` is the one-time token the form was rendered with. The same form sent again (a
    double click, a retried request, five at once) returns the brief the first one created. An
    empty token creates a brief every time: only a script leaves it out, and scripts have the JSON
    API's Idempotency-Key. Raises InvalidInput (nothing written) for a token that is not one, and
    NewBriefFormReused when the token already created a brief from other text. `channels`: slugs of
    enabled channels, None for the default ones; `desk`: a desk's slug, None for the default desk.
    """
    acting_user = require_role(acting_user, Role.EDITOR, to="create briefs")
    token = parse_form_token(form_token)
    title, source_material = _clean_brief_text(title, source_material)
    brief, created = do_create_brief(
        title=title,
        source_material=source_material,
        channels=clean_channels(channels),
        desk=clean_desk(desk),
        acting_user=acting_user,
        form_token=token,
    )
    if not created and (brief.title, brief.source_material) != (title, source_material):
        raise NewBriefFormReused(brief)
    return brief, created


def parse_form_token(value: Any) -> UUID | None:
    """The form's token as a UUID, None when it is empty; InvalidInput when it is anything else."""
    if value is None or value == "":
        return None
    try:
        return UUID(str(value))
    except ValueError:
        raise InvalidInput(
            "This form's one-time token is damaged, so it could not be sent safely; send it again."
        ) from None


def clean_channels(slugs: Any) -> list[Channel] | None:
    """The enabled channels named by `slugs`, None for None (the default channels); InvalidInput for
    none at all, or for a slug that is no enabled channel."""
    if slugs is None:
        return None
    if isinstance(slugs, str) or not isinstance(slugs, Sequence) or not all(isinstance(s, str) for s in slugs):
        raise InvalidInput("Channels: a list of channel slugs.")
    if not slugs:
        raise InvalidInput("Choose at least one channel to publish the brief to.")
    enabled = {channel.slug: channel for channel in list_enabled_channels()}
    unknown = sorted(set(slugs) - set(enabled))
    if unknown:
        raise InvalidInput(f"No enabled channel is called {', '.join(unknown)}; choose among {', '.join(enabled)}.")
    return [enabled[slug] for slug in enabled if slug in slugs]


def _clean_brief_text(title: Any, source_material: Any) -> tuple[str, str]:
    return (
        clean_text(title, field="Title", max_chars=TITLE_MAX_CHARS, required=True),
        clean_text(source_material, field="Source material", max_chars=settings.GALLEY_MAX_BODY_CHARS, required=False),
    )


@transaction.atomic(savepoint=False)
def do_create_brief(
    *,
    title: str,
    source_material: str,
    acting_user: User,
    channels: Sequence[Channel] | None = None,
    desk: Desk | None = None,
    form_token: UUID | None = None,
) -> tuple[Brief, bool]:
    """Create the brief, or, for a form token that already created one, return that brief: (brief, created).
    It goes to `channels`, or to the default channels (list_default_channels) when None, and belongs to
    `desk`, or to the default desk when None.

    Canonical-first: submissions of one form race on the token's unique index. The insert skips a
    conflict (a loser waits there for the winner's commit), and every caller then reads the brief
    that holds the token, so only the winner audits and starts a summary run.
    """
    if form_token is not None:
        existing = Brief.objects.filter(form_token=form_token).first()
        if existing is not None:
            return existing, False
    with execute_prepared(NEXT_BRIEF_NUMBER_SQL, {}, row_factory=dict_row) as cursor:
        number = the_row(cursor)["number"]
    brief = Brief(
        public_id=brief_public_id(number),
        title=title,
        source_material=source_material,
        source_hash=source_hash(source_material),
        author=acting_user,
        desk=desk or get_default_desk(),
        form_token=form_token,
    )
    if form_token is None:
        brief.save(force_insert=True)
    else:
        Brief.objects.bulk_create([brief], ignore_conflicts=True)  # INSERT … ON CONFLICT DO NOTHING
        stored = Brief.objects.select_related("author").get(form_token=form_token)
        if stored.public_id != brief.public_id:
            return stored, False
        brief = stored
    chosen = list(channels) if channels is not None else list_default_channels()
    brief.channels.set(chosen)
    record_audit_event(
        acting_user=acting_user,
        event_type="brief.created",
        subject_type="brief",
        subject_id=brief.public_id,
        new_state={
            "title": title,
            "status": brief.status,
            "channels": [channel.slug for channel in chosen],
            "desk": brief.desk.slug,
        },
    )
    do_start_summary_run(brief)
    return brief, True


def check_update_source_material(public_id: str, *, source_material: Any, acting_user: AnyUser) -> Brief:
    """Replace the brief's source material; a new summary run starts, older runs stop at their next step."""
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    text = clean_text(
        source_material, field="Source material", max_chars=settings.GALLEY_MAX_BODY_CHARS, required=False
    )
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    return do_update_source_material(brief, source_material=text, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_update_source_material(brief: Brief, *, source_material: str, acting_user: User) -> Brief:
    """Caller holds the brief's row lock. The same text again writes nothing."""
    digest = source_hash(source_material)
    if digest == brief.source_hash:
        return brief
    old_hash = brief.source_hash
    brief.source_material = source_material
    brief.source_hash = digest
    brief.updated_at = timezone.now()
    brief.save(update_fields=["source_material", "source_hash", "updated_at"])
    audit_brief_change(brief, "source_changed", "source_hash", old_hash, digest, acting_user=acting_user)
    do_start_summary_run(brief)
    return brief


def check_change_brief_channels(public_id: str, *, channels: Any, acting_user: AnyUser) -> Brief:
    """Set the channels a brief goes to (slugs of enabled channels). An approval already given keeps the
    channel set it froze; the change is for the approvals to come."""
    acting_user = require_role(acting_user, Role.EDITOR, to="edit briefs")
    chosen = clean_channels(channels)
    if chosen is None:
        raise InvalidInput("Choose at least one channel to publish the brief to.")
    brief = access_brief(public_id, acting_user=acting_user, lock=True)
    return do_change_brief_channels(brief, channels=chosen, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_change_brief_channels(brief: Brief, *, channels: Sequence[Channel], acting_user: User) -> Brief:
    """Caller holds the brief's row lock. The same set again writes nothing; audited as brief.channels_changed."""
    old = sorted(brief.channels.values_list("slug", flat=True))
    new = sorted(channel.slug for channel in channels)
    if old == new:
        return brief
    brief.channels.set(channels)
    audit_brief_change(brief, "channels_changed", "channels", old, new, acting_user=acting_user)
    return brief


def audit_brief_change(brief: Brief, change: str, field: str, old: Any, new: Any, *, acting_user: User) -> None:
    """Audit `brief.<change>`: one field of the brief, from `old` to `new`."""
    record_audit_event(
        acting_user=acting_user,
        event_type=f"brief.{change}",
        subject_type="brief",
        subject_id=brief.public_id,
        old_state={field: old},
        new_state={field: new},
    )
