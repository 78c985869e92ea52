"""A real browser (Debian's chromium via Playwright) drives the trajectory viewer: during a live dish
the view follows the newest step (the sampler is held after a known step, so "live" is a fact of the
test, not a race); afterwards scrubbing to step t shows exactly the tokens the API's per-step canvas
holds for that step and sample and the last frame is the final text, Play advances through the steps, the keyboard moves the scrubber,
another sample is one slider away; a comparison shows a view per event and a reopened run shows the
same views. Screenshots of the view and the whole-trajectory figure go to tmp_path (and to
``PETRI_SCREENSHOT_DIR`` when set: ``assets/screenshots`` for the README).
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace

import httpx
import pytest
from test_browser import CHROMIUM, opened_page, reopen_run, tab

from petri.core.watch import NO_WATCH

#: The sampler waits after this step (0-based) until the test has seen the live view on it.
HOLD_AT = 5

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


@pytest.fixture(scope="module")
def served(tmp_path_factory, live_server):
    """(url, service, gate): the app on the embedded model; a Dish run's steps pause after step
    HOLD_AT until the test sets ``gate`` (the first run only)."""
    from petri.app.service import PetriService
    from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    lm = load_model(EMBEDDED_MODEL_PATH, device="cpu") if (EMBEDDED_MODEL_PATH / "config.json").exists() \
        else tiny_random_model(canvas_length=48)
    gate = threading.Event()

    class HeldService(PetriService):
        def submit_seed(self, plan, *, owner=None, watch=NO_WATCH):
            def held(step):
                watch.on_step(step)
                if step.index == HOLD_AT:
                    gate.wait(120)

            return super().submit_seed(plan, owner=owner,
                                       watch=replace(watch, on_step=held if watch.on_step is not None else None))

    service = HeldService(lm, RunStore(tmp_path_factory.mktemp("traj-store")))
    with live_server(create_app(service)) as live:
        yield live.url, service, gate
    gate.set()


@pytest.fixture(scope="module")
def page(served):
    with opened_page(served[0], 1300, 1000) as page:
        yield page


def shown(page, view: str = "#petri-traj") -> dict:
    """What the view draws: step, steps, sample, live and each token's id and text."""
    return page.evaluate(f"""() => {{
        const root = document.querySelector('{view} .pt');
        const toks = [...root.querySelectorAll('.pt-canvas .pt-tok')];
        return {{step: root.dataset.step, steps: +root.dataset.steps, sample: root.dataset.sample, live: root.dataset.live,
                 ids: toks.map((e) => +e.dataset.id), texts: toks.map((e) => e.textContent),
                 flipped: toks.map((e) => e.dataset.flipped === '1')}};
    }}""")


def api_record(url: str, run_id: str, key: str = "canvas") -> list:
    """[event][sample] → the (steps, L) per-step record the API reports: the ``canvas`` (what the
    viewer shows by default) or the raw ``argmax``."""
    body = httpx.get(f"{url}/api/runs/{run_id}", params={"include_trajectories": True}, timeout=60).json()
    return [[s[key] for s in ev["samples"]] for ev in body["events"]]


def scrub(page, step: int, view: str = "#petri-traj") -> None:
    page.locator(f"{view} .pt-slider").fill(str(step))
    page.wait_for_function(f"document.querySelector('{view} .pt').dataset.step === '{step}'")


@pytest.fixture(scope="module")
def dish_run(page, served):
    """The dish run of the live test: (run_id, per-step canvas by the API, the ids the live view showed)."""
    url, service, gate = served
    page.fill("#petri-samples input[type=number]", "3")
    page.click("#petri-settings button:has-text('Sampler settings')")
    page.fill("#petri-steps input[type=number]", "16")
    page.click("#petri-run")
    page.wait_for_function(f"(() => {{ const r = document.querySelector('#petri-traj .pt');"
                           f" return r && r.dataset.live === '1' && r.dataset.steps === '{HOLD_AT + 1}'; }})()")
    live = shown(page)
    gate.set()
    page.wait_for_selector("#petri-status:has-text('Done')", timeout=300_000)
    run_id = re.search(r"/api/runs/([0-9a-f]+)", page.inner_text("#petri-status")).group(1)
    page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.live === '0'")
    return run_id, api_record(url, run_id), live


def test_live_view_follows_the_newest_step(served, dish_run):
    url, _, _ = served
    run_id, canvas, live = dish_run
    argmax = api_record(url, run_id, "argmax")
    assert live["live"] == "1" and live["steps"] == HOLD_AT + 1
    assert live["step"] == str(HOLD_AT)  # on the newest step, not the first
    assert live["ids"] == canvas[0][0][HOLD_AT]  # the stream's canvas is the stored one
    changed = [a != b for a, b in zip(argmax[0][0][HOLD_AT - 1], argmax[0][0][HOLD_AT])]
    assert any(live["flipped"]) == any(changed)  # flips are the argmax's


def test_scrubbing_shows_exactly_the_stored_tokens(page, served, dish_run, tmp_path):
    url, service, _ = served
    run_id, canvas, _ = dish_run
    steps = len(canvas[0][0])
    assert shown(page)["steps"] == steps
    for t in sorted({0, 1, steps // 2, steps - 1}):
        scrub(page, t)
        now = shown(page)
        assert now["ids"] == canvas[0][0][t], t
        assert now["sample"] == "0"
    [(_, _, traj), *_] = service.store.load_events(run_id)
    scrub(page, steps)  # the last frame: the returned canvas, the final text
    assert shown(page)["ids"] == traj.final_ids[0].tolist()
    assert "".join(service.lm.tokenizer.decode([i]) for i in shown(page)["ids"]) == traj.final_texts[0]
    texts = {int(i): service.lm.tokenizer.decode([int(i)]) for i in set(now["ids"])}
    for token_id, text in zip(now["ids"], now["texts"]):
        raw = texts[token_id]
        assert text == raw or not raw.strip() or "\n" in raw  # whitespace shows as a visible mark
    page.locator("#petri-traj").scroll_into_view_if_needed()
    page.locator("#petri-traj").screenshot(path=str(tmp_path / "view.png"))
    save_screenshot_element(page, "#petri-traj-box", tmp_path, "trajectory-view.png")
    page.wait_for_selector("#petri-traj-figure .js-plotly-plot")
    save_screenshot_element(page, "#petri-traj-figure", tmp_path, "trajectory-figure.png")


def save_screenshot_element(page, selector: str, tmp_path, name: str) -> None:
    """An element's screenshot into tmp_path (and PETRI_SCREENSHOT_DIR when set)."""
    import os
    import shutil
    from pathlib import Path

    path = tmp_path / name
    page.locator(selector).screenshot(path=str(path))
    if os.environ.get("PETRI_SCREENSHOT_DIR"):
        Path(os.environ["PETRI_SCREENSHOT_DIR"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(os.environ["PETRI_SCREENSHOT_DIR"]) / name)


def test_play_advances_and_the_keyboard_moves_the_scrubber(page, dish_run):
    _, canvas, _ = dish_run
    last = len(canvas[0][0])  # the steps, then the returned canvas
    scrub(page, 0)
    page.select_option("#petri-traj .pt-speed", "150")
    page.click("#petri-traj .pt-play")
    page.wait_for_function("+document.querySelector('#petri-traj .pt').dataset.step >= 2")
    page.wait_for_function(f"document.querySelector('#petri-traj .pt').dataset.step === '{last}'")
    page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.playing === '0'")  # stops at the end
    assert page.evaluate("document.querySelector('#petri-traj .pt').dataset.result") == "1"
    # the keyboard: on the slider itself, and on the view
    scrub(page, 1)
    page.focus("#petri-traj .pt-slider")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.step === '2'")
    assert shown(page)["ids"] == canvas[0][0][2]
    page.focus("#petri-traj .pt")
    page.keyboard.press("End")
    page.wait_for_function(f"document.querySelector('#petri-traj .pt').dataset.step === '{last}'")
    page.keyboard.press("ArrowLeft")
    page.wait_for_function(f"document.querySelector('#petri-traj .pt').dataset.step === '{last - 1}'")
    page.keyboard.press("Home")
    page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.step === '0'")
    page.keyboard.press(" ")  # Space plays
    page.wait_for_function("+document.querySelector('#petri-traj .pt').dataset.step >= 1")


def pick_sample(page, s: int) -> None:
    """Type sample ``s`` into the Dish tab's one sample selector (it drives the viewer too)."""
    box = page.locator("#petri-sample input[type=number]")
    box.click()
    box.press("Control+a")
    box.type(str(s))


def test_another_sample_is_one_slider_away(page, dish_run):
    _, canvas, _ = dish_run
    pick_sample(page, 2)
    page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.sample === '2'")
    scrub(page, 1)
    assert shown(page)["ids"] == canvas[0][2][1]


def test_a_comparison_shows_a_view_per_event(page, served):
    url, _, _ = served
    tab(page, "Compare")
    page.fill("#petri-cmp-samples input[type=number]", "2")
    page.click("#petri-cmp-settings button:has-text('Sampler settings')")  # the Dish tab's settings, closed
    page.fill("#petri-cmp-steps input[type=number]", "6")
    page.click("#petri-cmp-run")
    page.wait_for_selector("#petri-cmp-status:has-text('Done')", timeout=300_000)
    run_id = re.search(r"/api/runs/([0-9a-f]+)", page.inner_text("#petri-cmp-status")).group(1)
    canvas = api_record(url, run_id)
    for event, view in enumerate(("#petri-traj-a", "#petri-traj-b")):
        page.wait_for_function(f"+document.querySelector('{view} .pt').dataset.steps > 0")
        assert shown(page, view)["steps"] == len(canvas[event][0])
        scrub(page, 1, view)
        assert shown(page, view)["ids"] == canvas[event][0][1]
    assert "benign" in page.inner_text("#petri-traj-a") and "contradictory" in page.inner_text("#petri-traj-b")


def figure_links(page, tab_name: str, box: str) -> dict[str, str]:
    """Click the tab's "Download figures" button: {file name: url} of the files it yields."""
    tab(page, tab_name)
    page.click(f"{box}-button")
    page.wait_for_selector(f"{box} a[href]", timeout=300_000)
    hrefs = page.locator(f"{box} a[href]").evaluate_all("els => els.map(e => e.href)")
    return {h.rsplit("/", 1)[-1]: h for h in hrefs}


def test_each_tabs_download_figures_button_yields_the_figures_of_its_run(page, served, dish_run):
    url, _, _ = served
    run_id = dish_run[0]
    links = figure_links(page, "Dish", "#petri-dish-figures")
    assert f"{run_id}-flip-heatmap.html" in links and any(n.startswith(f"{run_id}-flips-sample") for n in links), links
    assert "flips per step and position (3 samples)" in httpx.get(links[f"{run_id}-flip-heatmap.html"], timeout=60).text
    from petri.study.figures.plots import image_export_status

    if image_export_status()[0]:  # PNG and SVG too where kaleido finds a Chromium (it does where this test runs)
        assert {f"{run_id}-flip-heatmap.png", f"{run_id}-flip-heatmap.svg"} <= set(links), links
        assert httpx.get(links[f"{run_id}-flip-heatmap.png"], timeout=60).content[:8] == b"\x89PNG\r\n\x1a\n"
    compare_id = re.search(r"/api/runs/([0-9a-f]+)", page.inner_text("#petri-cmp-status")).group(1)
    links = figure_links(page, "Compare", "#petri-cmp-figures")
    assert {f"{compare_id}-{n}.html" for n in ("heatmap-a", "heatmap-b", "difference")} <= set(links), links
    assert "benign: flips per step" in httpx.get(links[f"{compare_id}-heatmap-a.html"], timeout=60).text
    from petri.web.ui.study_tab.shipped import load_shipped

    shipped = load_shipped()  # the Study tab shows the shipped study's figures until a run replaces them
    if shipped is not None:
        links = figure_links(page, "Study", "#petri-study-figures")
        shipped_id = shipped.run["run_id"]
        assert {f"{shipped_id}-{n}.html" for n in ("instability", "events", "jaccard")} <= set(links), links


def test_a_reopened_run_shows_the_same_views(page, served, dish_run):
    url, _, _ = served
    run_id, canvas, _ = dish_run
    # another sample on screen first, so the reopen has to replace it
    tab(page, "Dish")
    pick_sample(page, 1)
    page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.sample === '1'")
    reopen_run(page, run_id)
    page.wait_for_selector("#petri-status:has-text('Reopened dish run')")
    page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.sample === '0'")
    last = len(canvas[0][0]) - 1
    scrub(page, last)
    assert shown(page)["ids"] == canvas[0][0][last]
    page.wait_for_selector("#petri-traj-figure .js-plotly-plot")
    page.wait_for_selector("#petri-traj-curves .js-plotly-plot")
