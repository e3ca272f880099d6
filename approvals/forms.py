from __future__ import annotations

from django import forms

from approvals.models import Approval
from publishing.models import Revision


class DecisionForm(forms.Form):
    """Carries the revision number and payload hash the approver reviewed, so a decision binds to them."""

    revision_number = forms.IntegerField(widget=forms.HiddenInput)
    payload_hash = forms.CharField(widget=forms.HiddenInput, max_length=64)
    decision = forms.ChoiceField(choices=Approval.Decision.choices, widget=forms.HiddenInput, required=False)
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)

    @classmethod
    def for_revision(cls, revision: Revision) -> DecisionForm:
        """An unbound form carrying the revision's number and payload hash."""
        return cls(initial={"revision_number": revision.number, "payload_hash": revision.payload_hash})
