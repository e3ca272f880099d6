"""Forms render fields and carry the editor's text back on refusal; the actions validate."""

from __future__ import annotations

from django import forms

from publishing.actions.revisions import TITLE_MAX_CHARS
from publishing.models import Brief


class BriefForm(forms.Form):
    title = forms.CharField(max_length=TITLE_MAX_CHARS)
    source_material = forms.CharField(widget=forms.Textarea(attrs={"rows": 12}), required=False)


class SourceMaterialForm(forms.Form):
    source_material = forms.CharField(widget=forms.Textarea(attrs={"rows": 14}), required=False)


class RevisionForm(forms.Form):
    base_number = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    title = forms.CharField(max_length=TITLE_MAX_CHARS)
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 18}), strip=False)


class BriefFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Search")
    status = forms.ChoiceField(choices=[("", "Any status"), *Brief.Status.choices], required=False)
