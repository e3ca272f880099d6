"""A brief is named by its current headline — its latest revision's title, else its creation title —
on every page that names it, and the brief list's search finds it by either title."""

from __future__ import annotations

import pytest
from django.db import transaction
from pytest_django.asserts import assertContains

from approvals.actions import check_assign_brief
from approvals.models import Notification
from publishing.actions.briefs import check_create_brief
from publishing.selectors.briefs import access_brief, list_briefs
from tests.web import client_for

pytestmark = pytest.mark.django_db

CREATED = "Harbour strike"
HEADLINE = "Dockers stop the port for a second day"


@pytest.fixture
def retitled(brief, revise):
    revise(brief, "Dockers walked out at dawn.")
    revise(brief, "Dockers walked out again.", title=HEADLINE)
    return brief


def test_current_headline__latest_revision_title__else_the_creation_title(editor, retitled):
    unwritten = check_create_brief(title="Tram fares", source_material="", acting_user=editor)

    assert access_brief(retitled.public_id, acting_user=editor).headline == HEADLINE
    assert access_brief(unwritten.public_id, acting_user=editor).headline == "Tram fares"


@pytest.mark.parametrize("query", ["second day", "harbour STRIKE"])
def test_search__matches_the_current_headline_and_the_creation_title(editor, retitled, query):
    found = list(list_briefs(query=query))

    assert [(b.public_id, b.headline) for b in found] == [(retitled.public_id, HEADLINE)]


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/briefs/{id}/",
        "/briefs/{id}/revisions/1/",
        "/briefs/{id}/compare/",
        "/briefs/{id}/source/",
    ],
)
def test_pages__name_the_brief_by_its_current_headline(editor, retitled, path):
    response = client_for(editor).get(path.format(id=retitled.public_id))

    assertContains(response, HEADLINE)


def test_inbox_and_notifications__name_the_brief_by_its_current_headline(editor, approver, retitled):
    with transaction.atomic(durable=True):
        check_assign_brief(retitled.public_id, assignee=str(approver.pk), acting_user=editor)
    client = client_for(approver)

    inbox = client.get("/inbox/")
    notifications = client.get("/notifications/")

    assertContains(inbox, f'<td class="inbox-title">{HEADLINE}</td>', html=False)
    assert Notification.objects.filter(recipient=approver).count() == 2  # submitted, assigned
    assigned = Notification.objects.get(recipient=approver, event=Notification.Event.ASSIGNED)
    assert assigned.message == f"eddie asked you to review {retitled.public_id} “{HEADLINE}”."
    assertContains(notifications, f"<code>{retitled.public_id}</code> {HEADLINE}", count=2, html=False)
