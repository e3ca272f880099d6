"""Channels: the destinations an approval publishes to (docs/channels.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from publishing.credentials import seal
from publishing.errors import InvalidInput, NotFound
from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Brief, Channel, Publication, Revision
from publishing.roles import AnyUser, Role, require_role
from publishing.selectors.channel_sets import get_channel_set
from publishing.selectors.corrections import channel_order, list_holding_channels
from workers.actions.gates import set_channel_rate
from workers.audit import record_audit_event
from workers.models import Operation


def ensure_primary_channel(*, using: str = "default") -> Channel:
    """The channel the GALLEY_TARGET_* / GALLEY_WORDPRESS_* settings define, made if missing (idempotent),
    with its gate (do_sync_channel_gate)."""
    channel, _created = Channel.objects.using(using).get_or_create(
        slug=PRIMARY_CHANNEL,
        defaults={"name": "Website", "from_settings": True, "is_default": True, "enabled": True},
    )
    do_sync_channel_gate(channel)
    return channel


def check_channel_set(brief: Brief, requested: object) -> list[Channel]:
    """The channels an approval of `brief` freezes: `requested` (a list of slugs) when given, else the
    brief's set (get_channel_set). Raises InvalidInput naming what is wrong: not a list of slugs, an
    unknown or disabled channel, or none at all."""
    if requested is None:
        chosen = get_channel_set(brief)
        if not chosen:
            raise InvalidInput("No enabled channel to publish to: an operator enables one in the admin.")
        return chosen
    slugs = _requested_slugs(requested)
    if not slugs:
        raise InvalidInput("Choose at least one channel to publish to.")
    found = {channel.slug: channel for channel in Channel.objects.filter(slug__in=slugs)}
    unknown = [slug for slug in slugs if slug not in found]
    if unknown:
        raise InvalidInput(f"No channel is called {', '.join(map(repr, unknown))}; choose among the configured ones.")
    disabled = [slug for slug in slugs if not found[slug].enabled]
    if disabled:
        names = ", ".join(map(repr, disabled))
        raise InvalidInput(f"Channel {names} is disabled; an operator enables it in the admin.")
    return [found[slug] for slug in sorted(slugs, key=channel_order)]


def _requested_slugs(requested: object) -> list[str]:
    """The slugs asked for, each once, in the order given; InvalidInput for anything but a list of slugs."""
    if not isinstance(requested, list | tuple) or not all(isinstance(slug, str) for slug in requested):
        raise InvalidInput('Channels must be a list of channel slugs, e.g. ["web", "partner-feed"].')
    return list(dict.fromkeys(requested))


def check_revision_channel_set(brief: Brief, revision: Revision, requested: object) -> list[Channel]:
    """The channels the approval of `revision` freezes (docs/invariants.md#i14): check_channel_set's, except
    for a correction (docs/invariants.md#i16), which goes to every channel holding an earlier revision of
    the brief, disabled ones included (their publish waits for an operator, as any there does), and to
    those only — plus any enabled channel the approver names besides them. `requested` None: the
    holders alone. Refused (InvalidInput, nothing written): a choice that leaves out a holder, which
    would keep showing the text being corrected."""
    if not revision.payload.get("correction"):
        return check_channel_set(brief, requested)
    # Never empty: a correction is written only once some channel holds the brief
    # (publishing.actions.revisions.check_may_correct), and publications are never deleted. A channel an
    # earlier revision is still on its way to is one (list_holding_channels): left out, it would end
    # up with the text being corrected.
    holders = list_holding_channels(brief, before=revision.number)
    slugs = [] if requested is None else _requested_slugs(requested)
    held = {holder.channel.slug: holder for holder in holders}
    missing = [held[slug] for slug in held if requested is not None and slug not in slugs]
    if missing:
        named = "; ".join(f"{h.channel.name} ({h.channel.slug}) {h.holds}" for h in missing)
        raise InvalidInput(
            f"Revision {revision.number} is a correction: it must go to every channel holding an earlier revision "
            f"of {brief.public_id}, and your choice leaves out {named}. Nothing was approved; choose "
            "every channel that holds it, and any others."
        )
    extras = [slug for slug in slugs if slug not in held]
    chosen = [holder.channel for holder in holders] + (check_channel_set(brief, extras) if extras else [])
    return sorted(chosen, key=lambda channel: channel_order(channel.slug))


def do_sync_channel_gate(channel: Channel) -> None:
    """The channel's rate limit onto its gate, which every worker on every host reads before a send
    (docs/operations.md#rate-limits-and-pauses); call it whenever a channel is saved. Idempotent; a
    pause and the send slots already taken stay. Not audited on its own: it copies a setting whose
    change the channel's save records."""
    set_channel_rate(channel.slug, rate_per_second=channel.rate_per_second, using=channel._state.db or "default")


# What a channel's audit records hold: every setting, and of the credentials only whether they are set.
CHANNEL_SETTINGS = ("slug", "name", "kind", "base_url", "username", "enabled", "is_default", "rate_per_second")
# The primary channel's connection comes from the GALLEY_TARGET_* / GALLEY_WORDPRESS_* settings.
CONNECTION_SETTINGS = ("kind", "base_url", "username")


def channel_state(channel: Channel) -> dict[str, Any]:
    """A channel as its audit records show it: never its credentials, only `credentials_set`."""
    state: dict[str, Any] = {name: getattr(channel, name) for name in CHANNEL_SETTINGS}
    state["credentials_set"] = bool(channel.secret_sealed)
    return state


def check_save_channel(
    channel_id: int | None,
    *,
    values: Mapping[str, Any],
    secret: str = "",
    clear_secret: bool = False,
    acting_user: AnyUser,
) -> Channel:
    """Create a channel (`channel_id` None) or change one, as an operator; joins the caller's transaction.

    `values` holds the settings to set (CHANNEL_SETTINGS; the admin's form has validated them). A
    non-empty `secret` replaces the credentials, `clear_secret` removes them, neither keeps them.
    Refused (InvalidInput, nothing written): changing a slug, which is part of every operation key on
    the channel, and setting the primary channel's connection, which its settings define.
    """
    acting_user = require_role(acting_user, Role.OPERATOR, to="configure channels")
    unknown = set(values) - set(CHANNEL_SETTINGS)
    if unknown:
        raise InvalidInput(f"A channel has no setting {', '.join(sorted(unknown))}.")
    channel = None
    if channel_id is not None:
        # Locked: two operators saving at once are applied one after the other, each audited against the last.
        channel = Channel.objects.select_for_update(of=("self",)).filter(pk=channel_id).first()
        if channel is None:
            raise NotFound("There is no such channel (it was deleted meanwhile).")
        if "slug" in values and values["slug"] != channel.slug:
            raise InvalidInput("A channel's slug never changes: it is part of every operation key on the channel.")
        if channel.from_settings and (
            secret
            or clear_secret
            or any(name in values and values[name] != getattr(channel, name) for name in CONNECTION_SETTINGS)
        ):
            raise InvalidInput(
                f"The connection of channel {channel.slug!r} is defined by the GALLEY_TARGET_* (or GALLEY_WORDPRESS_*) "
                "settings; change them there."
            )
    return do_save_channel(channel, values=values, secret=secret, clear_secret=clear_secret, acting_user=acting_user)


@transaction.atomic(savepoint=False)
def do_save_channel(
    channel: Channel | None,
    *,
    values: Mapping[str, Any],
    secret: str = "",
    clear_secret: bool = False,
    acting_user: User | None,
) -> Channel:
    """Create (`channel` None) or change the channel, audited as channel.created / channel.changed with
    old and new state (channel_state: never the credentials). Caller holds the row lock of an existing
    channel. Saving what is already stored writes nothing. The credentials are sealed here
    (publishing.credentials) and never logged."""
    old_state = None if channel is None else channel_state(channel)
    if channel is None:
        channel = Channel()
    for name, value in values.items():
        setattr(channel, name, value)
    if clear_secret:
        channel.secret_sealed = ""
    elif secret:
        channel.secret_sealed = seal(secret)
    new_state = channel_state(channel)
    if old_state == new_state and not secret:
        return channel
    channel.updated_at = timezone.now()
    if old_state is None:
        channel.created_at = channel.updated_at
        channel.save(force_insert=True)
    else:
        channel.save()
    record_audit_event(
        acting_user=acting_user,
        event_type="channel.created" if old_state is None else "channel.changed",
        subject_type="channel",
        subject_id=channel.slug,
        old_state=old_state,
        # A replaced secret leaves the state as it was (set, and set): the record says it was replaced.
        new_state={**new_state, "credentials_replaced": True} if secret and old_state is not None else new_state,
    )
    # Every worker on every host reads the rate from the gate (in the same transaction as the save).
    do_sync_channel_gate(channel)
    return channel


def check_delete_channel(channel_id: int, *, acting_user: AnyUser) -> None:
    """Delete a channel nothing was ever sent to, as an operator; joins the caller's transaction.

    Refused (InvalidInput, nothing written) for the primary channel and for a channel that has
    publications or operations: its slug is in their keys, and they are the record of what was sent.
    """
    acting_user = require_role(acting_user, Role.OPERATOR, to="delete channels")
    channel = Channel.objects.select_for_update(of=("self",)).filter(pk=channel_id).first()
    if channel is None:
        return
    refusal = channel_deletion_refusal(channel)
    if refusal:
        raise InvalidInput(refusal)
    do_delete_channel(channel, acting_user=acting_user)


def channel_deletion_refusal(channel: Channel) -> str:
    """Why the channel cannot be deleted, or "" when it can."""
    if channel.from_settings:
        return f"Channel {channel.slug!r} is the primary channel (the GALLEY_TARGET_* settings); it cannot be deleted."
    if Publication.objects.filter(channel=channel).exists() or Operation.objects.filter(channel=channel.slug).exists():
        return (
            f"Channel {channel.slug!r} has publications or operations, which name it in their keys; it cannot be "
            "deleted. Disable it instead: nothing more is sent to it."
        )
    return ""


@transaction.atomic(savepoint=False)
def do_delete_channel(channel: Channel, *, acting_user: User | None) -> None:
    """Delete the channel, audited as channel.deleted with its last state (never the credentials).
    Caller holds its row lock and has checked channel_deletion_refusal."""
    old_state = channel_state(channel)
    channel.delete()
    record_audit_event(
        acting_user=acting_user,
        event_type="channel.deleted",
        subject_type="channel",
        subject_id=old_state["slug"],
        old_state=old_state,
    )
