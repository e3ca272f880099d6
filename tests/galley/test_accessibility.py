"""Every form control on every page, as each role sees it, has a name a screen reader can say: a
<label for> naming its id (or a <label> around it), aria-label or aria-labelledby (issue 11, item 8).
Also: the skip link to the main content, and the page a signed-in account with no role gets."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from django.db import transaction
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from approvals.actions import check_decide_revision, check_post_comment
from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.roles import Role
from tests.web import client_for

pytestmark = pytest.mark.django_db

# Inputs that take no typed or chosen value, so need no label (their button text or nothing names them).
UNLABELLED_TYPES = {"hidden", "submit", "button", "image", "reset"}


@dataclass
class Control:
    tag: str
    attrs: dict[str, str]
    inside_label: bool

    def describe(self) -> str:
        shown = " ".join(f'{k}="{v}"' for k, v in self.attrs.items() if k in {"name", "id", "type"})
        return f"<{self.tag} {shown}>"


@dataclass
class _ControlParser(HTMLParser):
    controls: list[Control] = field(default_factory=list)
    label_for: set[str] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)
    open_labels: int = 0

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {name: value or "" for name, value in attrs}
        if attr.get("id"):
            self.ids.add(attr["id"])
        if tag == "label":
            self.open_labels += 1
            if attr.get("for"):
                self.label_for.add(attr["for"])
        elif tag in {"select", "textarea"} or (tag == "input" and attr.get("type", "text") not in UNLABELLED_TYPES):
            self.controls.append(Control(tag, attr, inside_label=self.open_labels > 0))

    def handle_endtag(self, tag: str) -> None:
        if tag == "label" and self.open_labels:
            self.open_labels -= 1


def parse_controls(html: str) -> _ControlParser:
    parser = _ControlParser()
    parser.feed(html)
    parser.close()
    return parser


def unlabelled_controls(html: str) -> list[str]:
    parser = parse_controls(html)
    missing = []
    for control in parser.controls:
        labelled_by = control.attrs.get("aria-labelledby", "").split()
        if (
            control.inside_label
            or control.attrs.get("id", "") in parser.label_for
            or control.attrs.get("aria-label", "").strip()
            or (labelled_by and all(ident in parser.ids for ident in labelled_by))
        ):
            continue
        missing.append(control.describe())
    return missing


def test_unlabelled_controls__finds_a_bare_textarea_and_accepts_the_three_ways_of_naming():
    html = (
        '<label for="a">A</label><input id="a" name="a">'
        '<label>B <select name="b"></select></label>'
        '<input name="c" aria-label="C"><span id="dl">D</span><textarea name="d" aria-labelledby="dl"></textarea>'
        '<input type="hidden" name="e"><button type="submit">Go</button>'
        '<label>F</label><textarea name="f"></textarea>'
    )

    assert unlabelled_controls(html) == ['<textarea name="f">']


@pytest.fixture
def site(make_user):
    """A brief with two revisions, a comment thread, a decision on the first revision and every role."""
    users = {
        "editor": make_user("eddie", Role.EDITOR),
        "approver": make_user("ava", Role.APPROVER),
        "operator": make_user("otto", Role.OPERATOR),
        "no role": make_user("nora"),
    }
    brief = check_create_brief(
        title="Harbour strike", source_material="Dockers walked out at dawn.", acting_user=users["editor"]
    )
    for number, body in enumerate(["Dockers walked out.", "Dockers walked out at dawn."]):
        with transaction.atomic():
            revision, _created = check_create_revision(
                brief.public_id, base_number=number, title="Harbour strike", body=body, acting_user=users["editor"]
            )
        if number == 0:
            with transaction.atomic():
                check_decide_revision(
                    brief.public_id,
                    revision_number=1,
                    payload_hash=revision.payload_hash,
                    decision="changes_requested",
                    comment="Say when.",
                    acting_user=users["approver"],
                )
    with transaction.atomic():
        check_post_comment(brief.public_id, revision_number=2, body="Which union?", acting_user=users["approver"])
    return users, brief


def pages(brief) -> list[str]:
    base = brief.get_absolute_url()
    return [
        "/",
        "/?q=harbour&status=in_review",
        "/briefs/new/",
        base,
        f"{base}edit/",
        f"{base}source/",
        f"{base}revisions/1/",
        f"{base}revisions/2/",
        f"{base}compare/?from=1&to=2",
        "/inbox/",
        "/notifications/",
        "/ops/",
        "/briefs/brief-999999/",
    ]


@pytest.mark.parametrize("role", ["editor", "approver", "operator", "no role"])
def test_every_page__every_form_control_has_a_label(site, role):
    users, brief = site
    client = client_for(users[role])

    seen, controls = {}, 0
    for path in pages(brief):
        response = client.get(path)
        assert response.status_code in {200, 403, 404}, (path, response.status_code)
        seen[path] = unlabelled_controls(response.content.decode())
        controls += len(parse_controls(response.content.decode()).controls)

    assert seen == {path: [] for path in seen}
    # The walk reached the forms: search, compare, edit, assign, comment and decision fields.
    assert controls >= (0 if role == "no role" else 10), controls


def test_sign_in_and_refused_input_pages__every_form_control_has_a_label(site):
    users, brief = site
    sign_in = Client().get("/login/")
    # A NUL in a form's text: the refusal shows what was sent, each field under its own label.
    refused = client_for(users["editor"]).post(f"{brief.get_absolute_url()}assign/", {"assignee": "ava\x00"})

    assert sign_in.status_code == 200
    assertContains(refused, "NUL", status_code=400)
    assert unlabelled_controls(sign_in.content.decode()) == []
    assert unlabelled_controls(refused.content.decode()) == []


@pytest.mark.parametrize("role", ["editor", "no role"])
def test_every_page__skip_link_to_the_main_content(site, role):
    users, _brief = site

    response = client_for(users[role]).get("/")

    assertContains(
        response, '<a class="skip-link" href="#main">Skip to main content</a>', status_code=response.status_code
    )
    assertContains(response, '<main id="main" tabindex="-1">', status_code=response.status_code)


@pytest.mark.parametrize("path", ["/", "/briefs/new/", "/inbox/", "/ops/", "/notifications/"])
def test_no_role__says_who_they_are_who_grants_roles_and_offers_sign_out__no_link_that_loops(
    site, django_user_model, path
):
    users, _brief = site
    django_user_model.objects.create_superuser("root", password="x")
    django_user_model.objects.create_user("staff-viewer", password="x", is_staff=True)

    response = client_for(users["no role"]).get(path)

    assertContains(response, "You have no role in Galley yet", status_code=403)
    assertContains(response, "You are signed in as <strong>nora</strong>", status_code=403)
    assertContains(response, "Ask <strong>root</strong>;", status_code=403)  # staff who cannot change users: not named
    assertContains(response, '<form method="post" action="/logout/">', status_code=403)
    assertContains(response, "Sign out</button>", status_code=403)
    assertNotContains(response, "Back to the briefs", status_code=403)
    assertNotContains(response, 'href="/"', status_code=403)


def test_no_role__no_administrator_account__says_whom_to_ask_instead(site):
    users, _brief = site

    response = client_for(users["no role"]).get("/")

    assertContains(response, "Ask whoever runs Galley for your newsroom", status_code=403)


def test_refused_with_a_role__keeps_the_link_back_to_the_briefs(site):
    users, _brief = site

    response = client_for(users["editor"]).get("/ops/")

    assertContains(response, "Only members of Operators can see the operations page.", status_code=403)
    assertContains(response, "Back to the briefs", status_code=403)
    assertNotContains(response, "no role in Galley", status_code=403)


def test_no_role_staff__admin_page_it_may_not_see__the_same_help(site, django_user_model):
    # Django's own refusal (PermissionDenied, templates/403.html) helps the same way.
    staff = django_user_model.objects.create_user("stan", password="x", is_staff=True)

    response = client_for(staff).get("/admin/publishing/brief/")

    assertContains(response, "You have no role in Galley yet", status_code=403)
    assertContains(response, "You are signed in as <strong>stan</strong>", status_code=403)
    assertContains(response, "Sign out</button>", status_code=403)
