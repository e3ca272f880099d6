"""Publishing's identities (PRODUCT.md §3): the one place an operation key, a step identity or a
brief's public id is made. Actions, selectors and handlers all build them here, so that a key
read back from the database always matches the key that was written."""

from __future__ import annotations

# Operation kinds, each with its handler (publishing.apps).
PUBLISH = "publish"
VERIFY = "verify"
SUMMARY_STEP = "summary_step"


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


def step_key(public_id: str, run_number: int, step: str) -> str:
    """The operation that runs one step of one summary run."""
    return f"summary:{public_id}:run-{run_number}:{step}"


def summary_run_key_prefix(public_id: str, run_number: int) -> str:
    """What every step key of the run starts with."""
    return step_key(public_id, run_number, "")


def step_identity(public_id: str, source_hash: str, step: str) -> str:
    """The canonical artifact's identity: one per step of one version of the source (invariant 6)."""
    return f"{public_id}/summary/{source_hash}/{step}"
