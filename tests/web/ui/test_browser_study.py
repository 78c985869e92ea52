"""Issue 60 on the Study tab in a real browser (Debian's chromium through Playwright, the helpers and
served app of ``test_browser``): the power panel names the run it describes and a new run clears it;
the headline recommends only a design whose size is held; a one-template run shows a sentence in
place of a 1 x 1 Jaccard heatmap; "1 template", not "1 templates"; an upload empties the
Bundled-study box; and at 1440 and 420 px no text of the Study figures overlaps another or runs
off the figure. Screenshots go to the served store's folder (and ``PETRI_SCREENSHOT_DIR``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_browser import CHROMIUM, page, save_screenshot, served, settle_narrow_layout, small_study_file, tab  # noqa: F401

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

SHIPPED_RUN = "d894fb59657f4120473aeb68"

#: Every text of the plotly figure in ``sel`` (titles, axis titles, annotations, legend entries, tick
#: labels) with its box, and the figure's own box.
FIGURE_TEXTS = """(sel) => {
  const plot = document.querySelector(sel + ' .js-plotly-plot');
  const svg = plot.querySelector('.main-svg').getBoundingClientRect();
  const kinds = {'.gtitle': 'title', '.g-xtitle text, .g-x2title text': 'axis', '.g-ytitle text, .g-y2title text': 'axis',
                 '.annotation-text': 'note', '.legendtext': 'legend', '.xtick text, .x2tick text': 'tick',
                 '.ytick text, .y2tick text': 'tick'};
  const out = [];
  for (const [q, kind] of Object.entries(kinds))
    for (const t of plot.querySelectorAll(q)) { const r = t.getBoundingClientRect();
      if (r.width > 0 && t.textContent.trim()) out.push({kind, text: t.textContent.slice(0, 40), l: r.left, r: r.right, t: r.top, b: r.bottom}); }
  return {svg: {l: svg.left, r: svg.right, t: svg.top, b: svg.bottom}, texts: out};
}"""  # noqa: E501 - JavaScript run in the page


def assert_figure_text_apart(page, sel: str) -> None:
    """No title, axis title, annotation or legend entry of the figure in ``sel`` overlaps another text of
    it (tick labels included), and each lies inside the figure (nothing cut at its edges)."""
    found = page.evaluate(FIGURE_TEXTS, sel)
    box, texts = found["svg"], found["texts"]
    labels = [t for t in texts if t["kind"] != "tick"]
    assert labels, found
    for t in labels:
        assert box["l"] - 1 <= t["l"] and t["r"] <= box["r"] + 1, f"{sel}: {t['text']!r} runs off the figure ({t}, {box})"
    for i, a in enumerate(labels):
        for b in labels[i + 1:] + [t for t in texts if t["kind"] == "tick"]:
            apart = a["r"] <= b["l"] + 1 or b["r"] <= a["l"] + 1 or a["b"] <= b["t"] + 1 or b["b"] <= a["t"] + 1
            assert apart, f"{sel}: {a['text']!r} overlaps {b['text']!r}"


@pytest.mark.parametrize("width", [1440, 420])
def test_study_figures_text_never_overlaps(page, served, width):
    """Issue 60 item 6: the shipped study's figures at 1440 and 420 px. At 420 px the side-by-side
    panels' titles overlapped each other and the headline ran off the figure, and the Jaccard
    heatmap's title ran 330 px past it."""
    page.set_viewport_size({"width": width, "height": 900})
    try:
        tab(page, "Study")
        page.wait_for_selector("#petri-study-instability .js-plotly-plot")
        page.wait_for_selector("#petri-study-events-fig .js-plotly-plot")
        settle_narrow_layout(page)
        page.wait_for_timeout(500)
        # the Jaccard heatmap's one-line title ran 330 px past a 420 px screen's figure
        for sel in ("#petri-study-instability", "#petri-study-events-fig", "#petri-study-jaccard"):
            assert_figure_text_apart(page, sel)
        jaccard = page.evaluate(FIGURE_TEXTS, "#petri-study-jaccard")  # its wrapped title's first line not cut at the top
        assert all(t["t"] >= jaccard["svg"]["t"] - 1 for t in jaccard["texts"] if t["kind"] == "title"), jaccard
        figure = page.locator("#petri-study-instability")
        figure.scroll_into_view_if_needed()
        box = figure.bounding_box()
        save_screenshot(page, Path(served[1].store.path).parent, f"study-instability-{width}.png", full_page=False,
                        clip={"x": 0, "y": max(0, box["y"]), "width": width, "height": min(900 - max(0, box["y"]), box["height"])})
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})


def estimate(page) -> str:
    """Press Estimate power (2 designs, 100 studies each) and wait for its answer; its text."""
    if not page.locator("#petri-study-power-run").is_visible():
        page.click("text=Power from this study as a pilot")
    page.get_by_label("Events per group").fill("6, 12")
    page.get_by_label("Templates (empty: 1, the pilot's, twice)").fill("1")
    before = page.inner_text("#petri-study-power")
    page.click("#petri-study-power-run")
    page.wait_for_function("([b]) => { const t = document.querySelector('#petri-study-power').innerText;"
                           " return t !== b && t.includes('Method: simulation'); }", arg=[before])
    return page.inner_text("#petri-study-power")


def test_power_panel_names_its_run_and_a_new_one_clears_it(page, served, tmp_path):
    """Issue 60 items 1, 2 and 10: the estimate names the shipped pilot and recommends only a design
    whose size is held; a one-template study uploaded and run clears it (naming the new run), shows a
    sentence in place of the Jaccard heatmap, says "1 template" and empties the Bundled-study box;
    estimating again names the new run."""
    _, service, gate = served
    gate.set()  # the module's gate holds only the gated test's study
    page.set_viewport_size({"width": 1440, "height": 900})
    try:
        tab(page, "Study")
        text = estimate(page)
        assert f"Pilot: study run {SHIPPED_RUN}." in text and "with its size held" in text, text
        assert f"pilot: run {SHIPPED_RUN}" in page.inner_text("#petri-study-power-table")
        assert "size_held" in page.inner_text("#petri-study-power-table")
        if not page.locator("#petri-study-set-up-note").is_visible():
            page.click("button:has-text('Study set-up')")
        assert page.input_value("#petri-study-builtin input") == "inventory_order.json"
        page.set_input_files("#petri-study-upload input[type=file]", str(small_study_file(tmp_path)))
        page.wait_for_selector("text=Loaded Browser study")
        note = page.inner_text("#petri-study-set-up-note")
        assert "1 template." in note and "templates." not in note and "uploaded" in note, note
        page.wait_for_function("document.querySelector('#petri-study-builtin input').value === ''")
        page.fill("#petri-study-samples input[type=number]", "2")
        page.fill("#petri-study-steps input[type=number]", "4")
        page.click("#petri-study-run")
        page.wait_for_selector("#petri-study-status:has-text('Done')", timeout=300_000)
        run_id = re.search(r"study run `?([0-9a-f]{24})", page.inner_text("#petri-study-status")).group(1)
        power = page.inner_text("#petri-study-power")
        assert SHIPPED_RUN not in power and run_id in power and "Estimate power" in power, power
        assert not page.locator("#petri-study-power-table").is_visible()
        page.wait_for_selector("#petri-study-jaccard-note:has-text('1 template')")
        assert not page.locator("#petri-study-jaccard .js-plotly-plot").is_visible()
        assert run_id in page.inner_text("#petri-study-jaccard-note")
        save_screenshot(page, Path(service.store.path).parent, "study-after-upload-1440.png")
        again = estimate(page)
        assert f"Pilot: study run {run_id}." in again and SHIPPED_RUN not in again, again
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})
