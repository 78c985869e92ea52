"""Two real browsers (Debian's chromium, separate cookie jars) on a public server: the first page
each loads sets its own caller cookie; a dish one visitor runs is listed in its Runs tab and its
downloads open for it, while the other visitor lists nothing and gets a 404 for the same download."""

from __future__ import annotations

import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS, tab

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


@pytest.fixture(scope="module")
def public(tmp_path_factory, live_server):
    from petri.app.service import PetriService
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.access import AccessPolicy
    from petri.web.app import create_app

    service = PetriService(tiny_random_model(canvas_length=48), RunStore(tmp_path_factory.mktemp("public-browser")))
    with live_server(create_app(service, access=AccessPolicy(public=True))) as live:
        yield live.url, service
    service.shutdown()


def test_each_browser_sees_only_its_own_runs_and_downloads(public):
    from playwright.sync_api import sync_playwright

    url, service = public
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        one, two = browser.new_context(), browser.new_context()
        first, second = one.new_page(), two.new_page()
        for page in (first, second):
            page.set_default_timeout(120_000)
            page.goto(url)
            page.wait_for_selector("#petri-run")
        assert one.cookies()[0]["name"] == "petri_caller" and one.cookies()[0]["httpOnly"]
        assert one.cookies()[0]["value"] != two.cookies()[0]["value"]

        first.fill("#petri-samples input[type=number]", "2")
        first.click("#petri-run")
        first.wait_for_selector("#petri-status:has-text('Done')")
        (run,) = service.store.list_runs(5)
        links = first.locator("#petri-files a[href]").evaluate_all("els => els.map(e => e.href)")
        positions = next(link for link in links if link.endswith("positions.csv"))
        assert first.request.get(positions).status == 200
        assert second.request.get(positions).status == 404

        tab(first, "Runs")
        first.wait_for_selector(f"#petri-runs-table:has-text('{run['run_id']}')")
        tab(second, "Runs")
        second.click("button:has-text('Refresh')")
        second.wait_for_timeout(3000)
        assert run["run_id"] not in second.inner_text("#petri-runs-table")
        browser.close()
