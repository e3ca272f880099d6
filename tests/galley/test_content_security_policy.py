"""The content-security policy allows no inline style or script anywhere (galley/settings.py:
`style-src 'self'`, `script-src 'self'`): the header says so, no template needs an exception, and
real pages in a real browser (Chromium) load with no violation and with their stylesheet applied.
"""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from playwright.sync_api import ConsoleMessage, Page, expect

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.roles import Role
from tests.browser import PASSWORD, TIMEOUT_MS, screenshot, sign_in
from tests.processes import BASE_DIR
from tests.web import policy_directives

# What galley.css gives <body> (--bg): a page that shows it has Galley's stylesheet applied.
GALLEY_BACKGROUND = "rgb(246, 247, 249)"
# Recorded before any page script runs (Playwright's init scripts are not subject to the page's policy).
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.__cspViolations.push(`${event.violatedDirective} blocked ${event.blockedURI || "inline"} (${where})`);
});
"""


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/api/v1/docs", "/api/v1/openapi.json"])
def test_policy_header__no_unsafe_inline_anywhere__styles_and_scripts_only_from_self(client, path):
    response = client.get(path)
    assert response.status_code == 200, response.content[:500]
    header = response["Content-Security-Policy"]
    assert "unsafe-inline" not in header and "unsafe-eval" not in header
    directives = policy_directives(header)
    assert directives["style-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["default-src"] == "'self'"


# A <style> element, a style attribute, or a <script> without src (an inline script).
INLINE = {
    "<style> block": re.compile(r"<style[\s>]", re.IGNORECASE),
    "style= attribute": re.compile(r"\sstyle\s*=", re.IGNORECASE),
    "inline <script>": re.compile(r"<script(?![^>]*\ssrc=)[^>]*>", re.IGNORECASE),
}


def test_templates__no_style_block_style_attribute_or_inline_script():
    templates = sorted((BASE_DIR / "templates").rglob("*.html"))
    assert templates
    offenders = [
        f"{path.relative_to(BASE_DIR)}: {what}"
        for path in templates
        for what, pattern in INLINE.items()
        if pattern.search(path.read_text())
    ]
    assert offenders == []


def test_templates__the_check_finds_what_it_looks_for():
    for sample in ("<style>p{}</style>", '<p style="color:red">', "<script>alert(1)</script>", "<STYLE media=x>"):
        assert any(pattern.search(sample) for pattern in INLINE.values()), sample
    for sample in ('<script src="/static/x.js"></script>', '<p class="styled">', "<link rel=stylesheet>"):
        assert not any(pattern.search(sample) for pattern in INLINE.values()), sample


# --- in a real browser ---------------------------------------------------------------------------


class Visit:
    """One browser page that records every CSP violation of each page it opens: the DOM's
    `securitypolicyviolation` events and Chromium's console reports of them."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[str] = []
        page.set_default_timeout(TIMEOUT_MS)
        page.add_init_script(RECORD_VIOLATIONS)
        page.on("console", self._on_console)

    def _on_console(self, message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.console.append(message.text)

    def open(self, url: str) -> Page:
        self.console.clear()
        response = self.page.goto(url)
        assert response is not None and response.status == 200, url
        self.page.wait_for_load_state("networkidle")
        return self.page

    def violations(self) -> list[str]:
        """This page's violations so far (the DOM's list starts afresh on every page)."""
        return [*self.page.evaluate("window.__cspViolations"), *self.console]


def computed(page: Page, selector: str, prop: str) -> str:
    return page.eval_on_selector(selector, f"(el) => getComputedStyle(el).getPropertyValue('{prop}')")


@pytest.mark.acceptance
@pytest.mark.django_db(transaction=True)
def test_browser__login_page__no_csp_violation_and_galley_css_applied(browser, live_server):
    context = browser.new_context()
    visit = Visit(context.new_page())
    page = visit.open(f"{live_server.url}/login/")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    assert computed(page, "body", "background-color") == GALLEY_BACKGROUND
    assert visit.violations() == []
    # The recording works: an inline style put into this page is refused and reported.
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<p style=\"color: red\">inline</p>')")
    page.wait_for_function("window.__cspViolations.length > 0")
    assert visit.violations()[0].startswith("style-src-attr blocked inline")
    assert any("style" in message for message in visit.console)
    context.close()


@pytest.mark.acceptance
@pytest.mark.django_db(transaction=True)
def test_browser__dashboard_brief_page_admin_list_and_api_docs__no_csp_violation_styles_applied(
    browser, live_server, make_user
):
    user = make_user("otto", Role.EDITOR, Role.OPERATOR, password=PASSWORD)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="Dockers walked out.", acting_user=user)
        check_create_revision(brief.public_id, base_number=0, title="Strike", body="Dockers.", acting_user=user)
    visit = Visit(sign_in(browser, live_server, "otto"))
    violations: dict[str, list[str]] = {}

    page = visit.open(f"{live_server.url}/")
    expect(page.get_by_role("link", name=brief.public_id)).to_be_visible()
    assert computed(page, "body", "background-color") == GALLEY_BACKGROUND
    violations["dashboard"] = visit.violations()

    page = visit.open(f"{live_server.url}{brief.get_absolute_url()}")
    # The brief goes by its current headline: revision 1's title.
    expect(page.get_by_role("heading", name=f"{brief.public_id} Strike")).to_be_visible()
    assert computed(page, "body", "background-color") == GALLEY_BACKGROUND
    assert computed(page, ".card", "border-radius") == "8px"
    screenshot(page, "csp-brief")
    violations["brief"] = visit.violations()

    # The admin's own stylesheets (django.contrib.admin's static files) are 'self' too.
    page = visit.open(f"{live_server.url}/admin/publishing/brief/")
    expect(page.get_by_role("link", name=brief.public_id)).to_be_visible()
    assert computed(page, "#header", "display") == "flex"
    screenshot(page, "csp-admin-changelist")
    violations["admin change list"] = visit.violations()

    # The API docs: Swagger UI, from ninja's static files, renders the live schema.
    page = visit.open(f"{live_server.url}/api/v1/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Galley API")
    expect(page.locator(".opblock").first).to_be_visible()
    assert computed(page, ".swagger-ui .opblock", "border-radius") == "4px"
    screenshot(page, "csp-api-docs")
    violations["api docs"] = visit.violations()

    assert violations == {name: [] for name in violations}
    visit.page.context.close()
