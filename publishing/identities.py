"""Publishing's identities (docs/architecture.md#identities): the one place an operation key, a step identity or a
brief's public id is made. Actions, selectors and handlers all build them here, so that a key
read back from the database always matches the key that was written."""

from __future__ import annotations

from typing import Protocol

# Operation kinds, each with its handler (publishing.apps).
PUBLISH = "publish"
VERIFY = "verify"
SUMMARY_STEP = "summary_step"
# A published revision's periodic check that the target still shows it, and the operator's
# republish of it over a drift (docs/wordpress.md#drift-actions).
DRIFT_CHECK = "drift_check"
REPUBLISH = "republish"
# Takes down what a revision put on a channel (docs/retractions.md).
RETRACT = "retract"
# Every kind of a brief's publication: what an operator settles among the publication problems.
PUBLICATION_KINDS = (PUBLISH, VERIFY, REPUBLISH, DRIFT_CHECK)

# The channel the GALLEY_TARGET_* / GALLEY_WORDPRESS_* settings define (publishing.models.Channel,
# migration 0014). Its keys are the unextended ones, so the rows and the targets' idempotency
# records written before channels existed stay valid.
PRIMARY_CHANNEL = "web"


class _ActsOnAVersion(Protocol):
    @property
    def subject_version(self) -> int | None: ...
    @property
    def key(self) -> str: ...


def revision_number(operation: _ActsOnAVersion) -> int:
    """The revision a brief's publication operation (publish, verify, republish, drift check) acts on:
    its typed subject_version, which publishing's actions enqueue every one of them with (the comparisons
    of a brief's older and newer operations read the same column: publishing.sql.brief_versions)."""
    if operation.subject_version is None:
        raise ValueError(f"operation {operation.key} names no revision (subject_version)")
    return operation.subject_version


def brief_public_id(number: int) -> str:
    """`brief-042`: stable for the life of the brief."""
    return f"brief-{number:03d}"


def revision_subject_id(public_id: str, number: int) -> str:
    """How the audit log names revision `number` of a brief."""
    return f"{public_id}/revision-{number}"


def _on_channel(key: str, channel: str) -> str:
    """`key` on `channel`: unchanged on the primary channel, else extended with `:channel-<slug>`
    (a slug never changes and holds no colon, so the extended key is stable and unique)."""
    return key if channel == PRIMARY_CHANNEL else f"{key}:channel-{channel}"


def publish_key(public_id: str, number: int, channel: str = PRIMARY_CHANNEL) -> str:
    """Binds the publication of revision `number` on `channel` to one side effect there:
    `publish:brief-042:revision-3` on the primary channel, `publish:brief-042:revision-3:channel-partner-feed`
    on another."""
    return _on_channel(f"publish:{public_id}:revision-{number}", channel)


def verify_key(public_id: str, number: int, channel: str = PRIMARY_CHANNEL) -> str:
    return _on_channel(f"verify:{public_id}:revision-{number}", channel)


def retract_key(public_id: str, number: int, channel: str = PRIMARY_CHANNEL) -> str:
    """Takes down what revision `number` put on `channel`: `retract:brief-042:revision-3` on the primary
    channel, extended with the channel's slug like publish_key on another."""
    return _on_channel(f"retract:{public_id}:revision-{number}", channel)


def drift_check_key(public_id: str, number: int, round_id: str, channel: str = PRIMARY_CHANNEL) -> str:
    """One periodic check of published revision `number` on `channel`; `round_id` is its round's database time."""
    return _on_channel(f"drift-check:{public_id}:revision-{number}:{round_id}", channel)


def republish_key(public_id: str, number: int, conflict_id: int, channel: str = PRIMARY_CHANNEL) -> str:
    """Writes revision `number` over a drift again: a key of its own, one per drift it repairs (the
    approved revision's publish key already holds its receipt at the target, which a replay only
    answers again); stable across the republish's retries."""
    return _on_channel(f"republish:{public_id}:revision-{number}:conflict-{conflict_id}", channel)


def republish_verify_key(public_id: str, number: int, conflict_id: int, channel: str = PRIMARY_CHANNEL) -> str:
    return f"verify:{republish_key(public_id, number, conflict_id, channel)}"


def step_key(public_id: str, run_number: int, step: str) -> str:
    """The operation that runs one step of one summary run."""
    return f"summary:{public_id}:run-{run_number}:{step}"


def summary_run_key_prefix(public_id: str, run_number: int) -> str:
    """What every step key of the run starts with."""
    return step_key(public_id, run_number, "")


def step_identity(public_id: str, source_hash: str, step: str) -> str:
    """The canonical artifact's identity: one per step of one version of the source (docs/invariants.md#i6)."""
    return f"{public_id}/summary/{source_hash}/{step}"


# Telling operators that a schedule missed its time (publishing.actions.overdue): one per publish operation.
SCHEDULE_OVERDUE = "schedule_overdue"


def schedule_overdue_key(publish_key: str) -> str:
    """`schedule-overdue:<publish key>`: the one alert of an overdue schedule. The key is unique, so of
    any number of sweeps on any number of hosts exactly one writes it (docs/invariants.md#i15)."""
    return f"schedule-overdue:{publish_key}"


# One lifecycle event delivered to one webhook subscriber (publishing.handlers.webhooks).
WEBHOOK = "webhook"


def webhook_key(event_id: str, subscriber_id: int) -> str:
    """Binds one event's delivery to one subscriber: `webhook:<event id>:subscriber-<id>`; its
    retries and an operator's replay keep it, and the subscriber sees the event id as Idempotency-Key."""
    return f"webhook:{event_id}:subscriber-{subscriber_id}"
