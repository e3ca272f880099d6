"""A brief's channels: the new-brief form offers the enabled channels with the default ones checked;
a brief goes to the chosen channels, or to the default ones (the primary channel when no other is
default) when no choice was sent; a form with every box unchecked is refused; the brief's edit
changes them; each is audited."""

from __future__ import annotations

import re

import pytest
from django.db import transaction

from publishing.actions.briefs import check_create_brief
from publishing.actions.channels import do_save_channel
from publishing.errors import InvalidInput
from publishing.identities import PRIMARY_CHANNEL
from publishing.models import Brief, Channel
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db


def add_channel(slug: str, *, default: bool = False, enabled: bool = True) -> Channel:
    with transaction.atomic():
        return do_save_channel(
            None,
            values={"slug": slug, "name": slug.title(), "is_default": default, "enabled": enabled},
            acting_user=None,
        )


def channels_of(brief: Brief) -> list[str]:
    return sorted(brief.channels.values_list("slug", flat=True))


def checkboxes(html: str) -> dict[str, bool]:
    boxes = re.findall(r'<input type="checkbox" name="channels" value="([^"]+)"([^>]*)>', html)
    return {slug: "checked" in rest for slug, rest in boxes}


def test_new_brief_form__enabled_channels_offered__default_ones_checked(client, editor):
    add_channel("partner-feed", default=True)
    add_channel("archive")
    add_channel("retired", enabled=False)
    client.force_login(editor)

    page = client.get("/briefs/new/").content.decode()

    assert checkboxes(page) == {PRIMARY_CHANNEL: True, "archive": False, "partner-feed": True}


def test_new_brief__chosen_channels__the_brief_goes_there__audited(client, editor):
    add_channel("partner-feed", default=True)
    add_channel("archive")
    client.force_login(editor)

    client.post("/briefs/new/", {"title": "Ferry", "channels_shown": "1", "channels": ["archive", PRIMARY_CHANNEL]})

    brief = Brief.objects.get()
    assert channels_of(brief) == ["archive", PRIMARY_CHANNEL]
    created = AuditEvent.objects.get(event_type="brief.created", subject_id=brief.public_id)
    assert created.new_state["channels"] == [PRIMARY_CHANNEL, "archive"]


def test_new_brief__no_choice_sent__default_channels__primary_alone_when_no_other_is_default(editor):
    Channel.objects.filter(slug=PRIMARY_CHANNEL).update(is_default=False)
    alone = check_create_brief(title="Ferry", source_material="", acting_user=editor)
    add_channel("partner-feed", default=True)
    fanned = check_create_brief(title="Ferry again", source_material="", acting_user=editor)

    assert channels_of(alone) == [PRIMARY_CHANNEL]
    assert channels_of(fanned) == ["partner-feed"]


def test_new_brief__every_box_unchecked__refused_nothing_created_text_kept(client, editor):
    client.force_login(editor)

    response = client.post("/briefs/new/", {"title": "Ferry", "source_material": "Keep me.", "channels_shown": "1"})

    assert response.status_code == 400
    assert "Choose at least one channel" in response.content.decode()
    assert "Keep me." in response.content.decode()
    assert not Brief.objects.exists()


def test_new_brief__disabled_or_unknown_channel__refused(editor):
    add_channel("retired", enabled=False)

    with pytest.raises(InvalidInput, match="No enabled channel is called nowhere, retired"), transaction.atomic():
        check_create_brief(title="Ferry", source_material="", channels=["retired", "nowhere"], acting_user=editor)
    assert not Brief.objects.exists()


def test_brief_edit__channels_changed__audited_once__same_set_again_writes_nothing(client, editor):
    add_channel("partner-feed")
    client.force_login(editor)
    brief = check_create_brief(title="Ferry", source_material="Winter.", acting_user=editor)
    path = f"/briefs/{brief.public_id}/source/"
    assert checkboxes(client.get(path).content.decode()) == {PRIMARY_CHANNEL: True, "partner-feed": False}

    for _ in range(2):
        response = client.post(
            path, {"source_material": "Winter.", "channels_shown": "1", "channels": [PRIMARY_CHANNEL, "partner-feed"]}
        )
        assert response.status_code == 302

    assert channels_of(brief) == ["partner-feed", PRIMARY_CHANNEL]
    (changed,) = AuditEvent.objects.filter(event_type="brief.channels_changed", subject_id=brief.public_id)
    assert (changed.old_state, changed.new_state, changed.actor_id) == (
        {"channels": [PRIMARY_CHANNEL]},
        {"channels": ["partner-feed", PRIMARY_CHANNEL]},
        editor.pk,
    )
