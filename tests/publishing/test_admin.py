"""API tokens in Django admin: operators see who holds which token (never its secret or hash)
and revoke them; the revocation is audited, idempotent, and the API answers 401 to the token.
Revisions in Django admin: the story field by field, read-only."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from django.test import Client

from publishing.actions.api_tokens import check_revoke_api_token
from publishing.actions.briefs import check_create_brief
from publishing.errors import PermissionRefused
from publishing.models import ApiToken
from publishing.roles import Role
from tests.publishing.api.support import ApiClient, problem, token_for
from tests.publishing.test_story_pipeline import STORY, write
from tests.workers.test_admin import audit, messages_of, run_action

TOKENS = "/admin/publishing/apitoken/"

pytestmark = pytest.mark.django_db


def test_token_admin__operator_sees_owner_name_prefix_created_revoked__never_the_secret_or_hash(
    operator_client, editor
):
    secret = token_for(editor)
    token = ApiToken.objects.get(user=editor)

    listing = operator_client.get(TOKENS)
    page = operator_client.get(f"{TOKENS}{token.pk}/change/")

    assert listing.status_code == page.status_code == 200
    for response in (listing, page):
        html = response.content.decode()
        assert token.prefix in html and "tests" in html and editor.username in html
        assert secret not in html and token.token_hash not in html
    assert 'value="revoke"' in listing.content.decode()
    for column in ("Prefix", "Name", "User", "Created at", "Revoked at"):
        assert column in listing.content.decode()
    # Read-only: no add, no delete (a token is revoked, and its row stays).
    assert operator_client.get(f"{TOKENS}add/").status_code == 403
    assert operator_client.get(f"{TOKENS}{token.pk}/delete/").status_code == 403


def test_token_admin__revoke__audited_with_actor__api_answers_401_problem__second_run_is_a_no_op(
    operator_client, operator, editor
):
    secret = token_for(editor)
    api = ApiClient(secret)
    assert api.get("/briefs").status_code == 200
    token = ApiToken.objects.get(user=editor)

    response = run_action(operator_client, TOKENS, "revoke", [token])

    assert messages_of(response) == ["1 token(s) revoked."]
    token.refresh_from_db()
    assert token.revoked_at is not None
    (event,) = audit("api_token.revoked")
    assert (event.actor, event.subject_type, event.subject_id) == (operator, "user", editor.username)
    assert event.new_state == {"token": token.prefix, "name": "tests", "revoked": True}
    assert secret not in str(event.old_state) + str(event.new_state)
    refused = api.get("/briefs")
    assert refused.status_code == 401
    assert problem(refused)["type"] == "urn:galley:problem:unauthenticated"
    assert api.post("/briefs", {"title": "Harbour strike"}).status_code == 401

    first_revoked_at = token.revoked_at
    again = run_action(operator_client, TOKENS, "revoke", [token])

    assert messages_of(again) == ["0 token(s) revoked.", f"Already revoked, left as they were: {token.prefix}… (tests)"]
    token.refresh_from_db()
    assert token.revoked_at == first_revoked_at
    assert len(audit("api_token.revoked")) == 1


def test_token_admin__revoke_one__other_tokens_of_the_user_still_work(operator_client, editor):
    kept, gone = token_for(editor), token_for(editor)
    run_action(operator_client, TOKENS, "revoke", list(ApiToken.objects.filter(prefix=gone[:13])))
    assert ApiClient(kept).get("/briefs").status_code == 200
    assert ApiClient(gone).get("/briefs").status_code == 401


@pytest.mark.parametrize("role", [Role.EDITOR, Role.APPROVER])
def test_token_admin__staff_without_operators_role__cannot_see_or_revoke(make_user, editor, role):
    staff = make_user("staffer", role)
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(staff)
    token_for(editor)
    assert client.get(TOKENS).status_code == 403
    client.post(TOKENS, {"action": "revoke", "_selected_action": [str(ApiToken.objects.get().pk)]})
    assert ApiToken.objects.get().revoked_at is None
    assert not audit("api_token.revoked")


def test_token_admin__superuser_outside_operators__revoke_not_offered_and_refused(django_user_model, editor):
    root = django_user_model.objects.create_superuser("root", password="correct-horse-battery")
    client = Client()
    client.force_login(root)
    token_for(editor)
    token = ApiToken.objects.get()

    listing = client.get(TOKENS)
    assert listing.status_code == 200 and 'value="revoke"' not in listing.content.decode()
    client.post(TOKENS, {"action": "revoke", "_selected_action": [str(token.pk)], "index": "0"})
    token.refresh_from_db()
    assert token.revoked_at is None
    with pytest.raises(PermissionRefused):
        check_revoke_api_token(token, acting_user=root)


def test_revision_admin__the_story_field_by_field__read_only__markup_escaped(operator_client, editor):
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    revision = write(brief, {**STORY, "standfirst": "Ships wait <script>alert(1)</script>"}, by=editor)

    page = operator_client.get(f"/admin/publishing/revision/{revision.pk}/change/")

    assert page.status_code == 200
    html = page.content.decode()
    for shown in [
        "Dockers walk out over pay",
        "Dockers walked out at **dawn**",
        "Ana Lopes",
        "Business",
        "port, strike",
    ]:
        assert shown in html
    assert "Ships wait &lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    form = html.split('id="revision_form"', 1)[1]
    assert "<textarea" not in form and all('type="hidden"' in tag for tag in re.findall(r"<input[^>]*>", form))
    listing = operator_client.get("/admin/publishing/revision/").content.decode()
    assert "Dockers walk out" in listing
