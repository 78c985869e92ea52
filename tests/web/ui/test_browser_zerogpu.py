"""The Dish tab on ZeroGPU in a real browser (Debian's chromium via Playwright), the model work in
the fork harness's children (tests/zerogpu_support.py) on the CPU with the tiny model: the cost
line shows what a run will cost before it starts and follows the steps asked for (hand-worked
against a cost model of 1 s a step), and a call that runs past its ``duration`` ("GPU task
aborted") leaves a plain message and the steps drawn so far."""

from __future__ import annotations

import pytest
from test_browser import CHROMIUM, open_settings
from test_browser_legibility import browser  # noqa: F401  (a fixture: one chromium for the module)

import zerogpu_support as harness
from petri.web import gpu_cost, gpu_executor

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


@pytest.fixture()
def zerogpu_page(browser, service, live_server, monkeypatch):  # noqa: F811 - the browser fixture
    """A page on the app served as a ZeroGPU Space (the harness for ``spaces``; a call costs 1 s a step)."""
    from petri.web.app import create_app

    harness.serve_on_zerogpu(monkeypatch, service)
    monkeypatch.setattr(gpu_cost, "DEFAULT_COST", gpu_cost.GpuCost(step=1.0, sample_step=0.0, prompt_token_step=0.0,
                                                                   warm_up=0.0, cold_start=0.0, card=1.0, margin=1.0))
    with live_server(create_app(service)) as live:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(120_000)
        page.goto(live.url)
        page.wait_for_selector("#petri-run")
        yield page, service
        page.close()


def test_the_cost_line_follows_the_steps_and_an_aborted_call_says_so_plainly(zerogpu_page, monkeypatch):
    page, service = zerogpu_page
    default = service.default_settings().max_denoising_steps  # one event: a call of 1 s a step
    first = f"one GPU call of ≈ {default} s, asking for {round(1.5 * default)} s of your daily GPU quota"
    page.wait_for_function(f"document.querySelector('#petri-cost').innerText.includes({first!r})")
    open_settings(page)
    page.fill("#petri-steps input[type=number]", "6")
    page.press("#petri-steps input[type=number]", "Enter")
    # 6 s asks for 9 s of quota: 9/120 = 7.5 % (shown 8), 9/300 = 3 %, 9/2,400 = 0.4 % (shown 0)
    six = ("ZeroGPU cost (estimated before the run): one GPU call of ≈ 6 s, asking for 9 s of your daily GPU quota in "
           "all: 8 % of an anonymous visitor's 120 s, 3 % of a free account's 300 s, 0 % of a PRO account's 2,400 s.")
    page.wait_for_function(f"document.querySelector('#petri-cost').innerText.trim() === {six!r}")

    monkeypatch.setattr(gpu_executor, "_duration_s", [6])
    harness.stall_seed_after_step(monkeypatch, 2)  # 60 s, past the call's 6 s
    page.click("#petri-run")
    page.wait_for_function("document.querySelector('#petri-status').innerText.includes('GPU task aborted')")
    status = page.inner_text("#petri-status").strip()
    run_id = service.store.list_runs(1)[0]["run_id"]
    assert status == (f"Stopped: the GPU time of this call ran out (ZeroGPU: GPU task aborted); 0 of 1 events "
                      f"finished and are stored in run {run_id}; stopped at step 2.")
    assert "stopped at step 2" in page.inner_text("#petri-run-badge")
    assert page.locator("#petri-heatmap .js-plotly-plot").count() == 1  # the steps drawn stay on screen
    assert harness.CALLS[-1].aborted and service.get_run(run_id)["status"] == "failed"
