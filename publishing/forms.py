"""Forms render fields and carry the editor's text back on refusal; the actions validate."""

from __future__ import annotations

import uuid

from django import forms
from django.http import QueryDict

from publishing.models import Brief
from publishing.story import TITLE_MAX_CHARS


class BriefForm(forms.Form):
    # One token per rendered form, stored with the brief it creates: the same form sent again
    # (double click, retry, Back and resend) finds that brief instead of creating another.
    form_token = forms.CharField(widget=forms.HiddenInput, required=False)
    title = forms.CharField(max_length=TITLE_MAX_CHARS)
    source_material = forms.CharField(widget=forms.Textarea(attrs={"rows": 12}), required=False)

    @classmethod
    def blank(cls) -> BriefForm:
        return cls(initial={"form_token": uuid.uuid4()})

    @classmethod
    def resubmittable(cls, data: QueryDict, *, new_token: bool) -> BriefForm:
        """The sent form again, text kept. Its token stays when it created nothing (so sending again
        is still one brief), and is replaced when it is damaged or already used (`new_token`)."""
        data = data.copy()
        try:
            uuid.UUID(data.get("form_token", ""))
        except ValueError:
            new_token = True
        if new_token:
            data["form_token"] = str(uuid.uuid4())
        return cls(data)


class SourceMaterialForm(forms.Form):
    source_material = forms.CharField(widget=forms.Textarea(attrs={"rows": 14}), required=False)


class RevisionForm(forms.Form):
    """`base_number` is the revision the editor's text started from. On a conflict it stays that
    revision: only the explicit "overwrite" button (an `overwrite_number` naming the newest
    revision, which the conflict page shows in full) writes over what was saved meanwhile."""

    base_number = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    title = forms.CharField(max_length=TITLE_MAX_CHARS)
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 18}), strip=False)


class BriefFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Search")
    status = forms.ChoiceField(choices=[("", "Any status"), *Brief.Status.choices], required=False)
