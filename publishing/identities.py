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
# Every kind of a brief's publication: what an operator settles among the publication problems.
PUBLICATION_KINDS = (PUBLISH, VERIFY, REPUBLISH, DRIFT_CHECK)


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


def publish_key(public_id: str, number: int) -> str:
    """Binds the publication of revision `number` to one side effect at the target."""
    return f"publish:{public_id}:revision-{number}"


def verify_key(public_id: str, number: int) -> str:
    return f"verify:{public_id}:revision-{number}"


def drift_check_key(public_id: str, number: int, round_id: str) -> str:
    """One periodic check of published revision `number`; `round_id` is its round's database time."""
    return f"drift-check:{public_id}:revision-{number}:{round_id}"


def republish_key(public_id: str, number: int, conflict_id: int) -> str:
    """Writes revision `number` over a drift again: a key of its own, one per drift it repairs (the
    approved revision's publish key already holds its receipt at the target, which a replay only
    answers again); stable across the republish's retries."""
    return f"republish:{public_id}:revision-{number}:conflict-{conflict_id}"


def republish_verify_key(public_id: str, number: int, conflict_id: int) -> str:
    return f"verify:{republish_key(public_id, number, conflict_id)}"


def step_key(public_id: str, run_number: int, step: str) -> str:
    """The operation that runs one step of one summary run."""
    return f"summary:{public_id}:run-{run_number}:{step}"


def summary_run_key_prefix(public_id: str, run_number: int) -> str:
    """What every step key of the run starts with."""
    return step_key(public_id, run_number, "")


def step_identity(public_id: str, source_hash: str, step: str) -> str:
    """The canonical artifact's identity: one per step of one version of the source (docs/invariants.md#i6)."""
    return f"{public_id}/summary/{source_hash}/{step}"
