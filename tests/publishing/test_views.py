"""The editorial web UI through the test client: permissions, conflicts, escaping, dashboard, login, admin."""

from __future__ import annotations

from html import escape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from pytest_django.asserts import assertContains, assertInHTML, assertNotContains

from approvals.actions import check_decide_revision
from approvals.models import Approval
from publishing.actions.briefs import check_create_brief
from publishing.models import Brief, Revision
from publishing.roles import Role
from tests.web import TO_LOGIN, Outcome, assert_outcome, client_for, db_counts, form_values, refused

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
            # brief.created + summary.started, and the pipeline's first step (invariant 5).
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
        {"base_number": "1", "title": "Harbour strike", "body": "Dockers returned at noon."},
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

    assertContains(response, "Title is required.")
    assert form_values(response, containing="source_material")["source_material"] == "Keep <this> text."
    assert db_counts() == before


# --- Edit conflicts ----------------------------------------------------------------------------


def test_edit__conflict__keeps_editors_text_shows_newer_revision_and_writes_nothing(editor, make_user, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    url = reverse("publishing:revision_edit", args=[brief.public_id])
    first, second = client_for(editor), client_for(make_user("edna", Role.EDITOR))
    first_form = form_values(first.get(url), containing="base_number")
    second_form = form_values(second.get(url), containing="base_number")
    assert first_form["base_number"] == second_form["base_number"] == "1"
    assert first.post(url, {**first_form, "body": "Dockers returned at noon."}).status_code == 302
    mine = {
        "title": 'Strike "over" & talks <resume>',
        "body": "Talks resume at 5 o'clock.\nUnions <agree> & sign.",
    }
    before = db_counts()

    response = second.post(url, {**second_form, **mine})

    assert response.status_code == 200
    assertContains(
        response,
        "Revision 2 was saved while you were editing revision 1. Nothing was saved: your text is kept "
        "below; review what changed and save again.",
    )
    content = response.content.decode()
    assert escape(mine["title"]) in content
    assert escape(mine["body"]) in content
    assert "<agree>" not in content
    assert '<span class="add">+Dockers returned at noon.</span>' in content
    assert '<span class="del">-Dockers walked out at dawn.</span>' in content
    assert escape("+++ revision 2 (saved meanwhile by eddie)") in content
    assertInHTML('<input type="hidden" name="base_number" value="2" id="id_base_number">', content)
    resubmit = form_values(response, containing="base_number")
    assert resubmit == {**resubmit, "base_number": "2", **mine}
    assert db_counts() == before
    assert not brief.revisions.filter(number=3).exists()

    response = second.post(url, resubmit)

    assert response["Location"] == f"/briefs/{brief.public_id}/revisions/3/"
    revision = brief.revisions.get(number=3)
    assert revision.payload == mine
    assert revision.author.username == "edna"


def test_edit__same_submission_twice__second_writes_nothing(client, editor, brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    client.force_login(editor)
    url = reverse("publishing:revision_edit", args=[brief.public_id])
    data = {"base_number": "1", "title": "Harbour strike", "body": "Dockers returned at noon."}
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
        {"base_number": base_number, "title": "Harbour strike", "body": "Forged."},
    )

    assertContains(response, message)
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
        assert "<script" not in content, url
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
    return response.content.decode().split("<tbody>")[1].split("</tbody>")[0]


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
    assertNotContains(response, 'class="addlink"')


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
    assert few <= 6


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
