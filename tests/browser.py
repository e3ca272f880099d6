"""A real browser for the web-UI tests: Debian's Chromium through Playwright, headless, no
background networking; each test signs in through the login form as a person would."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import Browser, Page, expect, sync_playwright

PASSWORD = "correct-horse-battery"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Every wait for the page is bounded; the local server answers in milliseconds, but a loaded machine
# may take far longer, so the bound (for actions and for expect alike) only guards against hanging.
TIMEOUT_MS = 30_000
SCREENSHOTS = os.environ.get("GALLEY_TEST_SCREENSHOTS", "")


@pytest.fixture
def browser(monkeypatch) -> Iterator[Browser]:
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still
    # plain synchronous code, which Django would otherwise refuse as "async-unsafe".
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    expect.set_options(timeout=TIMEOUT_MS)  # expect() has its own default (5 s), apart from the page's
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            # Inside sync_playwright() the ORM runs in another contextvars context, so it opened
            # its own connection, one pytest-django never sees or closes; left open, it keeps the
            # test database from being dropped at the end of the run.
            connections.close_all()


def sign_in(browser: Browser, live_server, username: str, **context: Any) -> Page:
    """A fresh browser context (its own cookies; `context`: Playwright's options, e.g. timezone_id) signed in
    through the login form."""
    page = browser.new_context(**context).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/login/?next=/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{live_server.url}/")
    expect(page.get_by_role("heading", name="Briefs")).to_be_visible()
    return page


def screenshot(page: Page, name: str) -> None:
    """Set GALLEY_TEST_SCREENSHOTS to a folder (created if missing) to look at the pages a run went
    through; `make test` sets var/test-artifacts/screenshots."""
    if SCREENSHOTS:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SCREENSHOTS, f"{name}.png"), full_page=True)


def assert_fits_window(page: Page, name: str, *, viewport: dict[str, int]) -> None:
    """At `viewport`, the page is no wider than the window (no sideways scroll); saved as `name`."""
    page.set_viewport_size(viewport)
    width = page.evaluate("window.innerWidth")
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"{name}: the page is {scroll_width} px wide in a {width} px window"
    screenshot(page, name)
