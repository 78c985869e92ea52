"""Issue 23 in a real browser (Debian's chromium through Playwright): the Study tab opens on the
shipped study with its per-pair table (raw, Holm and BH p-values) and a power panel that simulates
designs from the study on screen and writes its method."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


def test_study_tab_shows_pair_table_and_power_panel(tmp_path, live_server):
    from playwright.sync_api import sync_playwright

    from petri.app.service import PetriService
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    service = PetriService(tiny_random_model(canvas_length=48), RunStore(tmp_path / "store"))
    with live_server(create_app(service)) as live, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(120_000)
        page.goto(live.url)
        page.click("button[role=tab]:has-text('Study')")
        page.click("text=Per-pair comparisons (event level, Holm and Benjamini-Hochberg)")
        page.wait_for_selector("#petri-study-pairs:has-text('inventory|order')")
        table = page.inner_text("#petri-study-pairs")
        assert "p_holm" in table and "p_bh" in table and "order|person" in table
        page.click("text=Power from this study as a pilot")
        page.get_by_label("Events per group").fill("6, 12")
        page.get_by_label("Templates (empty: 1, the pilot's, twice)").fill("1")
        page.click("#petri-study-power-run")
        page.wait_for_selector("#petri-study-power:has-text('Method: simulation from the pilot')")
        assert "power of the event-level mannwhitney test" in page.inner_text("#petri-study-power")
        page.wait_for_selector("#petri-study-power-table:has-text('n_templates')")
        page.screenshot(path=str(tmp_path / "study-stats.png"), full_page=True)
        browser.close()
