"""The revision page: what one viewer sees of a revision, its decisions and its publication. Reads
the approvals: publishing.actions never imports this module, only the views do."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.contrib.auth.models import User

from approvals.models import Approval, ApprovalChannel
from approvals.policies import PolicyProgress, get_policy_progress
from approvals.selectors import get_valid_approval, list_approval_channels, list_decisions
from publishing.diffs import PayloadDiff
from publishing.models import Brief, Channel, Revision
from publishing.roles import AnyUser, Role, has_role, user_group_names
from publishing.selectors.channel_sets import get_channel_options
from publishing.selectors.channels import ChannelReceipt, get_channel_receipts
from publishing.selectors.corrections import Holder, channel_order, list_holding_channels
from publishing.selectors.publications import PublicationState, get_publication_state
from publishing.selectors.revisions import (
    diff_revisions,
    get_latest_revision,
    get_restored_number,
    get_revisions_by_number,
)
from publishing.story import correction_note


@dataclass(frozen=True)
class RevisionPage:
    """Everything the revision page shows about one revision, as one viewer sees it."""

    brief: Brief
    revision: Revision
    latest: Revision | None
    is_current: bool
    # What this revision changes against the previous one (None when the diffs were not asked for).
    previous_diff: PayloadDiff | None
    # The revision verified at the target, and what this revision changes against it, unless it
    # is this revision or the previous one (whose diff is shown already).
    published: Revision | None
    published_diff: PayloadDiff | None
    restores: int | None
    numbers: list[int]  # every revision number of the brief, newest first, for the compare form
    decisions: list[Approval]
    own_decision: Approval | None
    valid_approval: Approval | None
    publication_state: PublicationState
    receipts: list[ChannelReceipt]  # one per channel its approval sent it to
    may_decide: bool
    # Where the revision stands under its approval policy (docs/policies.md), and whether the viewer's
    # approval would count towards it now: the form offers "Approve" only then, and otherwise
    # `approval_note` says why in a sentence (the form's own notes cover one's own revision and decision).
    policy: PolicyProgress
    may_approve: bool
    approval_note: str
    may_restore: bool
    is_own_revision: bool
    # The decision form's channel choices: every enabled channel, and the slugs ticked at first (the brief's).
    # For a correction, the channels holding the brief come first, ticked and locked in (`channels_locked`:
    # the approval must keep them, docs/invariants.md#i16), disabled ones too; the others may be added.
    channel_choices: list[Channel]
    channels_ticked: set[str]
    channels_locked: set[str]
    # A correction's public note ("" for any other revision) and the channels it goes to as a correction:
    # every one holding an earlier revision of the brief, with the revision each holds.
    correction_note: str
    correction_holders: list[Holder]
    # The channels an approval sends this revision to (docs/invariants.md#i14), and the enabled ones an
    # approver may still add to it ("also publish to").
    approval_channels: list[ApprovalChannel]
    addable_channels: list[Channel]

    def as_context(self) -> dict[str, Any]:
        """The fields as a template context (dataclasses.asdict would deep-copy the model instances)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def get_revision_page(brief: Brief, revision: Revision, *, viewer: AnyUser, with_diffs: bool = True) -> RevisionPage:
    """The revision page's data. Without `with_diffs` (a live poll, which shows no diff) the word
    diffs, the costly part for long texts, are not computed."""
    latest = get_latest_revision(brief)
    published_number = brief.published_revision_number
    # The previous and the published revision in one query, whatever the number of revisions.
    found = get_revisions_by_number(brief, {revision.number - 1, published_number or 0} - {0})
    previous = found.get(revision.number - 1)
    published = found.get(published_number) if published_number is not None else None
    is_current = latest is not None and latest.pk == revision.pk
    decisions = list(list_decisions(revision))
    # Decisions are final (approvals.actions), so a second one would only be refused: no form.
    own_decision = next((d for d in decisions if d.approver_id == viewer.pk), None)
    valid_approval = get_valid_approval(revision)
    is_own_revision = revision.author_id == viewer.pk
    may_decide = (
        is_current
        and own_decision is None
        and valid_approval is None
        and brief.published_revision_number != revision.number
        and has_role(viewer, Role.APPROVER)
    )
    policy = get_policy_progress(revision, decisions=decisions)
    counts = (
        may_decide
        and isinstance(viewer, User)
        and policy.counts_for(viewer, revision=revision, groups=user_group_names(viewer))
    )
    may_add = valid_approval is not None and not is_own_revision and has_role(viewer, Role.APPROVER)
    options = get_channel_options(brief) if may_decide or may_add else None
    approval_channels = list_approval_channels(revision) if valid_approval is not None else []
    sent_to = {row.channel_id for row in approval_channels}
    note = correction_note(revision.payload)
    holders = list_holding_channels(brief, before=revision.number) if note else []
    choices = options.enabled if options is not None and may_decide else []
    ticked = {channel.slug for channel in options.chosen} if options is not None and may_decide else set()
    locked = {holder.channel.slug for holder in holders} if may_decide else set()
    if locked:
        held = [holder.channel for holder in holders]
        choices = sorted(
            [*held, *(c for c in choices if c.slug not in locked)], key=lambda channel: channel_order(channel.slug)
        )
        ticked = locked
    return RevisionPage(
        brief=brief,
        revision=revision,
        latest=latest,
        is_current=is_current,
        previous_diff=diff_revisions(previous, revision) if with_diffs else None,
        published=published,
        published_diff=diff_revisions(published, revision)
        if with_diffs and published is not None and published.number not in (revision.number, revision.number - 1)
        else None,
        restores=get_restored_number(revision),
        numbers=list(range(latest.number, 0, -1)) if latest is not None else [],
        decisions=decisions,
        own_decision=own_decision,
        valid_approval=valid_approval,
        publication_state=get_publication_state(revision),
        receipts=get_channel_receipts(brief, revision.number),
        # Once an approval completed its policy, a request for changes would be refused and another
        # approval adds nothing: the form is gone (a live page replaces it with a notice).
        may_decide=may_decide,
        policy=policy,
        may_approve=counts,
        approval_note=""
        if counts or is_own_revision or own_decision is not None or not is_current
        else _approval_note(policy, viewer=viewer),
        may_restore=not is_current and has_role(viewer, Role.EDITOR),
        is_own_revision=is_own_revision,
        channel_choices=choices,
        channels_ticked=ticked,
        channels_locked=locked,
        correction_note=note,
        correction_holders=holders,
        approval_channels=approval_channels,
        addable_channels=[c for c in options.enabled if c.id not in sent_to] if options is not None and may_add else [],
    )


def _approval_note(policy: PolicyProgress, *, viewer: AnyUser) -> str:
    """Why an approver's approval of the current revision, which they neither wrote nor decided on,
    would not count (the decision form's own notes say it for those two)."""
    if not has_role(viewer, Role.APPROVER):
        return ""
    if policy.complete:
        return "Its approval policy is complete: there is nothing left to approve on this revision."
    if policy.missing_groups and not policy.missing_approvals:
        groups = " or ".join(policy.missing_groups)
        return f"Only an approval from {groups} counts now: the policy has every other approval it needs."
    return ""
