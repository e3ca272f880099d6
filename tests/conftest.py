"""Shared fixtures. Setup goes through the real actions, never through model constructors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group
from django.db import transaction

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.models import Brief, Revision
from publishing.roles import LEGAL_GROUP, Role, ensure_role_groups
from tests.browser import browser  # noqa: F401  (a fixture, for the browser tests of every app)
from tests.reference_target import add_channel, start_target, target  # noqa: F401  (fixtures, for every app)
from tests.schedules import schedule  # noqa: F401  (a fixture, for every app)
from workers.drain import shutdown_pool

# What makes a test an integration test (pyproject's `integration` marker): the acceptance and WordPress
# markers, the database (every pytest-django database fixture stands on django_db_setup, and live_server
# brings transactional_db) or a real browser. A test that starts a process of its own, which no fixture
# tells, carries @pytest.mark.integration itself. A run that selects none starts no PostgreSQL
# (galley.testing.embedded_database).
INTEGRATION_MARKERS = ("django_db", "acceptance", "wordpress")
INTEGRATION_FIXTURES = ("django_db_setup", "live_server", "browser")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks `integration` every test that needs the database or starts processes, so that
    `pytest -m "not integration"` (make test-unit) runs the unit layer alone, without PostgreSQL."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if any(item.get_closest_marker(name) for name in INTEGRATION_MARKERS) or any(
            name in fixtures for name in INTEGRATION_FIXTURES
        ):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings):
    """Tests create and sign in many users; the production hasher's slowness buys nothing here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _worker_pool_closed():
    """Worker threads keep database connections; close them so the test database can be dropped."""
    yield
    shutdown_pool()


@pytest.fixture
def make_user(django_user_model) -> Callable[..., object]:
    def make(username: str, *roles: Role, password: str = "correct-horse-battery") -> object:
        ensure_role_groups()
        user = django_user_model.objects.create_user(username=username, password=password)
        for role in roles:
            user.groups.add(Group.objects.get(name=role.value))
        return user

    return make


@pytest.fixture
def editor(make_user):
    return make_user("eddie", Role.EDITOR)


@pytest.fixture
def approver(make_user):
    return make_user("ava", Role.APPROVER)


@pytest.fixture
def approver2(make_user):
    """A second approver, for policies and races that need two."""
    return make_user("abe", Role.APPROVER)


@pytest.fixture
def operator(make_user):
    return make_user("otto", Role.OPERATOR)


@pytest.fixture
def legal(make_user):
    """An approver in Legal, who approves flagged briefs and alone lifts their flag."""
    user = make_user("lena", Role.APPROVER)
    user.groups.add(Group.objects.get(name=LEGAL_GROUP))
    return user


@pytest.fixture
def brief(editor) -> Brief:
    return check_create_brief(title="Harbour strike", source_material="Dockers walked out at dawn.", acting_user=editor)


@pytest.fixture
def revise(editor) -> Callable[..., Revision]:
    """revise(brief, body, base=None): the next revision of `brief`, written by `by` (the editor by default)."""

    def make(brief: Brief, body: str, *, base: int | None = None, title: str = "Harbour strike", by=None) -> Revision:
        if base is None:
            latest = brief.revisions.order_by("-number").first()
            base = latest.number if latest else 0
        with transaction.atomic():
            revision, _created = check_create_revision(
                brief.public_id, base_number=base, title=title, body=body, acting_user=by or editor
            )
        return revision

    return make


@pytest.fixture
def users(editor, approver, operator, make_user):
    """One user per role; the operator is staff, as `seed_demo` makes them."""
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    return {
        "editor": editor,
        "approver": approver,
        "operator": operator,
        "no_group": make_user("nobody"),
        "anonymous": None,
    }


@pytest.fixture
def fast_retries(settings):
    """Retries a test does not look at happen at once; a test that looks at one sets its own backoff."""
    settings.GALLEY_BACKOFF_BASE_SECONDS = 0.01
    settings.GALLEY_BACKOFF_MAX_SECONDS = 0.05
