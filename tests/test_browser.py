"""A real browser (Debian's chromium, driven by Playwright; no ``playwright install``) opens the
UI, runs a dish, waits for the plotly heatmap and the results, and saves a screenshot (to tmp_path
and, when ``PETRI_SCREENSHOT_DIR`` is set, there too).

The model is the embedded one (``assets/petri-tiny``) when its weights are present, else a tiny
random DiffusionGemma with a 48-token canvas.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium); .ci/run installs it"
)


@pytest.fixture(scope="module")
def app_url(tmp_path_factory, live_server):
    from petri.web.app import create_app
    from petri.engine.torch_model import EMBEDDED_MODEL_PATH, load_model
    from petri.service import PetriService
    from petri.store import RunStore
    from petri.engine.tiny import tiny_random_model

    if (EMBEDDED_MODEL_PATH / "config.json").exists():
        lm, source = load_model(EMBEDDED_MODEL_PATH, device="cpu"), str(EMBEDDED_MODEL_PATH)
    else:
        lm, source = tiny_random_model(canvas_length=48), None
    service = PetriService(lm, RunStore(tmp_path_factory.mktemp("browser-store")))
    with live_server(create_app(service, model_source=source)) as live:
        yield live.url


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(app_url)
        page.wait_for_selector("#petri-run")
        yield page
        browser.close()


def save_screenshot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    extra = os.environ.get("PETRI_SCREENSHOT_DIR")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / name)
    return path


def test_run_a_dish_in_the_browser(page, tmp_path):
    # the canvas strip shows where each concept sits
    page.wait_for_selector("#petri-strip .js-plotly-plot")
    assert "inventory" in page.inner_text("#petri-placement")

    page.fill("#petri-samples input[type=number]", "3")
    page.click("text=Sampler settings")
    page.fill("#petri-steps input[type=number]", "16")
    page.click("#petri-run")
    page.wait_for_selector("#petri-heatmap .js-plotly-plot")  # the live heatmap
    page.wait_for_selector("#petri-status:has-text('Done')")
    page.wait_for_selector("#petri-heatmap .hm, #petri-heatmap .heatmaplayer image", state="attached")
    title = page.locator("#petri-heatmap .gtitle").text_content()
    assert "flips per step and position (3 samples)" in title

    final = page.inner_text("#petri-final")
    for concept in ("order", "inventory", "person"):
        assert concept in final
    page.wait_for_selector("#petri-flips .js-plotly-plot")
    assert "|" in page.inner_text("#petri-pairs")  # pair rows such as inventory|order
    links = page.locator("#petri-files a[href]").evaluate_all("els => els.map(e => e.href)")
    names = {link.rsplit("/", 1)[-1] for link in links}
    assert {"positions.csv", "segments.csv", "samples.csv", "pairs.csv", "run.json"} <= names, links
    csv_link = next(link for link in links if link.endswith("/pairs.csv"))
    download = httpx.get(csv_link, timeout=30)
    assert download.status_code == 200 and download.text.startswith('"event","event_index","group"')
    status = page.inner_text("#petri-status")
    assert "/api/runs/" in status
    page.wait_for_timeout(500)  # let plotly finish its transitions
    shot = save_screenshot(page, tmp_path, "dish.png")
    assert shot.stat().st_size > 10_000


def test_bad_concepts_are_named_in_the_browser(page, tmp_path):
    page.fill("#petri-concepts textarea, #petri-concepts input", "order")
    page.wait_for_function("!document.querySelector('#petri-placement').innerText.includes('inventory')")
    # the canvas strip is redrawn for the new concepts (its annotations are SVG text in the plot)
    page.wait_for_function("!document.querySelector('#petri-strip').textContent.includes('inventory')")
    page.click("#petri-run")
    page.wait_for_selector("#petri-concepts:has-text('at least 2 items')")
    assert "concepts" in page.inner_text("#petri-concepts")
    save_screenshot(page, tmp_path, "dish-error.png")
