"""Legibility of the figures and controls in a real browser (Debian's chromium via Playwright), with no
server: each page holds one figure (drawn by the plotly.js that the plotly package ships) or one of
the UI's HTML controls (its HTML, CSS and script, handed a value as Gradio would), at the widths a
researcher meets: a half-width Compare panel and a 420 px screen. Issue 49: slot labels that overlapped
(item 6), a flip outline in a concept's colour (item 5), 7 px cell text, canvas axis labels cut to "0" and
"6", a speed selector cut to "2.5 st" and a 2 × 2 Jaccard heatmap 520 px tall (item 13)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly
import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS

from petri.core.trajectory import AnchorSpan
from petri.study.figures.anchor_marks import aggregate_anchor_boxes
from petri.study.figures.plots import flip_heatmap, jaccard_heatmap
from petri.web.ui.widgets.canvas import CANVAS_CSS, CANVAS_HTML, CANVAS_JS
from petri.web.ui.widgets.trajectory import VIEW_CSS, VIEW_HTML, VIEW_JS

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    yield page
    page.close()


def draw_figure(page, fig, width: int) -> None:
    """``fig`` drawn into a ``width`` px wide box, as the UI draws a responsive figure (no fixed width)."""
    page.set_content(f"<html><body style='margin:0'><div id='fig' style='width:{width}px'></div></body></html>")
    page.add_script_tag(path=str(PLOTLY_JS))
    spec = fig.to_plotly_json()
    spec["layout"].pop("width", None)
    page.evaluate("(s) => Plotly.newPlot('fig', s.data, {...s.layout, autosize: true}, {responsive: true})",
                  json.loads(json.dumps(spec, cls=plotly.utils.PlotlyJSONEncoder)))
    page.wait_for_selector("#fig .main-svg")


def label_boxes(page) -> list[dict]:
    """The drawn box of every annotation of the figure (the anchor and slot labels) and the svg's top."""
    return page.evaluate("""() => {
        const top = document.querySelector('#fig .main-svg').getBoundingClientRect().top;
        return [...document.querySelectorAll('#fig g.annotation')].map((g) => { const r = g.getBoundingClientRect();
            return {text: g.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom, svgTop: top}; });
    }""")


def assert_apart(boxes: list[dict]) -> None:
    for i, a in enumerate(boxes):
        assert a["top"] >= a["svgTop"] - 0.5, f"label {a['text']!r} is above the figure"
        for b in boxes[i + 1:]:
            apart = a["right"] <= b["left"] + 0.5 or b["right"] <= a["left"] + 0.5 or \
                a["bottom"] <= b["top"] + 0.5 or b["bottom"] <= a["top"] + 0.5
            assert apart, f"labels {a['text']!r} and {b['text']!r} overlap: {a} {b}"


def shuffled_slots() -> list:
    """Three samples whose four concepts sit in the same four slots, in another order each."""
    concepts = ["person", "inventory", "order", "customer"]
    starts = [20, 24, 27, 31]
    return [[AnchorSpan(str(c), s, (i,)) for c, s, i in zip(np.roll(concepts, k), starts, range(4))] for k in range(3)]


@pytest.mark.parametrize("width", [380, 620])
def test_slot_labels_of_a_flip_map_never_overlap_at_half_width_or_on_a_narrow_screen(page, width):
    """Item 6: a shuffled dish's slot labels ("slot 1: person/inventory/…") on a 64-position flip map drawn
    380 px wide (a 420 px screen) and 620 px (half of a 1440 px page, as Compare draws it): no two
    labels overlap and none leaves the figure's top. Long names are cut and given whole on hover."""
    boxes = aggregate_anchor_boxes(shuffled_slots())
    assert [b.concept.split(":")[0] for b in boxes] == ["slot 1", "slot 2", "slot 3", "slot 4"]
    assert boxes[0].detail.startswith("slot 1: ") and boxes[0].detail.count("/") == 2
    fig = flip_heatmap(np.zeros((6, 64)), n_samples=3, anchors=boxes, pinned=np.zeros(64, bool), title="flips")
    draw_figure(page, fig, width)
    drawn = label_boxes(page)
    assert len(drawn) == 4, drawn
    assert_apart(drawn)


def test_concept_labels_that_fit_stay_on_one_row(page):
    """Labels far apart are not stacked for nothing: three single concepts spread over the canvas share a row."""
    spans = [AnchorSpan(str(c), s, (i,)) for i, (c, s) in enumerate([("order", 4), ("inventory", 30), ("person", 56)])]
    draw_figure(page, flip_heatmap(np.zeros((4, 64)), anchors=spans, pinned=np.zeros(64, bool)), 620)
    drawn = label_boxes(page)
    assert len({round(b["top"]) for b in drawn}) == 1, drawn
    assert_apart(drawn)


def test_whole_trajectory_figure_writes_readable_cells_and_outlines_flips_in_dashed_black():
    """Items 5 and 13: the whole-trajectory figure writes its cell text at 10 px or more (it was 7 px)
    and draws a flip as a dashed black outline, never in a concept's red (``#d62728`` is *order*'s)."""
    from petri.core.dish import Dish
    from petri.engine.seeding import seed_dish
    from petri.engine.torch.tiny import tiny_random_model
    from petri.study.figures.trajectory_plots import READABLE_CELL_PX, trajectory_figure

    lm = tiny_random_model(canvas_length=24)
    traj = seed_dish(lm, Dish(("order", "person"), "An order was placed."), 1, lm.default_settings(), seed=3)
    fig = trajectory_figure(traj, 0, lambda i: lm.tokenizer.decode([i]), colors={"order": "#d62728"},
                            cell_px=READABLE_CELL_PX)
    heat = fig.data[0]
    assert heat.texttemplate == "%{text}" and heat.textfont.size >= 10
    flips = [s for s in fig.layout.shapes if s.type == "path"]
    assert int(np.count_nonzero(traj.argmax[0, 1:traj.steps[0]] != traj.argmax[0, :traj.steps[0] - 1])) > 0
    assert len(flips) == 1 and flips[0].line.dash == "dash" and flips[0].line.color == "black"
    assert all(getattr(t, "marker", None) is None or t.marker.color != "#d62728" for t in fig.data)


def test_whole_trajectory_figure_cells_in_the_browser(page):
    """The same figure drawn by plotly.js: every cell text is at least 10 px and the flips' outline is
    a dashed black stroke."""
    from petri.core.dish import Dish
    from petri.engine.seeding import seed_dish
    from petri.engine.torch.tiny import tiny_random_model
    from petri.study.figures.trajectory_plots import READABLE_CELL_PX, trajectory_figure

    lm = tiny_random_model(canvas_length=24)
    traj = seed_dish(lm, Dish(("order", "person"), "An order was placed."), 1, lm.default_settings(), seed=3)
    fig = trajectory_figure(traj, 0, lambda i: lm.tokenizer.decode([i]), cell_px=READABLE_CELL_PX)
    page.set_content("<html><body style='margin:0'><div id='fig'></div></body></html>")
    page.add_script_tag(path=str(PLOTLY_JS))
    page.evaluate("(s) => Plotly.newPlot('fig', s.data, s.layout)", json.loads(fig.to_json()))
    page.wait_for_selector("#fig .main-svg")
    found = page.evaluate("""() => ({
        sizes: [...document.querySelectorAll('#fig .hm text, #fig g.textpoint text, #fig .heatmaplayer text')]
               .map((t) => parseFloat(getComputedStyle(t).fontSize)),
        dashed: [...document.querySelectorAll('#fig path')].filter((p) => (p.style.strokeDasharray || '') !== ''
               && p.style.stroke.replace(/ /g, '') === 'rgb(0,0,0)').length,
        red: [...document.querySelectorAll('#fig path')].filter((p) => (p.style.stroke || '').replace(/ /g, '') === 'rgb(214,39,40)').length,
        widths: [...document.querySelectorAll('#fig .heatmaplayer text, #fig g.textpoint text')].map((t) => t.getBBox().width),
        cell: document.getElementById('fig')._fullLayout.xaxis._length / document.getElementById('fig')._fullLayout.xaxis.range
              .reduce((a, b) => b - a),
    })""")  # noqa: E501 - JavaScript run in the page
    assert found["sizes"] and min(found["sizes"]) >= 10, found["sizes"][:10]
    # no token's text spills into the next cell ("custome" in a 34 px cell did)
    assert max(found["widths"]) <= found["cell"], (max(found["widths"]), found["cell"])
    assert found["dashed"] >= 1 and found["red"] == 0, found


def canvas_harness(value: dict) -> str:
    return f"""<html><head><style>{CANVAS_CSS}</style></head><body style="margin:8px"><div id="el">{CANVAS_HTML}</div><script>
(() => {{
  const element = document.getElementById('el');
  const props = {{value: {json.dumps(value)}}};
  const watch = () => {{}}, trigger = () => {{}};
  (function (element, props, watch, trigger) {{ {CANVAS_JS} }})(element, props, watch, trigger);
}})();
</script></body></html>"""


@pytest.mark.parametrize(("length", "width"), [(64, 420), (64, 1440), (66, 1440), (7, 420)])
def test_canvas_axis_end_labels_are_whole(page, length, width):
    """Item 13: the canvas strip's axis labels, the first ("0") and the last (the canvas length) among
    them, lie wholly inside the strip (centred under their ticks they were cut to "0" and "6"), and no two
    labels overlap (a major tick just short of the end, 64 beside 66, gives way)."""
    page.set_viewport_size({"width": width, "height": 400})
    chips = [{"concept": "order", "start": 3, "tokens": 1, "color": "#d62728"}]
    page.set_content(canvas_harness({"canvas_length": length, "prefix": 0, "chips": chips, "error": "", "seq": None}))
    found = page.evaluate("""() => {
        const inner = document.querySelector('.pc-inner').getBoundingClientRect();
        return {inner: [inner.left, inner.right], labels: [...document.querySelectorAll('.pc-axis span')].map((s) => {
            const r = s.getBoundingClientRect(); return [s.textContent, r.left, r.right]; })};
    }""")
    left, right = found["inner"]
    labels = found["labels"]
    assert labels[0][0] == "0" and labels[-1][0] == str(length), labels
    for text, a, b in labels:
        assert a >= left - 0.5 and b <= right + 0.5, f"axis label {text!r} runs out of the strip: {found}"
    for (ta, _, ra), (tb, lb, _) in zip(labels, labels[1:]):
        assert ra <= lb + 0.5, f"axis labels {ta!r} and {tb!r} overlap"


def viewer_harness() -> str:
    record = {"note": "No trajectory yet: run a dish."}
    return f"""<html><head><style>{VIEW_CSS}</style></head><body style="margin:8px"><div id="el">{VIEW_HTML}</div><script>
(() => {{
  const element = document.getElementById('el');
  const props = {{value: {json.dumps(record)}}};
  (function (element, props, watch) {{ {VIEW_JS} }})(element, props, () => {{}});
}})();
</script></body></html>"""


@pytest.mark.parametrize("width", [420, 1440])
def test_the_viewers_speed_and_mode_selectors_are_never_cut(page, width):
    """Item 13: at 420 px the speed selector read "2.5 st": each selector of the viewer's bar is at least
    as wide as it is when nothing constrains it, and lies inside the page."""
    page.set_viewport_size({"width": width, "height": 600})
    page.set_content(viewer_harness())
    page.evaluate("""() => { const m = document.querySelector('.pt-mode');
        for (const v of ['canvas', 'argmax']) { const o = document.createElement('option'); o.value = v; o.textContent = v; m.appendChild(o); } }""")  # noqa: E501 - JavaScript run in the page
    found = page.evaluate("""() => [...document.querySelectorAll('.pt-bar select')].map((s) => {
        const free = s.cloneNode(true); free.style.position = 'absolute'; free.style.width = 'auto';
        document.body.appendChild(free); const natural = free.getBoundingClientRect().width; free.remove();
        const r = s.getBoundingClientRect(); return {cls: s.className, width: r.width, natural, right: r.right};
    })""")
    assert len(found) == 2
    for s in found:
        assert s["width"] >= s["natural"] - 0.5 and s["right"] <= width + 0.5, s


def test_a_two_by_two_jaccard_heatmap_is_not_drawn_tall(page):
    """Item 13: a 2 × 2 Jaccard heatmap was 520 px tall; it is now under 400 px in the page, and a
    6 × 6 one is taller than a 2 × 2 one (the height follows the templates)."""
    import pandas as pd

    names = ["t0", "t1"]
    small = jaccard_heatmap(pd.DataFrame([[1.0, 0.4], [0.4, 1.0]], index=names, columns=names), 0.4)
    six = [f"t{i}" for i in range(6)]
    big = jaccard_heatmap(pd.DataFrame(np.eye(6), index=six, columns=six), 0.0)
    assert big.layout.height > small.layout.height
    draw_figure(page, small, 1200)
    height = page.evaluate("() => document.querySelector('#fig .main-svg').getBoundingClientRect().height")
    assert height < 400, height
