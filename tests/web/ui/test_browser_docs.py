"""``/docs`` in a real browser (Debian's chromium via Playwright) with every request off this server
refused, as on a machine without internet: Swagger UI draws the API's operations from the files the
app serves itself (issue 49: FastAPI's default page loaded them from a CDN and was blank offline)."""

from __future__ import annotations

import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS

from petri.app.service import PetriService
from petri.runs.store import RunStore
from petri.web.app import create_app

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


def test_the_api_docs_draw_offline(tiny_lm, tmp_path, live_server):
    from playwright.sync_api import sync_playwright

    app = create_app(PetriService(tiny_lm, RunStore(tmp_path / "store")), ui=False)
    with live_server(app) as live, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page()
        refused: list[str] = []

        def only_this_server(route):
            if route.request.url.startswith(live.url):
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        page.route("**/*", only_this_server)
        page.goto(f"{live.url}/docs")
        page.wait_for_selector(".swagger-ui .opblock", timeout=60_000)
        paths = page.locator(".swagger-ui .opblock-summary-path").all_inner_texts()
        browser.close()
    assert "/api/seed" in " ".join(paths) and "/api/runs" in " ".join(paths)
    assert refused == []  # nothing was asked of another host


def test_try_it_out_fills_in_the_first_body_the_schema_offers(tiny_lm, tmp_path, live_server):
    """What Swagger UI's "Try it out" puts in each POST's body box is the first body
    :func:`~tests.web.api.test_openapi_examples.swagger_bodies` takes from the schema, so the test that
    sends those bodies sends what a user would."""
    import json

    from playwright.sync_api import sync_playwright

    from tests.web.api.test_openapi_examples import swagger_bodies

    app = create_app(PetriService(tiny_lm, RunStore(tmp_path / "store")), ui=False)
    spec = app.openapi()
    filled = {}
    with live_server(app) as live, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"{live.url}/docs")
        page.wait_for_selector(".swagger-ui .opblock", timeout=60_000)
        for block in page.locator(".swagger-ui .opblock-post").all():
            path = block.locator(".opblock-summary-path").inner_text().strip()
            block.locator(".opblock-summary").click()
            block.locator("button.try-out__btn").click()
            filled[path] = json.loads(block.locator("textarea.body-param__text").input_value())
        browser.close()
    offered = {path: swagger_bodies(ops["post"], spec)[0] for path, ops in spec["paths"].items()
               if "requestBody" in ops.get("post", {})}
    assert filled == offered
