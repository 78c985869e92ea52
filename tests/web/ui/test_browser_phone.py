"""Issue 60, item 6's last phone defects in a real browser (Debian's chromium via Playwright) on the
embedded uniform model (``petri-tiny``), at 420 px wide and at 1440: the Dish tab's flip map drawn
while sampling and after a cancel ("run … · cancelled: flips while sampling — step 0" ran 22 px past
a 420 px screen's figure); the Runs tab's Run choice (its label, "compare · 2026-12-07T04:59:54+00:00 ·
e8af2617e8…", ran under the box's arrow); Compare's difference map (its one-line title ran 170 px past
the figure) and its pair table ("inventory|perso/n"); the Model tab's tables ("pr/o/p/er/ty"). Expected
values come from the store, never from the code under test."""

from __future__ import annotations

import pytest
from test_browser import CHROMIUM, run_compare, save_screenshot, tab
from test_browser_dish import (
    BROKEN_WORDS,
    HEATMAP_LABELS,
    apart,
    held_after_each_step,
    open_dish,
)
from test_browser_legibility import browser  # noqa: F401  (a fixture: one chromium for the module)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


@pytest.fixture(scope="module")
def app(tmp_path_factory, live_server):
    """(url, service): the app on the embedded uniform model, a store of its own."""
    from petri.app.service import PetriService
    from petri.engine.torch.model import load_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    lm = load_model("petri-tiny", device="cpu")
    service = PetriService(lm, RunStore(tmp_path_factory.mktemp("phone")))
    with live_server(create_app(service, model_source="petri-tiny")) as live:
        yield live.url, service
    service.shutdown()


def assert_title_whole_and_clear(found: dict) -> None:
    """``found`` (HEATMAP_LABELS): the title lies inside the figure, and no label above the plot
    touches it or another label."""
    title, svg = found["title"], found["svg"]
    assert svg["left"] - 0.5 <= title["left"] and title["right"] <= svg["right"] + 0.5, (title, svg)
    assert title["top"] >= svg["top"] - 0.5, (title, svg)
    for i, a in enumerate(found["labels"]):
        assert apart(a, title), (a, title)
        for b in found["labels"][i + 1:]:
            assert apart(a, b), (a, b)


@pytest.mark.parametrize("width", [1440, 420])
def test_the_flip_map_while_sampling_and_after_a_cancel_keeps_its_title_whole(app, browser, width, tmp_path):
    """The run is held after each step (a gate in the service): the live map's title, then the
    cancelled map's (the run's id and "cancelled" on a line of their own), each wholly inside the
    figure and clear of the anchor labels."""
    url, service = app
    page = open_dish(browser, url, width)
    try:
        with held_after_each_step(service) as gate:
            page.fill("#petri-samples input[type=number]", "2")
            page.click("#petri-run")
            page.wait_for_function("(document.querySelector('#petri-heatmap .gtitle') || {}).textContent?.includes('while sampling')")
            page.wait_for_timeout(300)
            assert_title_whole_and_clear(page.evaluate(HEATMAP_LABELS, "#petri-heatmap"))
            page.click("#petri-cancel")
            page.wait_for_selector("#petri-status:has-text('Cancelling')")
            gate.set()
            page.wait_for_function("(document.querySelector('#petri-heatmap .gtitle') || {}).textContent?.includes('cancelled')")
            page.wait_for_timeout(300)
            found = page.evaluate(HEATMAP_LABELS, "#petri-heatmap")
            run_id = next(r["run_id"] for r in service.store.list_runs(5) if r["status"] == "cancelled")
            assert found["title"]["text"].startswith(f"run {run_id[:12]} · cancelled"), found["title"]
            assert_title_whole_and_clear(found)
            save_screenshot(page, tmp_path, f"dish-cancelled-{width}.png")
    finally:
        page.close()


#: The Run choice's shown text: its value, the right edge of the text as drawn in the box's font, the
#: box's content right edge and the left edge of its arrow.
CHOICE_TEXT = """() => {
  const box = document.querySelector('#petri-runs-choice input'), r = box.getBoundingClientRect(), cs = getComputedStyle(box);
  const ctx = document.createElement('canvas').getContext('2d'); ctx.font = cs.font;
  const left = r.left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft);
  const arrow = document.querySelector('#petri-runs-choice .icon-wrap').getBoundingClientRect();
  return {value: box.value, textRight: left + ctx.measureText(box.value).width,
          contentRight: r.right - parseFloat(cs.borderRightWidth) - parseFloat(cs.paddingRight), arrowLeft: arrow.left};
}"""


def test_the_run_choice_shows_a_short_form_that_fits_a_phone_and_the_whole_row_under_it(app, browser, tmp_path):
    """At 420 px the choice shows kind · minute stored · short id, drawn wholly inside its box and
    left of its arrow; the picked run's whole row (its id, event and time as stored) is under it."""
    from test_browser_pages import LONG_EVENT, seeded

    url, service = app
    run_id = seeded(service, [(None, LONG_EVENT)])
    run = service.store.get_run(run_id)
    page = open_dish(browser, url, 420)
    try:
        tab(page, "Runs")
        page.wait_for_function(f"document.querySelector('#petri-runs-choice input').value.includes('{run_id[:12]}')")
        shown = page.evaluate(CHOICE_TEXT)
        day, time = run["created_at"].split("T")
        assert shown["value"] == f"dish · {day} {time[:5]} · {run_id[:12]}", shown
        assert shown["textRight"] <= min(shown["contentRight"], shown["arrowLeft"]) + 0.5, shown
        picked = page.inner_text("#petri-runs-picked")
        assert run_id in picked and run["created_at"] in picked and LONG_EVENT[:60] in picked, picked
        save_screenshot(page, tmp_path, "runs-choice-420.png")
    finally:
        page.close()


@pytest.mark.parametrize("width", [1440, 420])
def test_the_compare_difference_map_and_pair_table_read_whole(app, browser, width, tmp_path):
    """After a comparison: the difference map's title (the run on a line of its own) inside the
    figure, its anchor labels apart from each other and the title; no pair in the side-by-side pair
    table broken mid-word."""
    url, service = app
    page = open_dish(browser, url, width)
    try:
        run_id = run_compare(page, {r["run_id"] for r in service.store.list_runs(200)}, samples=2, steps=4)
        page.wait_for_function(f"(document.querySelector('#petri-cmp-difference .gtitle') || {{}}).textContent?.includes('{run_id[:12]}')")
        page.wait_for_timeout(500)
        found = page.evaluate(HEATMAP_LABELS, "#petri-cmp-difference")
        assert "flip difference (contradictory − benign)" in found["title"]["text"], found["title"]
        assert_title_whole_and_clear(found)
        page.wait_for_function("[...document.querySelectorAll('#petri-cmp-pairs [role=gridcell]')].some((c) => c.innerText.includes('|'))")
        assert not page.evaluate(BROKEN_WORDS, "#petri-cmp-pairs thead th, #petri-cmp-pairs [role=gridcell]")
        save_screenshot(page, tmp_path, f"compare-difference-{width}.png")
    finally:
        page.close()


#: The Model tab's tables: each one's right edge against its text block's, and the words of their
#: cells whose letters lie on more than one line (a break after a hyphen, dash, slash, underscore or
#: dot, or inside a code value, is a place a word may break).
MODEL_TABLES = """() => {
  const tables = [...document.querySelectorAll('#petri-model table')];
  const broken = [];
  for (const cell of document.querySelectorAll('#petri-model :is(th, td)')) {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walk.nextNode())) {
      if (node.parentElement.closest('code')) continue;
      const re = /\\S+/g; let m;
      while ((m = re.exec(node.textContent))) {
        if (/[-–/_.]/.test(m[0])) continue;
        const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        if (new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size > 1) broken.push(m[0]);
      }
    }
  }
  return {broken, tables: tables.map((t) => [t.getBoundingClientRect().right, t.closest('.prose').getBoundingClientRect().right])};
}"""


@pytest.mark.parametrize("width", [1440, 420])
def test_the_model_tabs_tables_keep_their_words_whole_and_fit(app, browser, width, tmp_path):
    """At 420 px the Model tab's property column was 46 px wide and read "pr/o/p/er/ty", "mod/el",
    "vo/ca/bu/lar/y": no word of a table is broken between two letters, and every table ends inside
    its text block."""
    url, _ = app
    page = open_dish(browser, url, width)
    try:
        tab(page, "Model")
        page.wait_for_selector("#petri-model table")
        found = page.evaluate(MODEL_TABLES)
        assert len(found["tables"]) >= 2 and not found["broken"], found
        assert all(right <= block + 1 for right, block in found["tables"]), found
        save_screenshot(page, tmp_path, f"model-{width}.png")
    finally:
        page.close()
