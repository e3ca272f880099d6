"""Error pages in production (DEBUG off): an unknown address, a failing view and a malformed request
answer Galley's own pages in the house look, never Django's bare ones; the 500 page needs nothing
that can fail (no database, no context processor)."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory
from django.views import defaults

from tests.web import client_for

pytestmark = pytest.mark.django_db

STYLESHEET = "publishing/galley.css"


@pytest.fixture(autouse=True)
def _production(settings):
    settings.DEBUG = False


def test_error_page__unknown_url__galley_404_in_the_house_look(editor):
    response = client_for(editor).get("/no/such/page/")

    assert response.status_code == 404
    text = response.content.decode()
    assert STYLESHEET in text
    assert "<h1>Not found</h1>" in text
    assert "There is no page at <code>/no/such/page/</code>." in text
    assert 'href="/">Back to the briefs</a>' in text
    assert "Resolver404" not in text
    assert "The requested resource was not found on this server" not in text  # Django's bare page


def test_error_page__unknown_url_signed_out__offers_sign_in():
    response = Client().get("/no/such/page/")

    assert response.status_code == 404
    assert 'href="/login/">Sign in</a>' in response.content.decode()


def test_error_page__unknown_url_account_with_no_role__says_it_has_no_role(make_user):
    response = client_for(make_user("nora")).get("/no/such/page/")

    assert response.status_code == 404
    text = response.content.decode()
    assert "You have no role in Galley yet" in text
    assert "Back to the briefs" not in text  # every page would refuse it


def test_error_page__view_raises__galley_500_in_the_house_look(settings, editor):
    settings.ROOT_URLCONF = "tests.galley.error_urls"
    client = client_for(editor)
    client.raise_request_exception = False

    response = client.get("/test-failure/")

    assert response.status_code == 500
    text = response.content.decode()
    assert STYLESHEET in text
    assert "Something went wrong on our side" in text
    assert "a bug in a view" not in text and "RuntimeError" not in text
    assert "<h1>Server Error (500)</h1>" not in text  # Django's bare page


def test_error_page__500__renders_without_the_database_or_context_processors(django_assert_num_queries):
    request = RequestFactory().get("/anything/")

    with django_assert_num_queries(0):
        response = defaults.server_error(request)

    assert response.status_code == 500
    assert "Something went wrong on our side" in response.content.decode()


def test_error_page__disallowed_host__galley_400():
    response = Client(HTTP_HOST="evil.example", raise_request_exception=False).get("/")

    assert response.status_code == 400
    text = response.content.decode()
    assert STYLESHEET in text
    assert "Galley could not read this request" in text
    assert "<h1>Bad Request (400)</h1>" not in text


def test_error_page__form_without_its_csrf_token__galley_403_says_what_to_do(editor):
    client = Client(enforce_csrf_checks=True)
    client.force_login(editor)

    response = client.post("/briefs/new/", {"title": "Harbour strike"})

    assert response.status_code == 403
    text = response.content.decode()
    assert STYLESHEET in text
    assert "The form was not accepted" in text and "nothing was saved" in text
    assert "CSRF verification failed" not in text  # Django's bare page
