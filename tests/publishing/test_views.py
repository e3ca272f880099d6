"""The editorial web UI through the test client: permissions, conflicts, escaping, dashboard, login, admin."""

from __future__ import annotations

import threading
import uuid
from html import escape
from urllib.parse import urlencode

import httpx
import pytest
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from pytest_django.asserts import assertContains, assertInHTML, assertNotContains

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.actions.briefs import check_create_brief, check_submit_new_brief_form
from publishing.models import Brief, Revision
from publishing.roles import Role
from tests.concurrency import run_together
from tests.web import TO_LOGIN, Outcome, assert_outcome, client_for, db_counts, form_buttons, form_values, refused
from workers.models import AuditEvent, Operation

pytestmark = pytest.mark.django_db


ROLES = ["editor", "approver", "operator", "no_group", "anonymous"]

NO_ROLE_DASHBOARD = refused("You need the Editors, Approvers or Operators role to use Galley.")
NO_ROLE_BRIEFS = refused("You need the Editors, Approvers or Operators role to see briefs.")
NOT_EDITOR_CREATE = refused("Only members of Editors can create briefs.")
NOT_EDITOR_EDIT = refused("Only members of Editors can edit briefs.")
OK = Outcome(200)
# Django's admin sends a signed-in non-staff user to its own login page, which says they are not authorised.
ADMIN_LOGIN = Outcome(302, location="/admin/login/?next={path}")

# action: (method, path template, POST data, outcome per role)
ACTIONS = {
    "dashboard GET": (
        "get",
        "/",
        None,
        {"editor": OK, "approver": OK, "operator": OK, "no_group": NO_ROLE_DASHBOARD, "anonymous": TO_LOGIN},
    ),
    "brief page GET": (
        "get",
        "/briefs/{brief}/",
        None,
        {"editor": OK, "approver": OK, "operator": OK, "no_group": NO_ROLE_BRIEFS, "anonymous": TO_LOGIN},
    ),
    "revision page GET": (
        "get",
        "/briefs/{brief}/revisions/1/",
        None,
        {"editor": OK, "approver": OK, "operator": OK, "no_group": NO_ROLE_BRIEFS, "anonymous": TO_LOGIN},
    ),
    "new-brief GET": (
        "get",
        "/briefs/new/",
        None,
        {
            "editor": OK,
            "approver": NOT_EDITOR_CREATE,
            "operator": NOT_EDITOR_CREATE,
            "no_group": NOT_EDITOR_CREATE,
            "anonymous": TO_LOGIN,
        },
    ),
    "new-brief POST": (
        "post",
        "/briefs/new/",
        {"title": "Ferry timetable", "source_material": "Winter schedule."},
        {
            # brief.created + summary.started, and the pipeline's first step (docs/invariants.md#i5).
            "editor": Outcome(302, location="{new_brief}", writes={"Brief": 1, "AuditEvent": 2, "Operation": 1}),
            "approver": NOT_EDITOR_CREATE,
            "operator": NOT_EDITOR_CREATE,
            "no_group": NOT_EDITOR_CREATE,
            "anonymous": TO_LOGIN,
        },
    ),
    "edit GET": (
        "get",
        "/briefs/{brief}/edit/",
        None,
        {
            "editor": OK,
            "approver": NOT_EDITOR_EDIT,
            "operator": NOT_EDITOR_EDIT,
            "no_group": NOT_EDITOR_EDIT,
            "anonymous": TO_LOGIN,
        },
    ),
    "edit POST": (
        "post",
        "/briefs/{brief}/edit/",
        {"action": "submit", "base_number": "1", "title": "Harbour strike", "body": "Dockers returned at noon."},
        {
            "editor": Outcome(302, location="/briefs/{brief}/revisions/2/", writes={"Revision": 1, "AuditEvent": 1}),
            "approver": NOT_EDITOR_EDIT,
            "operator": NOT_EDITOR_EDIT,
            "no_group": NOT_EDITOR_EDIT,
            "anonymous": TO_LOGIN,
        },
    ),
    "admin index GET": (
        "get",
        "/admin/",
        None,
        {
            "editor": ADMIN_LOGIN,
            "approver": ADMIN_LOGIN,
            "operator": OK,
            "no_group": ADMIN_LOGIN,
            # The admin does its own login (exempt from LoginRequiredMiddleware).
            "anonymous": ADMIN_LOGIN,
        },
    ),
}


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("role", ROLES)
def test_permission_matrix__each_role_each_action(role, action, users, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    method, path_template, data, outcomes = ACTIONS[action]
    path = path_template.format(brief=brief.public_id)
    outcome = outcomes[role]
    if outcome.location:
        outcome = Outcome(
            outcome.status,
            outcome.message,
            outcome.location.replace("{brief}", brief.public_id),
            outcome.writes,
        )
    before = db_counts()

    response = getattr(client_for(users[role]), method)(path, data or {})

    assert_outcome(response, outcome, path=path, before=before)


def test_brief_new__post__creates_brief_and_redirects_to_it(client, editor):
    client.force_login(editor)

    response = client.post("/briefs/new/", {"title": "  Ferry timetable ", "source_material": "Winter."})

    brief = Brief.objects.get()
    assert (brief.title, brief.source_material, brief.author) == ("Ferry timetable", "Winter.", editor)
    assert response["Location"] == brief.get_absolute_url()
    assertContains(client.get(response["Location"]), f"{brief.public_id} created.")


def test_brief_new__blank_title__refused_with_message_and_text_kept(client, editor):
    client.force_login(editor)
    before = db_counts()

    response = client.post("/briefs/new/", {"title": "   ", "source_material": "Keep <this> text."})

    assertContains(response, "Title is required.", status_code=400)
    assert form_values(response, containing="source_material")["source_material"] == "Keep <this> text."
    assert db_counts() == before


# --- Creating a brief is idempotent per rendered form ------------------------------------------------


def _new_brief_form(client: Client) -> dict[str, str]:
    return form_values(client.get("/briefs/new/"), containing="form_token")


def test_new_brief__form_carries_a_one_time_token__each_render_a_new_one(client, editor):
    client.force_login(editor)

    first, second = _new_brief_form(client)["form_token"], _new_brief_form(client)["form_token"]

    assert uuid.UUID(first) and uuid.UUID(second)
    assert first != second


@pytest.mark.django_db(transaction=True)
def test_nothing_lost__identical_create_brief_submissions_make_one_brief(live_server, editor):
    """Five identical submissions of one new-brief form at the same moment, as real HTTP requests
    against a live server (each served on its own thread and database connection): one brief, one
    audit record, one summary run; every answer leads to that brief."""
    session = Client()
    session.force_login(editor)
    cookies = {name: morsel.value for name, morsel in session.cookies.items()}
    with httpx.Client(base_url=live_server.url, cookies=cookies, timeout=30) as browser:
        page = browser.get("/briefs/new/")
        form = form_values(HttpResponse(page.content), containing="title")
        cookies = dict(browser.cookies)
    data = {**form, "title": "Ferry timetable", "source_material": "Winter schedule."}
    barrier = threading.Barrier(5)
    answers: list[httpx.Response | Exception] = []

    def submit() -> None:
        with httpx.Client(base_url=live_server.url, cookies=cookies, timeout=30) as tab:
            barrier.wait(timeout=10)
            try:
                answers.append(tab.post("/briefs/new/", data=data))
            except httpx.HTTPError as exc:
                answers.append(exc)

    threads = [threading.Thread(target=submit) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert Brief.objects.filter(title="Ferry timetable").count() == 1
    brief = Brief.objects.get(title="Ferry timetable")
    assert [getattr(answer, "status_code", answer) for answer in answers] == [302] * 5
    assert {answer.headers["location"] for answer in answers} == {brief.get_absolute_url()}
    assert AuditEvent.objects.filter(event_type="brief.created").count() == 1
    assert brief.summary_runs.count() == 1
    assert brief.form_token == uuid.UUID(form["form_token"])


@pytest.mark.django_db(transaction=True)
def test_nothing_lost__racing_submissions_of_one_form_in_the_action__one_brief_the_rest_read_it(editor):
    token = str(uuid.uuid4())

    outcomes = run_together(
        *[
            lambda: check_submit_new_brief_form(
                token, title="Ferry timetable", source_material="Winter schedule.", acting_user=editor
            )
        ]
        * 5
    )

    assert [kind for kind, _result in outcomes] == ["ok"] * 5, outcomes
    briefs = {result[0].public_id for _kind, result in outcomes}
    assert len(briefs) == 1
    assert sorted(result[1] for _kind, result in outcomes) == [False] * 4 + [True]
    assert Brief.objects.count() == 1
    assert AuditEvent.objects.filter(event_type="brief.created").count() == 1
    assert Operation.objects.count() == 1  # the one summary run's first step


def test_new_brief__form_sent_again__leads_to_the_brief_it_created_and_writes_nothing(client, editor):
    client.force_login(editor)
    data = {**_new_brief_form(client), "title": "Ferry timetable", "source_material": "Winter."}
    first = client.post("/briefs/new/", data)
    before = db_counts()

    again = client.post("/briefs/new/", data)

    assert again["Location"] == first["Location"]
    assert db_counts() == before
    assertContains(client.get(again["Location"]), "was already created from this form; nothing new was saved.")


def test_new_brief__used_form_sent_with_other_text__409_text_kept_and_a_new_token(client, editor):
    client.force_login(editor)
    form = _new_brief_form(client)
    client.post("/briefs/new/", {**form, "title": "Ferry timetable", "source_material": "Winter."})
    brief = Brief.objects.get()
    before = db_counts()

    response = client.post("/briefs/new/", {**form, "title": "Ferry fares", "source_material": "Up <10%>."})

    assertContains(response, f"This form already created {brief.public_id} (“Ferry timetable”)", status_code=409)
    kept = form_values(response, containing="form_token")
    assert (kept["title"], kept["source_material"]) == ("Ferry fares", "Up <10%>.")
    assert kept["form_token"] != form["form_token"]
    assert db_counts() == before

    response = client.post("/briefs/new/", kept)

    assert response.status_code == 302
    assert Brief.objects.filter(title="Ferry fares").count() == 1


def test_new_brief__refused_form__keeps_its_unused_token_so_resending_is_still_one_brief(client, editor):
    client.force_login(editor)
    form = _new_brief_form(client)

    refused = client.post("/briefs/new/", {**form, "title": "", "source_material": "Winter."})

    assert refused.status_code == 400
    assert form_values(refused, containing="form_token")["form_token"] == form["form_token"]


def test_new_brief__damaged_token__400_with_message_text_kept_and_a_new_token(client, editor):
    client.force_login(editor)
    before = db_counts()

    response = client.post("/briefs/new/", {"form_token": "not-a-token", "title": "Ferry", "source_material": "W."})

    assertContains(response, "This form&#x27;s one-time token is damaged", status_code=400)
    kept = form_values(response, containing="form_token")
    assert kept["title"] == "Ferry"
    assert uuid.UUID(kept["form_token"])
    assert db_counts() == before


# --- Text that is not UTF-8 is refused, never saved as "�" ---------------------------------------------


def _multipart(fields: dict[str, bytes]) -> bytes:
    return (
        b"".join(
            b'--B\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n' + value + b"\r\n"
            for name, value in fields.items()
        )
        + b"--B--\r\n"
    )


@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
def test_nothing_lost__new_brief_title_not_utf8__400_names_the_field_and_keeps_the_text(client, editor, encoding):
    client.force_login(editor)
    before = db_counts()
    fields = {"title": b"Caf\xe9 strike", "source_material": b"Dockers <walked> out."}
    if encoding == "urlencoded":
        body, content_type = urlencode(fields).encode(), "application/x-www-form-urlencoded"
    else:
        body, content_type = _multipart(fields), "multipart/form-data; boundary=B"

    response = client.post("/briefs/new/", body, content_type=content_type)

    assertContains(response, "Title: the text sent is not valid UTF-8", status_code=400)
    kept = form_values(response, containing="source_material")
    assert kept["source_material"] == "Dockers <walked> out."
    assert kept["title"] == "Caf\ufffd strike"  # where the bad byte was, for the editor to fix
    assert db_counts() == before
    assert not Brief.objects.exists()


def test_nothing_lost__edit_body_not_utf8__400_and_nothing_saved(client, editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(editor)
    before = db_counts()

    response = client.post(
        reverse("publishing:revision_edit", args=[brief.public_id]),
        b"base_number=1&title=Harbour+strike&body=Docker%ED%A0%80s",  # a lone surrogate, UTF-8 style
        content_type="application/x-www-form-urlencoded",
    )

    assertContains(response, "Body: the text sent is not valid UTF-8", status_code=400)
    assert form_values(response, containing="body")["title"] == "Harbour strike"
    assert db_counts() == before


def test_nothing_lost__source_material_not_utf8__400_and_nothing_saved(client, editor, brief):
    client.force_login(editor)
    before = db_counts()

    response = client.post(
        reverse("publishing:source_edit", args=[brief.public_id]),
        b"source_material=Caf%E9",
        content_type="application/x-www-form-urlencoded",
    )

    assertContains(response, "Source material: the text sent is not valid UTF-8", status_code=400)
    assert db_counts() == before
    brief.refresh_from_db()
    assert brief.source_material == "Dockers walked out at dawn."


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"title": "Harbour\x00strike"}, "Title contains a NUL character, which cannot be stored."),
        ({"source_material": "dawn\x00"}, "Source material contains a NUL character, which cannot be stored."),
        ({"title": "x" * 201}, "Title is 201 characters long; the limit is 200."),
    ],
)
def test_new_brief__unstorable_or_oversized_field__400_with_message_and_text_kept(client, editor, fields, message):
    client.force_login(editor)
    before = db_counts()
    data = {**_new_brief_form(client), "title": "Harbour strike", "source_material": "Keep me.", **fields}

    response = client.post("/briefs/new/", data)

    assertContains(response, message, status_code=400)
    kept = form_values(response, containing="source_material")
    assert kept["form_token"] == data["form_token"]
    assert db_counts() == before


# --- Edit conflicts ----------------------------------------------------------------------------


def test_edit__conflict__keeps_editors_text_shows_newer_revision_and_writes_nothing(editor, make_user, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    url = reverse("publishing:revision_edit", args=[brief.public_id])
    first, second = client_for(editor), client_for(make_user("edna", Role.EDITOR))
    first_form = form_values(first.get(url), containing="base_number")
    second_form = form_values(second.get(url), containing="base_number")
    assert first_form["base_number"] == second_form["base_number"] == "1"
    assert first.post(url, {**first_form, "action": "submit", "body": "Dockers returned at noon."}).status_code == 302
    mine = {
        "title": 'Strike "over" & talks <resume>',
        "body": "Talks resume at 5 o'clock.\nUnions <agree> & sign.",
    }
    before = db_counts()

    response = second.post(url, {**second_form, "action": "submit", **mine})

    assert response.status_code == 409
    assertContains(
        response,
        "Revision 2 was saved while you were editing revision 1. Nothing was saved: your text is kept "
        "below; review what changed, then overwrite it with your version or start again from the newer revision.",
        status_code=409,
    )
    content = response.content.decode()
    assert escape(mine["title"]) in content
    assert escape(mine["body"]) in content
    assert "<agree>" not in content
    # What changed meanwhile, word by word (publishing.diffs).
    assert "Dockers <del>walked out</del><ins>returned</ins> at <del>dawn</del><ins>noon</ins>." in content
    assert "<ins>revision 2 (saved meanwhile by eddie)</ins>" in content
    # The form stays based on what the editor edited; only the explicit overwrite names revision 2.
    assertInHTML('<input type="hidden" name="base_number" value="1" id="id_base_number">', content)
    assert form_buttons(response, containing="base_number") == [("overwrite_number", "2")]
    resubmit = form_values(response, containing="base_number")
    assert resubmit == {**resubmit, "base_number": "1", **mine}
    assert db_counts() == before
    assert not brief.revisions.filter(number=3).exists()

    response = second.post(url, {**resubmit, "overwrite_number": "2"})

    assert response["Location"] == f"/briefs/{brief.public_id}/revisions/3/"
    revision = brief.revisions.get(number=3)
    assert revision.payload == mine
    assert revision.author.username == "edna"


def test_nothing_lost__edit_conflict__saving_the_conflict_form_again_keeps_the_other_tabs_title(editor, brief, revise):
    """Two tabs edit revision 1; one renames the brief. The other's conflict page shows every field of
    the newer revision beside the editor's text, and sending that form again writes nothing: only
    the explicit overwrite does."""
    revise(brief, "Dockers walked out at dawn.")
    url = reverse("publishing:revision_edit", args=[brief.public_id])
    tab_a, tab_b = client_for(editor), client_for(editor)
    form_a = form_values(tab_a.get(url), containing="base_number")
    form_b = form_values(tab_b.get(url), containing="base_number")
    assert tab_a.post(url, {**form_a, "action": "submit", "title": "Harbour strike ends"}).status_code == 302
    conflict = tab_b.post(
        url, {**form_b, "action": "submit", "body": "Dockers walked out at dawn; ships wait offshore."}
    )
    assert conflict.status_code == 409
    fields = conflict.content.decode().split('id="conflict-fields"')[1].split("</table>")[0]
    title_row = fields.split('data-field="title"')[1].split("</tr>")[0]
    body_row = fields.split('data-field="body"')[1].split("</tr>")[0]
    assert "Harbour strike ends" in title_row and "Harbour strike<" in title_row.replace("</div>", "<")
    assert "differs" in title_row
    assert "Dockers walked out at dawn.<" in body_row and "ships wait offshore." in body_row
    before = db_counts()

    again = tab_b.post(url, form_values(conflict, containing="base_number"))

    assert again.status_code == 409
    assert db_counts() == before
    assert brief.revisions.order_by("-number").first().title == "Harbour strike ends"

    overwrite = tab_b.post(url, {**form_values(again, containing="base_number"), "overwrite_number": "2"})

    assert overwrite["Location"] == f"/briefs/{brief.public_id}/revisions/3/"
    assert brief.revisions.get(number=3).payload == {
        "title": "Harbour strike",
        "body": "Dockers walked out at dawn; ships wait offshore.",
    }


def test_edit__overwrite_of_a_revision_no_longer_newest__conflict_again(editor, make_user, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    url = reverse("publishing:revision_edit", args=[brief.public_id])
    mine = client_for(editor)
    form = form_values(mine.get(url), containing="base_number")
    edna = make_user("edna", Role.EDITOR)
    revise(brief, "Theirs, revision 2.", by=edna)
    conflict = mine.post(url, {**form, "action": "submit", "body": "Mine."})
    assert form_buttons(conflict, containing="base_number") == [("overwrite_number", "2")]
    revise(brief, "Theirs, revision 3.", by=edna)
    before = db_counts()

    response = mine.post(url, {**form_values(conflict, containing="base_number"), "overwrite_number": "2"})

    assertContains(response, "Revision 3 was saved while you were editing revision 2.", status_code=409)
    assert form_buttons(response, containing="base_number") == [("overwrite_number", "3")]
    assert form_values(response, containing="body")["body"] == "Mine."
    assert db_counts() == before


def test_edit__same_submission_twice__second_writes_nothing(client, editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(editor)
    url = reverse("publishing:revision_edit", args=[brief.public_id])
    data = {"action": "submit", "base_number": "1", "title": "Harbour strike", "body": "Dockers returned at noon."}
    assert client.post(url, data).status_code == 302
    before = db_counts()

    response = client.post(url, data)

    assert response["Location"] == f"/briefs/{brief.public_id}/revisions/2/"
    assert db_counts() == before
    assertContains(client.get(response["Location"]), "No changes: revision 2 already holds this text.")


@pytest.mark.parametrize(
    ("base_number", "message"),
    [
        ("", "The revision you edited is missing or not a"),  # wording of the end is the action's
        ("7", "Revision 7 does not exist; the latest revision is 1."),
    ],
)
def test_edit__forged_base_number__refused_with_message(client, editor, brief, revise, base_number, message):
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(editor)
    before = db_counts()

    response = client.post(
        reverse("publishing:revision_edit", args=[brief.public_id]),
        {"action": "submit", "base_number": base_number, "title": "Harbour strike", "body": "Forged."},
    )

    assertContains(response, message, status_code=400)
    assert form_values(response, containing="body")["body"] == "Forged."
    assert db_counts() == before


# --- Rendering -----------------------------------------------------------------------------------


def test_payload__markup__rendered_escaped_on_revision_brief_and_dashboard_pages(client, editor, revise):
    brief = check_create_brief(title="<b>Bold</b> claims", source_material="<i>src</i>", acting_user=editor)
    revise(brief, "<script>alert(1)</script>\n<img src=x onerror=alert(2)>", title="<b>Bold</b> claims")
    client.force_login(editor)

    for url in [f"/briefs/{brief.public_id}/revisions/1/", brief.get_absolute_url(), "/"]:
        content = client.get(url).content.decode()
        assert "&lt;b&gt;Bold&lt;/b&gt; claims" in content, url
        assert "<b>Bold" not in content, url
        # The only scripts are the static files of the live regions (htmx and live.js).
        assert content.count("<script") == content.count('<script src="/static/publishing/'), url
        assert "<i>src" not in content, url

    content = client.get(f"/briefs/{brief.public_id}/revisions/1/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content
    assert "<script>alert(1)" not in content
    assert "&lt;img src=x onerror=alert(2)&gt;" in content
    assert "<img" not in content


def test_revision_page__shows_full_payload_hash(client, operator, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    client.force_login(operator)

    response = client.get(revision.get_absolute_url())

    assertInHTML(
        f'<span class="hash" data-testid="payload-hash">{revision.payload_hash}</span>',
        response.content.decode(),
    )


def test_revision_page__unknown_revision__404_with_message(client, editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(editor)

    response = client.get(f"/briefs/{brief.public_id}/revisions/9/")

    assertContains(response, f"{brief.public_id} has no revision 9.", status_code=404)


def test_brief_page__unknown_brief__404_with_message(client, editor):
    client.force_login(editor)

    assertContains(client.get("/briefs/brief-999999/"), "There is no brief brief-999999.", status_code=404)


# --- Dashboard -----------------------------------------------------------------------------------


def rows(response) -> str:
    return response.content.decode().split('<tbody id="brief-rows"')[1].split(">", 1)[1].split("</tbody>")[0]


def test_dashboard__25_briefs__paginated_20_then_5(client, editor):
    briefs = [check_create_brief(title=f"Story {n}", source_material="", acting_user=editor) for n in range(25)]
    client.force_login(editor)

    first, second = client.get("/"), client.get("/?page=2")

    assert rows(first).count("<tr>") == 20
    assert rows(second).count("<tr>") == 5
    assertContains(first, "Page 1 of 2")
    assertContains(second, "Page 2 of 2")
    assertContains(first, 'href="?page=2"')
    for brief in briefs[:5]:  # the oldest come last
        assert f"<code>{brief.public_id}</code>" in rows(second)
        assert f"<code>{brief.public_id}</code>" not in rows(first)


def test_dashboard__search__by_title_and_by_public_id(client, editor):
    strike = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    dredging = check_create_brief(title="Harbour dredging", source_material="", acting_user=editor)
    fares = check_create_brief(title="Rail fares rise", source_material="", acting_user=editor)
    client.force_login(editor)

    by_title = rows(client.get("/", {"q": "harbour"}))
    by_id = rows(client.get("/", {"q": fares.public_id.upper()}))
    nothing = client.get("/", {"q": "volcano"})

    assert strike.public_id in by_title and dredging.public_id in by_title
    assert fares.public_id not in by_title
    assert fares.public_id in by_id
    assert strike.public_id not in by_id and dredging.public_id not in by_id
    assertContains(nothing, "No briefs match these filters.")


def test_dashboard__status_filter__lists_only_that_status(client, editor, approver, revise):
    approved = check_create_brief(title="Approved one", source_material="", acting_user=editor)
    revision = revise(approved, "Ready.")
    check_decide_revision(
        approved.public_id,
        revision_number=revision.number,
        payload_hash=revision.payload_hash,
        decision=Approval.Decision.APPROVED,
        acting_user=approver,
    )
    in_review = check_create_brief(title="In review one", source_material="", acting_user=editor)
    revise(in_review, "Draft.")
    drafting = check_create_brief(title="Drafting one", source_material="", acting_user=editor)
    client.force_login(editor)

    listed = {
        status: rows(client.get("/", {"status": status}))
        for status in [Brief.Status.APPROVED, Brief.Status.IN_REVIEW, Brief.Status.DRAFTING]
    }

    assert approved.public_id in listed["approved"]
    assert in_review.public_id not in listed["approved"] and drafting.public_id not in listed["approved"]
    assert in_review.public_id in listed["in_review"] and approved.public_id not in listed["in_review"]
    assert drafting.public_id in listed["drafting"] and approved.public_id not in listed["drafting"]
    assert "Approved</span>" in listed["approved"]


def test_dashboard__anonymous__redirected_to_login_with_next(client):
    response = client.get("/", {"q": "harbour"})

    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/%3Fq%3Dharbour"


# --- Login and logout ----------------------------------------------------------------------------


def test_login__page_renders_for_anonymous(client):
    response = client.get("/login/")

    assertContains(response, "Sign in to Galley")
    assert {"username", "password", "csrfmiddlewaretoken"} <= set(form_values(response, containing="password"))


def test_login__demo_credentials__redirect_to_dashboard(make_user):
    make_user("editor", Role.EDITOR, password="editor-demo-pass")
    browser = Client(enforce_csrf_checks=True)
    form = form_values(browser.get("/login/"), containing="password")

    response = browser.post("/login/", {**form, "username": "editor", "password": "editor-demo-pass"})

    assert response.status_code == 302
    assert response["Location"] == "/"
    assertContains(browser.get("/"), "<h1>Briefs</h1>", html=True)


def test_login__with_next__returns_to_the_page_asked_for(editor, brief):
    browser = Client(enforce_csrf_checks=True)
    page = browser.get(browser.get(brief.get_absolute_url())["Location"])
    form = form_values(page, containing="password")
    assert form["next"] == brief.get_absolute_url()

    response = browser.post("/login/", {**form, "username": "eddie", "password": "correct-horse-battery"})

    assert response["Location"] == brief.get_absolute_url()


def test_login__wrong_password__refused_with_message(client, editor):
    response = client.post("/login/", {"username": "eddie", "password": "wrong"})

    assertContains(response, "Please enter a correct username and password.")
    assert "_auth_user_id" not in client.session


def test_logout__is_post_only(client, editor):
    client.force_login(editor)

    assert client.get("/logout/").status_code == 405
    assert client.get("/").status_code == 200

    response = client.post("/logout/")

    assert response["Location"] == "/login/"
    assert client.get("/")["Location"] == "/login/?next=/"


# --- Admin ---------------------------------------------------------------------------------------


@pytest.fixture
def staff_operator(operator):
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    return operator


@pytest.mark.parametrize(
    "changelist",
    [
        "/admin/publishing/brief/",
        "/admin/publishing/revision/",
        "/admin/approvals/approval/",
        "/admin/workers/auditevent/",
    ],
)
def test_admin__operator__opens_changelists(client, staff_operator, approver, brief, revise, changelist):
    revision = revise(brief, "Dockers walked out at dawn.")
    check_decide_revision(
        brief.public_id,
        revision_number=1,
        payload_hash=revision.payload_hash,
        decision=Approval.Decision.APPROVED,
        acting_user=approver,
    )
    client.force_login(staff_operator)

    response = client.get(changelist)

    assertContains(response, brief.public_id)
    # Read-only records: no add link for them (channels, which operators configure, have one in the sidebar).
    assertNotContains(response, f'href="{changelist}add/"')


def test_admin__revision_change_page__read_only_and_post_refused(client, staff_operator, brief, revise):
    revision = revise(brief, "Dockers walked out at dawn.")
    url = f"/admin/publishing/revision/{revision.pk}/change/"
    client.force_login(staff_operator)

    page = client.get(url)

    assertContains(page, "View revision")
    assertContains(page, revision.payload_hash)
    assertNotContains(page, 'name="_save"')
    assertNotContains(page, 'name="_continue"')
    before = db_counts()

    response = client.post(url, {"number": "7", "payload_hash": "0" * 64, "_save": "Save"})

    assert response.status_code == 403
    assert db_counts() == before
    assert Revision.objects.get(pk=revision.pk).payload_hash == revision.payload_hash


def test_admin__operator_not_staff__sent_to_admin_login(client, operator):
    client.force_login(operator)

    assert client.get("/admin/")["Location"] == "/admin/login/?next=/admin/"


# --- query counts on the hot pages: pinned, and independent of how much there is to show ---------------


def _queries_for(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200
    return len(captured)


def test_query_count__dashboard__pinned_and_independent_of_brief_count(editor, django_assert_num_queries):
    client = client_for(editor)
    check_create_brief(title="Brief 1", source_material="", acting_user=editor)
    few = _queries_for(client, "/")
    for number in range(2, 26):
        check_create_brief(title=f"Brief {number}", source_material="", acting_user=editor)
    with django_assert_num_queries(few):
        client.get("/")
    assert few <= 7  # with the one statement of the approved briefs' badges


def test_query_count__brief_and_revision_pages__independent_of_revisions_and_decisions(
    brief, revise, editor, make_user
):
    client = client_for(editor)

    def revise_and_decide(number: int, *, decisions: int) -> None:
        revision = revise(brief, f"Revision {number}: the strike goes on.")
        for index in range(decisions):
            check_decide_revision(
                brief.public_id,
                revision_number=revision.number,
                payload_hash=revision.payload_hash,
                decision=Approval.Decision.CHANGES_REQUESTED,
                acting_user=make_user(f"approver-{number}-{index}", Role.APPROVER),
            )

    for number in (1, 2):
        revise_and_decide(number, decisions=1)
    brief_page = _queries_for(client, f"/briefs/{brief.public_id}/")
    revision_page = _queries_for(client, f"/briefs/{brief.public_id}/revisions/2/")
    for number in range(3, 9):
        revise_and_decide(number, decisions=3)
    assert _queries_for(client, f"/briefs/{brief.public_id}/") == brief_page
    assert _queries_for(client, f"/briefs/{brief.public_id}/revisions/8/") == revision_page


# --- bad input: a NUL character in the address is a 400 that says so, never a 500 -----------------------


@pytest.mark.parametrize(
    "path",
    [
        "/briefs/%00/",
        "/briefs/brief-001%00/",
        "/briefs/brief-001/revisions/1/?x=%00",
        "/?q=%00",
        "/?status=draft%00",
        "/admin/workers/operation/?status__exact=%00",
        "/admin/workers/operation/?q%00=x",
    ],
)
def test_bad_input__nul_in_address__400_with_a_clear_message(operator, brief, path):
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    response = client_for(operator).get(path)
    assert response.status_code == 400
    assertContains(response, "The address contains a NUL character (%00)", status_code=400)
