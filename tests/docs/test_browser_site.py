"""The documentation site in a real browser (Debian's chromium via Playwright), as a reader without
internet meets it (issue 60):

- opened as files (``file://``) with the network off, every page loads without a failed request or
  a script error, the search box (which a ``file://`` page cannot run) gives way to a visible note
  saying how to search, the navigation's links open pages, and the Performance page is short;
- served (what ``python -m mkdocs serve`` or any web server gives), search finds pages and nothing
  is asked of another host."""

from __future__ import annotations

import functools
import http.server
import threading
from contextlib import closing

import pytest

from tests.web.ui.test_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

#: the Performance page's height at 1440 × 900 (about 2,600 px now; about 30,000 before its split)
MAX_PERFORMANCE_PX = 6_000


@pytest.fixture(scope="module")
def site(built_site):
    assert built_site.returncode == 0, built_site.log
    return built_site.path


@pytest.fixture(scope="module")
def browser():
    """One chromium for the module's tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, closing(p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)) as b:
        yield b


def watched(page) -> dict[str, list[str]]:
    """The page's failed requests, script errors and requests to another host, as they happen."""
    seen: dict[str, list[str]] = {"failed": [], "errors": [], "elsewhere": []}
    page.on("requestfailed", lambda r: seen["failed"].append(f"{r.url} ({r.failure})"))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
    return seen


def test_opened_as_files_offline_the_site_loads_and_says_how_to_search(site, browser):
    context = browser.new_context(offline=True, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    seen = watched(page)
    page.goto((site / "index.html").as_uri())
    note = page.locator("#file-search-note")
    note.wait_for(state="visible", timeout=30_000)
    assert "python -m mkdocs serve" in note.inner_text()
    assert page.locator('[data-md-component="search"]').count() == 0
    page.locator(".md-nav__link", has_text="Performance").first.click()
    page.wait_for_url("**/performance.html")
    page.wait_for_load_state("load")
    assert page.title().startswith("Performance - ")
    assert page.locator("#file-search-note").is_visible()
    height = page.evaluate("document.documentElement.scrollHeight")
    page.get_by_role("link", name="performance lab log").first.click()
    page.wait_for_url("**/performance-log.html")
    page.wait_for_load_state("load")
    context.close()
    assert height < MAX_PERFORMANCE_PX, f"the Performance page is {height} px tall"
    assert seen == {"failed": [], "errors": [], "elsewhere": []}


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def served_site(site):
    """The built site on a loopback port (a static server, as ``mkdocs serve`` serves the build)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def search(page, query: str) -> int:
    """The number of results the page's search shows for ``query``, typed key by key (as a reader
    types; the theme may miss a value set at once) once the search has read its index (the theme
    shows "Initializing search" until then and drops a query typed before)."""
    meta = page.locator(".md-search-result__meta")
    page.wait_for_function("meta => !/^\\s*Initializing search\\s*$/.test(meta.textContent)", arg=meta.element_handle(),
                           timeout=60_000)
    box = page.locator(".md-search__input")
    box.click()
    box.press_sequentially(query)
    page.locator(".md-search-result__item").first.wait_for(state="visible", timeout=30_000)
    return page.locator(".md-search-result__item").count()


def test_served_the_site_searches_and_asks_no_other_host(served_site, browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    seen = watched(page)

    def only_this_server(route):
        if route.request.url.startswith(served_site):
            route.continue_()
        else:
            seen["elsewhere"].append(route.request.url)
            route.abort()

    page.route("**/*", only_this_server)
    page.goto(f"{served_site}/index.html")
    found = search(page, "instability")
    note = page.locator("#file-search-note").count()
    context.close()
    assert found > 0 and note == 0
    assert seen == {"failed": [], "errors": [], "elsewhere": []}
