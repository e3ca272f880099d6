"""Forms render fields and carry the editor's text back on refusal; the actions validate."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, cast

from django import forms
from django.http import QueryDict

from publishing.errors import InvalidInput
from publishing.models import Brief, Channel
from publishing.selectors.channel_sets import list_default_channels, list_enabled_channels
from publishing.selectors.desks import list_desks
from publishing.story import (
    CORRECTION_KEYS,
    CORRECTION_LABEL,
    CORRECTION_NOTE_LABEL,
    CORRECTION_NOTE_MAX_CHARS,
    TAGS_LABEL,
    TEXT_FIELDS,
    TITLE_MAX_CHARS,
    draft_fields,
)


class ChannelsForm(forms.Form):
    """The channels a brief goes to: checkboxes of the enabled channels. `channels_shown` tells a form
    sent with every box unchecked (refused: a brief goes somewhere) from a client that sent no choice."""

    channels = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False, label="Publish to")
    channels_shown = forms.CharField(widget=forms.HiddenInput, required=False, initial="1")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = cast(forms.MultipleChoiceField, self.fields["channels"])
        field.choices = [(channel.slug, channel_label(channel)) for channel in list_enabled_channels()]

    @staticmethod
    def chosen(data: QueryDict) -> list[str] | None:
        """The slugs the form sent, None when it showed no choice (the default channels); InvalidInput
        for a marker this form never renders."""
        shown = data.get("channels_shown", "")
        if shown not in ("", "1"):
            raise InvalidInput("The form's choice of channels is damaged; nothing was saved. Send it again.")
        return data.getlist("channels") if shown else None


def channel_label(channel: Channel) -> str:
    return f"{channel.name} ({channel.slug})"


class BriefForm(ChannelsForm):
    # One token per rendered form, stored with the brief it creates: the same form sent again
    # (double click, retry, Back and resend) finds that brief instead of creating another.
    form_token = forms.CharField(widget=forms.HiddenInput, required=False)
    title = forms.CharField(max_length=TITLE_MAX_CHARS)
    source_material = forms.CharField(widget=forms.Textarea(attrs={"rows": 12}), required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        desks = list(list_desks())
        # One desk is no choice: the brief goes to the default desk (publishing.actions.desks.clean_desk).
        if len(desks) > 1:
            self.fields["desk"] = forms.ChoiceField(
                choices=[(desk.slug, desk.name) for desk in desks],
                initial=next((desk.slug for desk in desks if desk.is_default), None),
                help_text="Its desk's policy says how many approvals it needs, and from whom.",
            )

    @property
    def offers_desks(self) -> bool:
        return "desk" in self.fields

    @classmethod
    def blank(cls) -> BriefForm:
        defaults = [channel.slug for channel in list_default_channels()]
        return cls(initial={"form_token": uuid.uuid4(), "channels": defaults})

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


class SourceMaterialForm(ChannelsForm):
    source_material = forms.CharField(widget=forms.Textarea(attrs={"rows": 14}), required=False)


def story_form_fields(story: Mapping[str, Any]) -> dict[str, str]:
    """A story's fields as the edit form holds them: every field, the tags as one comma line, the
    correction mark as the checkbox sends it ("1" ticked, "" not) and its note."""
    fields = draft_fields(story)
    return {**fields, "tags": ", ".join(fields["tags"]), "correction": "1" if fields["correction"] else ""}


class MarkInput(forms.CheckboxInput):
    """A checkbox that always sends "1", the value the actions read as the mark
    (publishing.story.correction_mark), ticked or not as its value says."""

    def format_value(self, value: Any) -> str:
        return "1"


class RevisionForm(forms.Form):
    """The edit page's form: every field of the story (publishing.story.TEXT_FIELDS, then tags),
    labelled and explained as story.py says.

    `base_number` is the revision the editor's text started from and `draft_version` the version of
    the draft it was loaded from (0: none saved yet; the page's autosave keeps it current). On a
    revision conflict `base_number` stays that revision: only the explicit "overwrite" button (an
    `overwrite_number` naming the newest revision, which the conflict page shows in full) writes
    over what was submitted meanwhile. Fields are not required here: a draft may be unfinished, and
    the actions say what a submission lacks.

    `offers_correction` (a brief some channel holds: docs/editorial.md#corrections) adds the correction
    mark and its public note; without it the form has neither, and the actions refuse a mark sent anyway."""

    base_number = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    draft_version = forms.IntegerField(widget=forms.HiddenInput, min_value=0, required=False)

    def __init__(self, *args: Any, offers_correction: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in TEXT_FIELDS:
            widget: forms.Widget = (
                forms.Textarea(attrs={"rows": 18 if field.name == "body" else 3})
                if field.multiline
                else forms.TextInput()
            )
            widget.attrs["data-draft"] = field.name
            self.fields[field.name] = forms.CharField(
                label=field.label,
                help_text=field.help,
                required=False,
                strip=False,
                max_length=field.max_chars or None,
                widget=widget,
            )
        self.fields["tags"] = forms.CharField(
            label=TAGS_LABEL,
            help_text="Separated by commas, e.g. strike, port.",
            required=False,
            widget=forms.TextInput(attrs={"data-draft": "tags"}),
        )
        if offers_correction:
            self.fields["correction"] = forms.BooleanField(
                label=CORRECTION_LABEL,
                required=False,
                help_text="It goes to every channel that published an earlier revision of this brief, with the note.",
                widget=MarkInput(attrs={"data-draft": "correction"}),
            )
            self.fields["correction_note"] = forms.CharField(
                label=CORRECTION_NOTE_LABEL,
                required=False,
                strip=False,
                max_length=CORRECTION_NOTE_MAX_CHARS,
                help_text="Public: readers see it with the article. Say what was wrong and what is right now.",
                widget=forms.Textarea(attrs={"rows": 3, "data-draft": "correction_note"}),
            )

    @property
    def offers_correction(self) -> bool:
        return "correction" in self.fields

    def story_fields(self) -> list[forms.BoundField]:
        """The story's fields, in order (the correction mark and note are shown apart, after them)."""
        return [self[name] for name in self.fields if name not in CORRECTION_KEYS and not self[name].is_hidden]

    @staticmethod
    def initial_from(story: dict[str, Any], *, base_number: int, draft_version: int) -> dict[str, Any]:
        """The form's initial values from a story (publishing.story.story_fields' shape)."""
        return {**story_form_fields(story), "base_number": base_number, "draft_version": draft_version}


class BriefFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Search")
    status = forms.ChoiceField(choices=[("", "Any status"), *Brief.Status.choices], required=False)
    publication = forms.ChoiceField(
        choices=[("", "Any publication"), ("partial", "Published on some channels, not all")],
        required=False,
        label="Channels",
    )
    schedule = forms.ChoiceField(
        choices=[
            ("", "Any schedule"),
            ("scheduled", "Scheduled, not yet fired"),
            ("overdue", "Overdue schedule"),
        ],
        required=False,
        label="Schedule",
    )
