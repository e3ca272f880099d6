"""Desks: operators define them in the Django admin, every change audited with the required groups old
and new; there is always exactly one default desk; a desk with briefs is never deleted; editors choose a
new brief's desk on its form, and the brief page names it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from pytest_django.asserts import assertContains, assertNotContains

from publishing.actions.briefs import check_create_brief
from publishing.actions.desks import check_delete_desk, check_save_desk
from publishing.errors import InvalidInput, PermissionRefused
from publishing.models import Brief, Desk
from publishing.roles import LEGAL_GROUP
from tests.web import client_for, db_counts, form_values
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db

DESKS = "/admin/publishing/desk/"


def desk_form(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {"slug": "politics", "name": "Politics", "approvals_required": "2", "required_groups": []}
    data.update(overrides)
    return {name: value for name, value in data.items() if value != "off"}


def desk_audit(slug: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject_type="desk", subject_id=slug).order_by("id"))


def make_desk(operator, **values: object) -> Desk:
    with transaction.atomic():
        return check_save_desk(None, values={"slug": "politics", "name": "Politics", **values}, acting_user=operator)


def test_desk_admin__create_then_change__each_audited_with_the_required_groups(operator_client, operator):
    legal = Group.objects.get(name=LEGAL_GROUP)

    created = operator_client.post(f"{DESKS}add/", desk_form(required_groups=[legal.pk]))
    assert created.status_code == 302, created.content.decode()
    desk = Desk.objects.get(slug="politics")
    changed = operator_client.post(
        f"{DESKS}{desk.pk}/change/", desk_form(name="Politics & power", approvals_required="3", required_groups=[])
    )
    assert changed.status_code == 302, changed.content.decode()

    creation, change = desk_audit("politics")
    assert (creation.event_type, change.event_type) == ("desk.created", "desk.changed")
    assert {creation.actor_id, change.actor_id} == {operator.pk}
    assert creation.old_state is None
    assert creation.new_state == {
        "slug": "politics",
        "name": "Politics",
        "approvals_required": 2,
        "is_default": False,
        "required_groups": ["Legal"],
    }
    assert change.old_state == creation.new_state
    assert change.new_state == {
        **creation.new_state,
        "name": "Politics & power",
        "approvals_required": 3,
        "required_groups": [],
    }
    desk.refresh_from_db()
    assert (desk.name, desk.approvals_required, list(desk.required_groups.all())) == ("Politics & power", 3, [])


def test_desk_admin__saving_what_is_stored__writes_nothing(operator_client, operator):
    desk = make_desk(operator, approvals_required=2)

    response = operator_client.post(f"{DESKS}{desk.pk}/change/", desk_form())

    assert response.status_code == 302
    assert [event.event_type for event in desk_audit("politics")] == ["desk.created"]


def test_desk_admin__making_a_desk_default__takes_the_flag_from_the_default_desk(operator_client, operator):
    desk = make_desk(operator)

    response = operator_client.post(f"{DESKS}{desk.pk}/change/", desk_form(is_default="on"))

    assert response.status_code == 302, response.content.decode()
    assert list(Desk.objects.filter(is_default=True).values_list("slug", flat=True)) == ["politics"]
    (general,) = desk_audit("general")
    assert (general.event_type, general.old_state["is_default"], general.new_state["is_default"]) == (
        "desk.changed",
        True,
        False,
    )
    assert desk_audit("politics")[-1].new_state["is_default"] is True


def test_desk_admin__unticking_the_default_desk__refused_with_message_nothing_written(operator_client):
    general = Desk.objects.get(is_default=True)
    before = AuditEvent.objects.count()

    response = operator_client.post(
        f"{DESKS}{general.pk}/change/", {"name": "General", "approvals_required": "1", "required_groups": []}
    )

    assertContains(response, "make another desk the default instead")
    general.refresh_from_db()
    assert general.is_default and AuditEvent.objects.count() == before


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"approvals_required": "0"}, "Ensure this value is greater than or equal to 1."),
        ({"approvals_required": "11"}, "Ensure this value is less than or equal to 10."),
        ({"slug": "Politics_Desk"}, "lowercase letters and digits, joined by single hyphens"),
        ({"name": "General"}, "Another desk is called &#x27;General&#x27;"),
        ({"slug": "general"}, "There is a desk &#x27;general&#x27; already"),
    ],
    ids=["no-approval", "eleven-approvals", "bad-slug", "name-taken", "slug-taken"],
)
def test_desk_admin__bad_values__refused_with_message_nothing_written(operator_client, overrides, message):
    response = operator_client.post(f"{DESKS}add/", desk_form(**overrides))

    assertContains(response, message)
    assert list(Desk.objects.values_list("slug", flat=True)) == ["general"]
    assert not AuditEvent.objects.filter(subject_type="desk").exists()


def test_desk_admin__desk_with_briefs__not_deleted_with_message(operator_client, operator, editor):
    desk = make_desk(operator)
    brief = check_create_brief(title="Budget vote", source_material="", desk="politics", acting_user=editor)

    page = operator_client.get(f"{DESKS}{desk.pk}/delete/")
    operator_client.post(f"{DESKS}{desk.pk}/delete/", {"post": "yes"})

    assertContains(page, "has 1 brief(s), which keep the desk they were created on")
    assert Desk.objects.filter(pk=desk.pk).exists() and Brief.objects.get(pk=brief.pk).desk == desk
    with pytest.raises(InvalidInput, match="it cannot be deleted"):
        check_delete_desk(desk.pk, acting_user=operator)


def test_desk_admin__desk_without_briefs__deleted_audited__default_desk_offers_no_delete(operator_client, operator):
    desk = make_desk(operator)
    general = Desk.objects.get(is_default=True)

    deleted = operator_client.post(f"{DESKS}{desk.pk}/delete/", {"post": "yes"})
    default_page = operator_client.get(f"{DESKS}{general.pk}/delete/")

    assert deleted.status_code == 302
    assert not Desk.objects.filter(slug="politics").exists()
    deletion = desk_audit("politics")[-1]
    assert (deletion.event_type, deletion.old_state["slug"], deletion.new_state) == ("desk.deleted", "politics", None)
    assert default_page.status_code == 403
    assert Desk.objects.filter(pk=general.pk).exists()


def test_save_desk__not_an_operator__refused_nothing_written(editor, approver):
    for user in (editor, approver):
        with pytest.raises(PermissionRefused, match="Only members of Operators can configure desks"):
            check_save_desk(None, values={"slug": "politics", "name": "Politics"}, acting_user=user)
    assert not Desk.objects.filter(slug="politics").exists()


def test_save_desk__unknown_group__refused_naming_it(operator):
    with pytest.raises(InvalidInput, match="No group is called 'Lawyers'"):
        make_desk(operator, required_groups=["Lawyers"])
    assert not Desk.objects.filter(slug="politics").exists()


# --- The new-brief form's desk --------------------------------------------------------------------------


def test_brief_new__one_desk__no_choice_shown_brief_goes_to_the_default_desk(editor):
    client = client_for(editor)

    page = client.get("/briefs/new/")
    client.post("/briefs/new/", {**form_values(page, containing="form_token"), "title": "Ferry timetable"})

    assertNotContains(page, 'name="desk"')
    assert Brief.objects.get().desk.slug == "general"


def test_brief_new__several_desks__default_preselected__chosen_desk_kept_and_shown(editor, operator):
    make_desk(operator)
    client = client_for(editor)

    page = client.get("/briefs/new/")
    values = form_values(page, containing="form_token")
    response = client.post("/briefs/new/", {**values, "title": "Budget vote", "desk": "politics"})

    assertContains(page, '<option value="general" selected>General</option>', html=True)
    brief = Brief.objects.get()
    assert brief.desk.slug == "politics"
    assert AuditEvent.objects.get(event_type="brief.created").new_state["desk"] == "politics"
    assertContains(client.get(response["Location"]), "Politics desk")


def test_brief_new__unknown_desk__refused_naming_the_desks_text_kept_nothing_written(editor, operator):
    make_desk(operator)
    client = client_for(editor)
    values = form_values(client.get("/briefs/new/"), containing="form_token")
    before = db_counts()

    response = client.post(
        "/briefs/new/", {**values, "title": "Budget vote", "source_material": "Keep this.", "desk": "sport"}
    )

    assertContains(response, "No desk is called &#x27;sport&#x27;; choose among general, politics.", status_code=400)
    assert form_values(response, containing="source_material")["source_material"] == "Keep this."
    assert db_counts() == before
