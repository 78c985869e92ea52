"""A paired (within-event) study in the Study tab of a real browser (Debian's chromium through
Playwright): uploaded, run, and shown as one line per event with the paired statistics."""

from __future__ import annotations

import json

import pytest

from tests.web.api.test_paired_api import STUDY
from tests.web.ui.test_browser import CHROMIUM, opened_page

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


def test_the_study_tab_runs_a_paired_study_and_draws_one_line_per_event(tmp_path, live_server):
    from petri.app.service import PetriService
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    path = tmp_path / "paired.json"
    path.write_text(json.dumps(STUDY), encoding="utf-8")
    service = PetriService(tiny_random_model(canvas_length=16), RunStore(tmp_path / "store"))
    try:
        with live_server(create_app(service)) as live, opened_page(live.url) as page:
            page.click("button[role=tab]:has-text('Study')")
            page.click("button:has-text('Study set-up')")
            page.set_input_files("#petri-study-upload input[type=file]", str(path))
            page.wait_for_selector("text=Loaded Paired over HTTP")
            page.fill("#petri-study-samples input[type=number]", "2")
            page.fill("#petri-study-steps input[type=number]", "3")
            page.locator("#petri-study-steps input[type=number]").blur()
            page.click("#petri-study-run")
            page.wait_for_selector("#petri-study-status:has-text('Done')", timeout=300_000)
            assert "of 4 batches" in page.inner_text("#petri-study-status")
            stats = page.inner_text("#petri-study-stats")
            assert "Paired design: every event ran under 2 conditions" in stats and "unrelated vs fitting" in stats
            chart = page.locator("#petri-study-instability .js-plotly-plot").text_content()
            assert "mean over events" in chart and "fitting" in chart and "unrelated" in chart
    finally:
        service.shutdown()
