"""`manage.py seed_demo`: one demo user per role; the operator, whose work is in the Django admin, is staff
(the admin lets in staff accounts only), the others are not, whatever an earlier run left."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from publishing.credentials import unseal
from publishing.models import Channel, Desk
from publishing.roles import LEGAL_GROUP, Role, has_role
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db


def seed(tmp_path) -> str:
    out = StringIO()
    call_command("seed_demo", credentials_file=str(tmp_path / "demo.json"), stdout=out)
    return out.getvalue()


def test_seed_demo__operator_is_staff_for_the_admin__others_not(tmp_path, client):
    out = seed(tmp_path)

    operator = User.objects.get(username="operator")
    assert has_role(operator, Role.OPERATOR) and operator.is_staff
    assert not User.objects.get(username="editor").is_staff
    assert not User.objects.get(username="approver").is_staff
    assert "Operators (staff: may open /admin/)" in out
    client.force_login(operator)
    assert client.get("/admin/publishing/publicationproblem/").status_code == 200


def test_seed_demo__operator_made_without_staff__made_staff_on_the_next_run(tmp_path, client):
    seed(tmp_path)
    User.objects.filter(username="operator").update(is_staff=False)
    client.force_login(User.objects.get(username="operator"))
    assert client.get("/admin/").status_code == 302  # to the admin's sign-in: not staff

    seed(tmp_path)

    assert User.objects.get(username="operator").is_staff
    assert client.get("/admin/").status_code == 200


def test_seed_demo__partner_feed__a_default_reference_channel_made_once__audited_without_its_token(tmp_path):
    def seed_with_partner() -> None:
        call_command(
            "seed_demo",
            credentials_file=str(tmp_path / "demo.json"),
            partner_feed_url="http://127.0.0.1:8002",
            partner_feed_token="partner-token",
            stdout=StringIO(),
        )

    seed_with_partner()
    seed_with_partner()

    channel = Channel.objects.get(slug="partner-feed")
    assert (channel.name, channel.kind, channel.base_url) == ("Partner feed", "reference", "http://127.0.0.1:8002")
    assert channel.enabled and channel.is_default and not channel.from_settings
    assert unseal(channel.secret_sealed) == "partner-token"
    audit = AuditEvent.objects.filter(subject_type="channel", subject_id="partner-feed")
    assert [event.event_type for event in audit] == ["channel.created"]  # the second run changed nothing
    assert "partner-token" not in str(audit[0].new_state)


def test_seed_demo__partner_feed_token_from_the_environment__kept_as_given_even_with_a_leading_dash(
    tmp_path, monkeypatch
):
    """`make run` hands the token over in the environment (off `ps`); a generated token may begin with "-",
    which argv would have taken for an option (the launcher's seed_demo exited 2 on one)."""
    monkeypatch.setenv("GALLEY_PARTNER_FEED_TOKEN", "-Zq1token")
    call_command(
        "seed_demo",
        "--partner-feed-url",
        "http://127.0.0.1:8002",
        credentials_file=str(tmp_path / "demo.json"),
        stdout=StringIO(),
    )

    assert unseal(Channel.objects.get(slug="partner-feed").secret_sealed) == "-Zq1token"


def test_seed_demo__politics_desk_and_its_reviewers__made_once_audited(tmp_path):
    seed(tmp_path)
    seed(tmp_path)

    politics = Desk.objects.get(slug="politics")
    assert politics.approvals_required == 2 and not politics.is_default
    assert list(politics.required_groups.values_list("name", flat=True)) == [LEGAL_GROUP]
    legal = User.objects.get(username="legal")
    assert has_role(legal, Role.APPROVER) and legal.groups.filter(name=LEGAL_GROUP).exists()
    assert has_role(User.objects.get(username="approver2"), Role.APPROVER)
    assert [e.event_type for e in AuditEvent.objects.filter(subject_type="desk", subject_id="politics")] == [
        "desk.created"
    ]
