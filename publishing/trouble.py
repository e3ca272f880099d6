"""Trouble in plain words: where a revision's way to the website stands, told as an editor reads it —
one sentence and the next step ("The website is not answering; Galley retries until 14:05 — nothing
to do"). The one home of that wording: the revision page's publication card, the brief's status line
and the brief list's notes all tell it from here.

It reads only what the pages have loaded already (the publication and the publish and verify
operations, with their status, last error kind and deadline); operation keys, hashes, attempt counts
and leases stay in the pages' "Engineer detail" fold."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils import timezone

from publishing.identities import VERIFY
from publishing.models import Publication
from workers.errors import LEASE_EXPIRED, RECONCILE_REQUESTED, FailureKind
from workers.models import Operation, OperationStatus

NOTHING_TO_DO = "nothing to do"
ASK_AN_OPERATOR = "ask an operator"

# The tone of a told state, as a status badge's CSS name: under way, fine, or stuck.
WAITING, DONE, STUCK = "publishing", "published", "failed"


@dataclass(frozen=True)
class Told:
    """One state in plain words: what happened, and what the reader does about it ("" when the
    sentence says it all)."""

    sentence: str
    next_step: str = ""
    tone: str = WAITING

    @property
    def needs_operator(self) -> bool:
        return self.next_step == ASK_AN_OPERATOR

    def __str__(self) -> str:
        return f"{self.sentence} — {self.next_step}" if self.next_step else self.sentence


def _clock(at: datetime.datetime | None) -> str:
    return timezone.localtime(at).strftime("%H:%M") if at is not None else "its deadline"


# Where a publication goes, as the brief's own sentences name it; a channel's receipt names its channel.
WEBSITE = "the website"


def _reason(operation: Operation) -> str:
    message = operation.last_error_message.strip()
    return f" ({message[:200]})" if message else ""


# What a publish or verify retrying after a failure of this kind is waiting for.
_RETRYING = {
    FailureKind.TIMEOUT: "{Place} is not answering",
    FailureKind.CONNECTION: "{Place} is not answering",
    FailureKind.SERVER_ERROR: "{Place} is failing (a server error)",
    FailureKind.THROTTLED: "{Place} asked Galley to slow down",
    FailureKind.IN_PROGRESS: "{Place} is still taking the story in",
    # Waits at Galley's own gate for the channel (docs/operations.md#rate-limits-and-pauses).
    FailureKind.RATE_LIMITED: "Waiting its turn: {place} takes only so many stories a second",
    FailureKind.CHANNEL_PAUSED: "{Place} asked Galley to pause sending for a while",
    LEASE_EXPIRED: "The worker sending the story stopped",
    RECONCILE_REQUESTED: "Galley is looking up what {place} holds, as an operator asked",
}

# Why a publish or verify stopped for an operator, by its last error kind (a conflict's kind).
_STOPPED = {
    FailureKind.INVALID: "{Place} refused the story{reason}",
    FailureKind.AUTH: "{Place} refused Galley's credentials{reason}",
    FailureKind.KEY_CONFLICT: "Needs an operator: {place} holds another text under this story's key",
    FailureKind.STALE_REVISION: (
        "Needs an operator: {place} holds a revision of this story that Galley did not publish"
    ),
    FailureKind.VERIFICATION_MISMATCH: "Needs an operator: {place} shows other text than the approved revision",
    FailureKind.DRIFT: "Needs an operator: the story was changed on {place} after it was published",
    FailureKind.TIMEOUT: "{Place} did not answer; Galley stopped retrying at {deadline}",
    FailureKind.CONNECTION: "{Place} did not answer; Galley stopped retrying at {deadline}",
    FailureKind.SERVER_ERROR: "{Place} kept failing; Galley stopped retrying at {deadline}",
    FailureKind.THROTTLED: "{Place} kept asking Galley to slow down; Galley stopped at {deadline}",
    FailureKind.RATE_LIMITED: "The story waited its turn past {deadline}; Galley stopped",
    FailureKind.CHANNEL_PAUSED: "{Place} stayed paused past {deadline}; Galley stopped",
    LEASE_EXPIRED: "The workers sending the story kept stopping; Galley stopped retrying at {deadline}",
}


def _places(place: str) -> dict[str, str]:
    return {"place": place, "Place": place[:1].upper() + place[1:]}


def tell_stopped(operation: Operation, *, place: str = WEBSITE) -> Told:
    """Why a publish or verify stopped for an operator (dead or in conflict), with the next step;
    `place` names where it was going (a channel's receipt names its channel)."""
    wording = _STOPPED.get(operation.last_error_kind, "Publishing stopped{reason}")
    sentence = wording.format(reason=_reason(operation), deadline=_clock(operation.deadline), **_places(place))
    return Told(sentence, ASK_AN_OPERATOR, STUCK)


def tell_retrying(operation: Operation, *, place: str = WEBSITE) -> str:
    """What a publish or verify waiting to retry (retry_wait) waits for, in plain words; `place` as for
    tell_stopped."""
    wording = _RETRYING.get(operation.last_error_kind)
    return wording.format(**_places(place)) if wording else f"Sending the story failed{_reason(operation)}"


def _under_way(operation: Operation, publication: Publication | None) -> Told:
    if operation.status == OperationStatus.RETRY_WAIT and operation.last_error_kind:
        return Told(f"{tell_retrying(operation)}; Galley retries until {_clock(operation.deadline)}", NOTHING_TO_DO)
    if operation.kind == VERIFY or publication is not None:
        return Told("On the website; Galley is checking that it shows the approved text", NOTHING_TO_DO)
    return Told("Sending the story to the website", NOTHING_TO_DO)


def tell_publication(state: str, *, publication: Publication | None, operations: Sequence[Operation]) -> Told:
    """A revision's publication state (publishing.selectors.publications.PublicationState.state) in
    plain words, from its publication and its publish and verify operations (in id order)."""
    stuck = next((op for op in operations if op.status in (OperationStatus.DEAD, OperationStatus.CONFLICT)), None)
    if state == "published" and publication is not None:
        return Told(f"Published and checked at {_clock(publication.verified_at)}", tone=DONE)
    if stuck is not None:
        return tell_stopped(stuck)
    if state == "publishing":
        unfinished = [op for op in operations if op.status != OperationStatus.SUCCEEDED]
        return _under_way(unfinished[-1] if unfinished else operations[-1], publication)
    if state in ("superseded", "cancelled"):
        # Galley records why in plain words ("cancelled by an operator: wrong desk", "revision 3 is
        # published"): said as it is.
        ended = next((op for op in operations if op.status == state), None)
        fallback = "a newer revision took its place" if state == "superseded" else "an operator cancelled it"
        why = ended.last_error_message.strip() if ended is not None else ""
        return Told(f"Not published: {why or fallback}", NOTHING_TO_DO, state)
    return Told("Nothing has been sent to the website yet", tone="none")


def tell_brief_publishing(operations: Sequence[Operation]) -> Told | None:
    """For a brief's status line: its latest revision's publish under way but in trouble (retrying
    after a failure), in plain words; None when there is nothing to tell beyond its status."""
    retrying = [op for op in operations if op.status == OperationStatus.RETRY_WAIT and op.last_error_kind]
    if not retrying:
        return None
    return _under_way(retrying[-1], None)


# One try at the website (or the AI provider), by its error kind, as the timeline tells it.
_ATTEMPT_FAILED = {
    FailureKind.TIMEOUT: "no answer in time",
    FailureKind.CONNECTION: "could not connect",
    FailureKind.SERVER_ERROR: "a server error",
    FailureKind.THROTTLED: "asked to slow down",
    FailureKind.IN_PROGRESS: "still taking it in",
    FailureKind.RATE_LIMITED: "waited its turn (rate limit)",
    FailureKind.CHANNEL_PAUSED: "waited: the website asked for a pause",
    FailureKind.INVALID: "refused",
    FailureKind.AUTH: "refused Galley's credentials",
    FailureKind.QUALITY_GATE: "did not pass the quality gate",
    FailureKind.KEY_CONFLICT: "holds another text under this key",
    FailureKind.STALE_REVISION: "holds a revision Galley did not publish",
    FailureKind.VERIFICATION_MISMATCH: "shows other text",
    FailureKind.DRIFT: "changed on the website",
    LEASE_EXPIRED: "the worker stopped",
}


def tell_attempt(*, outcome: str, error_kind: str, finished: bool) -> str:
    """One attempt's outcome in a few plain words (its worker, token and timings are engineer detail)."""
    if not finished:
        return "under way"
    if outcome == "succeeded":
        return "done"
    if outcome == "lease_lost":
        return "another worker took over"
    if outcome == "superseded":
        return "no longer needed"
    return _ATTEMPT_FAILED.get(error_kind, "failed")


# An operation's status in a word or two, for its one timeline entry.
OPERATION_OUTCOME: dict[str, str] = {
    OperationStatus.PENDING: "queued",
    OperationStatus.RUNNING: "under way",
    OperationStatus.RETRY_WAIT: "retrying",
    OperationStatus.SUCCEEDED: "done",
    OperationStatus.DEAD: "stopped",
    OperationStatus.CONFLICT: "stopped on a conflict",
    OperationStatus.SUPERSEDED: "no longer needed",
    OperationStatus.CANCELLED: "cancelled",
}
