from __future__ import annotations

import functools
from typing import Any
from zoneinfo import available_timezones

from django import forms
from django.conf import settings

from approvals.models import Approval
from publishing.errors import InvalidInput
from publishing.models import Revision

# The decision form's "Publish now / at" values.
NOW, AT = "now", "at"


class DecisionForm(forms.Form):
    """Carries the revision number and payload hash the approver reviewed, so a decision binds to them.

    Its checks are of shape only (a damaged or forged form is a 400); whether the revision and hash
    are still current is the action's to say (a 409).
    """

    revision_number = forms.IntegerField(
        widget=forms.HiddenInput,
        min_value=1,
        # PostgreSQL's integer: a larger number names no revision and could not even be looked up.
        max_value=2**31 - 1,
        error_messages={
            "required": "The revision number is missing or not a number; reload the page.",
            "invalid": "The revision number is missing or not a number; reload the page.",
            "min_value": "The revision number is not a revision's (they start at 1); reload the page.",
            "max_value": "The revision number is not a revision's (it is too large); reload the page.",
        },
    )
    payload_hash = forms.RegexField(
        regex=r"^[0-9a-f]{64}$",
        widget=forms.HiddenInput,
        error_messages={
            "required": "The payload hash of the revision you reviewed is missing; reload the page.",
            "invalid": "The payload hash sent is not a payload hash (64 hexadecimal digits); reload the page.",
        },
    )
    decision = forms.ChoiceField(choices=Approval.Decision.choices, widget=forms.HiddenInput, required=False)
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    # "Publish now / at": the time is the action's to check (approvals.schedules.clean_schedule); the form only
    # shows what was typed and refuses a `publish_when` no page offers.
    publish_when = forms.ChoiceField(
        choices=[(NOW, "Publish now"), (AT, "Publish at")],
        widget=forms.RadioSelect,
        required=False,
        initial=NOW,
        error_messages={"invalid_choice": "The form's publish choice is neither now nor at; reload the page."},
    )
    publish_at = forms.CharField(
        required=False, max_length=64, widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 60})
    )
    zone = forms.CharField(required=False, max_length=64)

    def shape_errors(self, *, number: int) -> list[str]:
        """What is wrong with the form's hidden fields for a decision on revision `number`, if anything."""
        self.is_valid()
        errors = [str(error) for name in ("revision_number", "payload_hash") for error in self.errors.get(name, [])]
        errors += [str(error) for error in self.errors.get("publish_when", [])]
        if not errors and self.cleaned_data["revision_number"] != number:
            errors.append(
                f"This form is for revision {self.cleaned_data['revision_number']} but was sent to revision "
                f"{number}'s page; reload the page."
            )
        return errors

    def schedule(self) -> dict[str, Any]:
        """The action's publish_at and zone: none unless the approver chose "Publish at" (call shape_errors first).
        Raises InvalidInput for "Publish at" without a time."""
        if self.cleaned_data.get("publish_when") != AT:
            return {}
        publish_at = self.data.get("publish_at", "")
        if not str(publish_at).strip():
            # "Publish at" with no time must never fall back to now: that would break the embargo meant.
            raise InvalidInput("Choose the date and time to publish at, or choose Publish now.")
        return {"publish_at": publish_at, "zone": self.data.get("zone", "")}

    @classmethod
    def for_revision(cls, revision: Revision) -> DecisionForm:
        """An unbound form carrying the revision's number and payload hash."""
        return cls(initial={"revision_number": revision.number, "payload_hash": revision.payload_hash})


@functools.cache
def zone_choices() -> list[str]:
    """The IANA zones a schedule may be given in, for the zone select (the browser picks its own by default)."""
    return sorted(available_timezones())


def default_zone() -> str:
    return str(settings.TIME_ZONE)


class CommentForm(forms.Form):
    """A new thread's first comment, or a reply (`reply_to`: a comment of the thread). Only shows
    and keeps what was typed: the action checks it."""

    body = forms.CharField(label="Comment", widget=forms.Textarea(attrs={"rows": 3}), required=False)
    reply_to = forms.CharField(widget=forms.HiddenInput, required=False)

    def replies_to(self) -> str:
        """The thread this form was sent from ("" for a new thread), as the page names it."""
        return str(self.data.get("reply_to", "")) if self.is_bound else ""
