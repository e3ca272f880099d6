"""Fixtures for acceptance tests, which start real processes; and the newsroom, one stack started as
`make run` starts it, shared by the scenarios of a module (tests/acceptance/test_newsroom.py,
tests/acceptance/test_editor_day.py), with what they do in it through a browser."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from publishing.roles import Role
from tests.acceptance.test_make_run import PUBLISHED_DEADLINE_SECONDS, RunningGalley, make_run
from tests.browser import PASSWORD, TIMEOUT_MS
from tests.processes import BASE_DIR, Child, kill, manage, process_env

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
APPROVER_B = "bea"
APPROVER_B_EMAIL = "bea@galley.localhost"


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """spawn(name, *manage_args, env=...): a manage.py child process whose output goes to tmp_path/<name>.log.

    Whatever is still running at the end, even a SIGSTOPped worker, is killed with its process group.
    """
    children: list[Child] = []

    def start(name: str, *args: str, env: dict[str, str]) -> Child:
        log = tmp_path / f"{name}.log"
        children.append(Child(name, manage(*args, env=env, log=log), log))
        return children[-1]

    yield start
    for child in children:
        if child.process.poll() is None:
            kill(child.process)  # SIGKILL ends a stopped process too


@dataclass
class Newsroom:
    galley: RunningGalley
    passwords: dict[str, str]
    # What the scenarios hand on to each other: the brief under review and its address.
    public_id: str = ""

    @property
    def brief_url(self) -> str:
        return f"{self.galley.base_url}/briefs/{self.public_id}/"

    def revision_url(self, number: int) -> str:
        return f"{self.brief_url}revisions/{number}/"


def add_approver_b(galley: RunningGalley) -> None:
    """A second approver, with an email address: written with manage.py into the running stack's
    database, which any manage.py command reaches while `make run` runs (README.md#two-commands)."""
    script = (
        "from django.contrib.auth.models import Group, User\n"
        f"bea = User.objects.create_user({APPROVER_B!r}, email={APPROVER_B_EMAIL!r}, password={PASSWORD!r})\n"
        f"bea.groups.add(Group.objects.get(name={Role.APPROVER.value!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=BASE_DIR,
        env=process_env(DATABASE_URL="", GALLEY_VAR_DIR=str(galley.var_dir)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def newsroom() -> Iterator[Newsroom]:
    # A folder of its own rather than pytest's: pytest prunes its older numbered folders, and another
    # pytest session on the machine may prune this one while the scenarios still run in it.
    var_dir = Path(tempfile.mkdtemp(prefix="galley-newsroom-"))
    try:
        with make_run(var_dir) as galley:
            add_approver_b(galley)
            yield Newsroom(galley, passwords={**galley.credentials(), APPROVER_B: PASSWORD})
        assert galley.process.returncode == 0, galley.output
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


def sign_in(browser: Browser, newsroom: Newsroom, username: str, *, viewport: dict[str, int] = DESKTOP) -> Page:
    """A fresh browser context (its own cookies) at `viewport`, signed in through the launcher's login form."""
    base_url = newsroom.galley.base_url
    page = browser.new_context(viewport=viewport).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{base_url}/")
    expect(page).to_have_url(f"{base_url}/login/?next=/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(newsroom.passwords[username])
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{base_url}/")
    expect(page.get_by_role("heading", name="Briefs")).to_be_visible()
    return page


def reload_until(page: Page, shown: Callable[[], bool], *, what: str) -> None:
    """Reload until `shown()`: work the cluster does in the background, bounded against hanging."""
    started = time.monotonic()
    while not shown():
        assert time.monotonic() - started < PUBLISHED_DEADLINE_SECONDS, (
            f"no {what} after {PUBLISHED_DEADLINE_SECONDS} s"
        )
        time.sleep(0.5)
        page.reload()
    print(f"{what} after {time.monotonic() - started:.1f} s")


def create_brief(editor: Page, newsroom: Newsroom, *, title: str, source: str, shot: Callable[[Page], None]) -> Locator:
    """The editor's new brief, filled in (`shot` sees the form), created and waited on until the AI's
    summary steps have written revision 1; it becomes `newsroom.public_id`. Returns its revision links."""
    editor.get_by_role("link", name="New brief").click()
    editor.get_by_label("Title").fill(title)
    editor.get_by_label("Source material").fill(source)
    shot(editor)
    editor.get_by_role("button", name="Create brief").click()
    editor.wait_for_url("**/briefs/brief-*/")
    newsroom.public_id = editor.url.rstrip("/").rsplit("/", 1)[-1]
    revision_links = editor.get_by_role("navigation", name="Revisions").get_by_role("link")
    reload_until(editor, lambda: revision_links.count() > 0, what="revision 1 from the summary steps")
    return revision_links


def wait_until_published(page: Page, url: str) -> str:
    """Open revision `url` and reload until it shows its publication verified; returns the permalink."""
    page.goto(url)
    reload_until(page, lambda: page.locator("#publication[data-state=published]").count() == 1, what="publication")
    return page.get_by_test_id("permalink").inner_text()
