"""Channels in the Django admin: operators configure them, every change is audited, the credentials
are write-only (never in a page, an audit record or a log), a slug never changes once set (it is
part of every operation key on the channel), and the primary channel's connection is its settings'."""

from __future__ import annotations

import json
import logging
import re

import pytest
from django.db import transaction
from django.test import Client
from django.views.debug import ExceptionReporter

from publishing.actions.channels import check_save_channel
from publishing.credentials import unseal
from publishing.errors import InvalidInput, PermissionRefused
from publishing.identities import PRIMARY_CHANNEL, publish_key
from publishing.models import Channel
from workers.actions.enqueue import enqueue_operation
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

CHANNELS = "/admin/publishing/channel/"
SECRET = "partner-token-Zq8w4Lr1"
NEW_SECRET = "rotated-token-Kp3vT9x"


def form(**overrides: str) -> dict[str, str]:
    data = {
        "slug": "partner-feed",
        "name": "Partner feed",
        "kind": "reference",
        "base_url": "http://127.0.0.1:8002",
        "username": "",
        "credentials": "",
        "enabled": "on",
        "is_default": "on",
        "rate_per_second": "5",
    }
    data.update(overrides)
    return {name: value for name, value in data.items() if value != "off"}


def add_channel(client: Client, **overrides: str) -> Channel:
    response = client.post(f"{CHANNELS}add/", form(credentials=SECRET, **overrides))
    assert response.status_code == 302, response.content.decode()
    return Channel.objects.get(slug=overrides.get("slug", "partner-feed"))


def channel_audit(slug: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject_type="channel", subject_id=slug).order_by("id"))


def test_channel_admin__credentials_write_only__never_in_the_page_the_audit_or_the_logs(operator_client, caplog):
    caplog.set_level(logging.DEBUG)

    channel = add_channel(operator_client)
    page = operator_client.get(f"{CHANNELS}{channel.pk}/change/").content.decode()
    listing = operator_client.get(CHANNELS).content.decode()

    assert unseal(channel.secret_sealed) == SECRET
    assert SECRET not in channel.secret_sealed
    for html in (page, listing):
        assert SECRET not in html and channel.secret_sealed not in html
    assert re.search(r'<input type="password" name="credentials"[^>]*>', page)
    assert 'name="credentials" value=' not in page
    assert ">set<" in page
    records = json.dumps([[event.old_state, event.new_state] for event in AuditEvent.objects.all()])
    assert SECRET not in records and channel.secret_sealed not in records
    assert SECRET not in caplog.text


def test_channel_admin__error_report_of_the_page__credentials_hidden(operator_client, monkeypatch):
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the action failed")

    monkeypatch.setattr("publishing.admin.check_save_channel", fail)
    reporting = Client(raise_request_exception=False)
    reporting.cookies = operator_client.cookies

    response = reporting.post(f"{CHANNELS}add/", form(credentials=SECRET), HTTP_ACCEPT="text/html")
    report = ExceptionReporter(response.wsgi_request, None, None, None).get_traceback_text()

    assert response.status_code == 500
    assert response.wsgi_request.sensitive_post_parameters == ("credentials",)
    assert "credentials" in report and SECRET not in report


def test_channel_admin__create_change_delete__each_audited_with_credentials_set_only(operator_client, operator):
    channel = add_channel(operator_client)
    changed = operator_client.post(f"{CHANNELS}{channel.pk}/change/", form(name="Partner wire", rate_per_second="2"))
    assert changed.status_code == 302
    deleted = operator_client.post(f"{CHANNELS}{channel.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302

    created, change, deletion = channel_audit("partner-feed")
    assert (created.event_type, change.event_type, deletion.event_type) == (
        "channel.created",
        "channel.changed",
        "channel.deleted",
    )
    assert {created.actor_id, change.actor_id, deletion.actor_id} == {operator.pk}
    assert created.old_state is None
    assert created.new_state == {
        "slug": "partner-feed",
        "name": "Partner feed",
        "kind": "reference",
        "base_url": "http://127.0.0.1:8002",
        "username": "",
        "enabled": True,
        "is_default": True,
        "rate_per_second": 5,
        "credentials_set": True,
    }
    assert change.old_state == created.new_state
    assert change.new_state == {**created.new_state, "name": "Partner wire", "rate_per_second": 2}
    assert deletion.old_state == change.new_state and deletion.new_state is None
    assert not Channel.objects.filter(slug="partner-feed").exists()


def test_channel_admin__blank_credentials_keep_the_stored_ones__new_replace__clear_removes(operator_client):
    channel = add_channel(operator_client)
    sealed = channel.secret_sealed

    operator_client.post(f"{CHANNELS}{channel.pk}/change/", form())
    channel.refresh_from_db()
    assert channel.secret_sealed == sealed
    assert len(channel_audit("partner-feed")) == 1  # saving what is stored writes nothing

    operator_client.post(f"{CHANNELS}{channel.pk}/change/", form(credentials=NEW_SECRET))
    channel.refresh_from_db()
    assert unseal(channel.secret_sealed) == NEW_SECRET
    replaced = channel_audit("partner-feed")[-1]
    assert replaced.new_state["credentials_replaced"] is True and NEW_SECRET not in json.dumps(replaced.new_state)

    operator_client.post(f"{CHANNELS}{channel.pk}/change/", form(clear_credentials="on"))
    channel.refresh_from_db()
    assert channel.secret_sealed == ""
    cleared = channel_audit("partner-feed")[-1]
    assert (cleared.old_state["credentials_set"], cleared.new_state["credentials_set"]) == (True, False)
    assert ">not set<" in operator_client.get(f"{CHANNELS}{channel.pk}/change/").content.decode()


def test_channel_admin__slug_immutable_after_create__part_of_every_operation_key(operator_client, operator):
    channel = add_channel(operator_client)

    page = operator_client.get(f"{CHANNELS}{channel.pk}/change/").content.decode()
    operator_client.post(f"{CHANNELS}{channel.pk}/change/", form(slug="renamed", name="Renamed"))

    assert 'name="slug"' not in page
    channel.refresh_from_db()
    assert (channel.slug, channel.name) == ("partner-feed", "Renamed")
    with pytest.raises(InvalidInput, match="slug never changes"), transaction.atomic():
        check_save_channel(channel.pk, values={"slug": "renamed"}, acting_user=operator)
    assert Channel.objects.filter(slug="renamed").count() == 0


def test_channel_admin__primary_channel__connection_read_only_from_settings__not_deletable(operator_client, operator):
    primary = Channel.objects.get(slug=PRIMARY_CHANNEL)

    page = operator_client.get(f"{CHANNELS}{primary.pk}/change/").content.decode()
    operator_client.post(
        f"{CHANNELS}{primary.pk}/change/",
        {
            "name": "Website",
            "base_url": "http://elsewhere.example",
            "kind": "wordpress",
            "credentials": SECRET,
            "rate_per_second": "3",
        },
    )

    assert "GALLEY_TARGET_*" in page
    for field in ("base_url", "kind", "username", "credentials", "slug"):
        assert f'name="{field}"' not in page
    primary.refresh_from_db()
    assert (primary.base_url, primary.kind, primary.secret_sealed, primary.rate_per_second) == ("", "reference", "", 3)
    assert primary.enabled is False  # the checkbox was left out of the POST: the operator disabled it
    with pytest.raises(InvalidInput, match="GALLEY_TARGET_"), transaction.atomic():
        check_save_channel(primary.pk, values={"base_url": "http://elsewhere.example"}, acting_user=operator)
    assert operator_client.get(f"{CHANNELS}{primary.pk}/delete/").status_code == 403


def test_channel_admin__channel_with_operations__delete_refused_with_the_reason(operator_client):
    channel = add_channel(operator_client)
    with transaction.atomic():
        enqueue_operation(
            key=publish_key("brief-001", 1, "partner-feed"),
            kind="publish",
            payload_hash="0" * 64,
            subject_type="brief",
            subject_id="brief-001",
            subject_version=1,
            channel="partner-feed",
        )

    page = operator_client.get(f"{CHANNELS}{channel.pk}/delete/").content.decode()
    operator_client.post(f"{CHANNELS}{channel.pk}/delete/", {"post": "yes"})

    assert "has publications or operations" in page and "Disable it instead" in page
    assert Channel.objects.filter(slug="partner-feed").exists()
    assert [event.event_type for event in channel_audit("partner-feed")] == ["channel.created"]


def test_channel_admin__editor__cannot_configure_channels(editor):
    with pytest.raises(PermissionRefused), transaction.atomic():
        check_save_channel(None, values={"slug": "x", "name": "X"}, acting_user=editor)
