from __future__ import annotations

from django import forms

from approvals.models import Approval
from publishing.models import Revision


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

    def shape_errors(self, *, number: int) -> list[str]:
        """What is wrong with the form's hidden fields for a decision on revision `number`, if anything."""
        self.is_valid()
        errors = [str(error) for name in ("revision_number", "payload_hash") for error in self.errors.get(name, [])]
        if not errors and self.cleaned_data["revision_number"] != number:
            errors.append(
                f"This form is for revision {self.cleaned_data['revision_number']} but was sent to revision "
                f"{number}'s page; reload the page."
            )
        return errors

    @classmethod
    def for_revision(cls, revision: Revision) -> DecisionForm:
        """An unbound form carrying the revision's number and payload hash."""
        return cls(initial={"revision_number": revision.number, "payload_hash": revision.payload_hash})


class CommentForm(forms.Form):
    """A new thread's first comment, or a reply (`reply_to`: a comment of the thread). Only shows
    and keeps what was typed: the action checks it."""

    body = forms.CharField(label="Comment", widget=forms.Textarea(attrs={"rows": 3}), required=False)
    reply_to = forms.CharField(widget=forms.HiddenInput, required=False)

    def replies_to(self) -> str:
        """The thread this form was sent from ("" for a new thread), as the page names it."""
        return str(self.data.get("reply_to", "")) if self.is_bound else ""
