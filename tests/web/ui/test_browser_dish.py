"""The Dish tab in a real browser (Debian's chromium via Playwright) on both embedded model families
(``petri-tiny``: uniform diffusion; ``petri-tiny-mdm``: masked diffusion), issue 60: the step-by-step
token figure shows what the viewer above it shows (the canvas or the raw argmax, as the viewer's
choice says; ``[MASK]`` on a masked canvas; whole tokens) and its last row is the final text; the
default keeps the user's layout; the page fits a 420 px screen. Expected cells come from the stored
trajectory itself (``service.load_events``), never from the figure code."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import replace

import pytest
from test_browser import CHROMIUM, open_settings, run_compare, save_screenshot, tab, wait_new_done
from test_browser_legibility import browser  # noqa: F401  (a fixture: one chromium for the module)

from petri.core.watch import NO_WATCH
from petri.measure.replay import visible_text

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

MODELS = {"uniform": "petri-tiny", "masked": "petri-tiny-mdm"}


@pytest.fixture(scope="module", params=sorted(MODELS))
def app(request, tmp_path_factory, live_server):
    """(family, url, service): the app on an embedded model of each family, a store of its own."""
    from petri.app.service import PetriService
    from petri.engine.torch.model import load_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    lm = load_model(MODELS[request.param], device="cpu")
    service = PetriService(lm, RunStore(tmp_path_factory.mktemp(f"dish-{request.param}")))
    with live_server(create_app(service, model_source=MODELS[request.param])) as live:
        yield request.param, live.url, service
    service.shutdown()


def open_dish(browser, url: str, width: int):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(300_000)  # a run on a 2-core machine beside two busy loops
    page.goto(url)
    page.wait_for_selector("#petri-run")
    return page


def run_dish(page, service, samples: int = 2, steps: int | None = None) -> tuple[str, object]:
    """Run the tab's dish with ``samples`` samples (and ``steps`` at most); (run id, its stored trajectory)."""
    before = {r["run_id"] for r in service.store.list_runs(200)}
    page.fill("#petri-samples input[type=number]", str(samples))
    if steps is not None:
        open_settings(page)
        page.fill("#petri-steps input[type=number]", str(steps))
    page.click("#petri-run")
    run_id = wait_new_done(page, "#petri-status", before)
    page.wait_for_selector("#petri-traj .pt[data-live='0']")
    return run_id, service.load_events(run_id)[0][2]


FIGURE = "#petri-traj-figure .js-plotly-plot"


def figure_cells(page) -> dict:
    """The drawn figure's mode (its meta), title and cell texts, row by row (the grey [MASK] trace's
    text where it has one), and every drawn cell text's width against the cell's."""
    return page.evaluate(f"""() => {{
        const gd = document.querySelector('{FIGURE}');
        const heat = gd.data.filter((t) => t.type === 'heatmap');
        const rows = heat[heat.length - 1].text.map((row, y) => row.map((t, x) =>
            heat.map((h) => h.text[y][x]).find((s) => s) || t));
        const xa = gd._fullLayout.xaxis, cell = Math.abs(xa.l2p(1) - xa.l2p(0));
        const widths = [...gd.querySelectorAll('.hm text, .heatmaplayer text')].map((e) => e.getBBox().width);
        return {{mode: gd.layout.meta.mode, title: gd.layout.title.text, rows, cell, widths}};
    }}""")


def shown_texts(tokens, ids) -> list[str]:
    return [visible_text(tokens(int(i))) for i in ids]


def expected_rows(traj, tokens, mode: str, mask_id) -> list[list[str]]:
    """The figure's rows as the stored trajectory says: each step's canvas (or argmax), anchors their
    own token, ``[MASK]`` where a masked canvas is still masked, then the final text."""
    steps, anchors = int(traj.steps[0]), traj.anchor_mask[0]
    rows = []
    for t in range(steps):
        ids = (traj.canvas if mode == "canvas" else traj.argmax)[0, t].copy()
        ids[anchors] = traj.final_ids[0][anchors]
        rows.append(["[MASK]" if mask_id is not None and mode == "canvas" and i == mask_id and not a else text
                     for i, a, text in zip(ids, anchors, shown_texts(tokens, ids))])
    rows.append(shown_texts(tokens, traj.final_ids[0]))
    return rows


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_the_token_figure_shows_what_the_viewer_shows_and_ends_on_the_final_text(app, browser, tmp_path):
    """Issue 60, item 3: the figure drew the raw argmax under a viewer showing the canvas (no
    ``[MASK]`` on the masked model, "custo" under the *person* anchor), its last row was not the final
    text, it said "faded = renoised" on the masked model and cut tokens to 5 characters."""
    from petri.web.tokens import TokenText

    family, url, service = app
    tokens = TokenText(service.lm.tokenizer)
    mask_id = service.lm.mask_token_id if family == "masked" else None
    page = open_dish(browser, url, 1440)
    try:
        # 8 steps keep the uniform run short beside busy loops; a masked run needs a step per block at least
        run_id, traj = run_dish(page, service, steps=8 if family == "uniform" else None)
        page.wait_for_function(f"document.querySelector('{FIGURE}') && document.querySelector('{FIGURE}').layout.meta")
        shown = figure_cells(page)
        assert shown["mode"] == "canvas" and page.locator("#petri-traj .pt-mode").input_value() == "canvas"
        rows = [[unescape(t) for t in row] for row in shown["rows"]]
        assert rows == expected_rows(traj, tokens, "canvas", mask_id)
        assert rows[-1] == shown_texts(tokens, traj.final_ids[0])  # the last row is the final text
        assert "".join(tokens(int(i)) for i in traj.final_ids[0]) == traj.final_texts[0]
        if family == "masked":
            assert any("[MASK]" in row for row in rows[:-1]) and "renoised" not in shown["title"]
        else:
            assert "renoised" in shown["title"] and "[MASK]" not in shown["title"]
        # whole tokens: no text cut, and each drawn text fits its cell
        assert max(len(t) for row in rows for t in row) > 5 or family == "masked"
        assert shown["widths"] and max(shown["widths"]) <= shown["cell"] + 0.5, (max(shown["widths"]), shown["cell"])
        save_screenshot(page, tmp_path, f"dish-figure-{family}-canvas.png")
        # the viewer's choice moves the figure
        page.select_option("#petri-traj .pt-mode", "argmax")
        page.wait_for_function(f"document.querySelector('{FIGURE}').layout.meta.mode === 'argmax'")
        shown = figure_cells(page)
        assert [[unescape(t) for t in row] for row in shown["rows"]] == expected_rows(traj, tokens, "argmax", None)
        assert "raw argmax" in shown["title"]
        # another sample keeps the choice, in the viewer and the figure
        page.locator("#petri-sample input[type=number]").fill("1")
        page.locator("#petri-sample input[type=number]").press("Enter")
        page.wait_for_function("document.querySelector('#petri-traj .pt').dataset.sample === '1'")
        page.wait_for_function(f"document.querySelector('{FIGURE}').layout.title.text.startsWith('sample 1')")
        assert page.locator("#petri-traj .pt-mode").input_value() == "argmax"
        assert figure_cells(page)["mode"] == "argmax"
    finally:
        page.close()


#: The final text ``sel``: words whose letters lie on more than one line, anchors alone on their line
#: (no other piece's text shares it), and pieces that start a new line though their first word fits
#: after the piece before (the pieces are boxes, not one running text).
FINAL_TEXT_PROBE = """(sel) => {
  const field = document.querySelector(sel + ' .textfield');
  const broken = [];
  for (const el of field.querySelectorAll('.token .text')) {
    const node = el.firstChild;
    if (!node || node.nodeType !== 3) continue;
    const re = /\\S+/g; let m;
    while ((m = re.exec(node.textContent))) {
      const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
      if (new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size > 1) broken.push(m[0]);
    }
  }
  // a piece that starts on a new line although its first word fits after the piece before it: the
  // pieces do not flow as one text (each a box of its own)
  const right = field.getBoundingClientRect().right, pieces = [...field.querySelectorAll('.token .text')];
  const unflowed = [];
  for (let i = 1; i < pieces.length; i++) {
    const prev = pieces[i - 1], next = pieces[i], node = next.firstChild;
    if (!node || node.nodeType !== 3 || /\\n\\s*$/.test(prev.textContent) || /^\\s*\\n/.test(node.textContent)) continue;
    const a = [...prev.getClientRects()].pop(), b = next.getClientRects()[0];
    const m = /\\S+/.exec(node.textContent);
    if (!a || !b || !m) continue;
    const r = document.createRange(); r.setStart(node, 0); r.setEnd(node, m.index + m[0].length);
    const first = r.getClientRects()[0];
    if (b.top > a.top + 2 && a.right + (first ? first.width : 0) + 8 < right) unflowed.push(next.textContent.slice(0, 20));
  }
  const plain = [...field.querySelectorAll('.token:not(.highlighted) .text')].flatMap((e) => [...e.getClientRects()]);
  const alone = [...field.querySelectorAll('.token.highlighted')].filter((a) => {
    const box = a.getClientRects()[0];
    return !plain.some((b) => b.bottom > box.top + 2 && b.top < box.bottom - 2);
  }).map((a) => a.textContent.trim());
  return {broken, alone, unflowed, anchors: field.querySelectorAll('.token.highlighted').length};
}"""

#: The table ``sel``'s header cells and its drawn value cells, each with whether it is wholly inside the
#: table's block (which scrolls) and the page.
TABLE_IN_VIEW = """(sel) => {
  const block = document.querySelector(sel), view = block.getBoundingClientRect();
  const whole = (e) => { const r = e.getBoundingClientRect();
    return r.left >= Math.max(view.left, 0) - 1 && r.right <= Math.min(view.right, innerWidth) + 1; };
  const drawn = (e) => e.getBoundingClientRect().height > 0 && e.getBoundingClientRect().width > 0 && e.innerText.trim();
  return {heads: [...block.querySelectorAll('thead th')].filter(drawn).map((h) => [h.innerText.trim(), whole(h)]),
          cells: [...block.querySelectorAll('[role=gridcell]')].filter(drawn).map((c) => [c.innerText.trim(), whole(c)])};
}"""


#: The words (of the elements ``sel`` matches) whose letters lie on more than one line.
BROKEN_WORDS = """(sel) => {
  const broken = [];
  for (const el of document.querySelectorAll(sel)) {
    if (!el.getBoundingClientRect().height) continue;
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walk.nextNode())) {
      const re = /\\S+/g; let m;
      while ((m = re.exec(node.textContent))) {
        const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        if (new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


#: The flip map's labels above the plot and its title (boxes), and the svg's box.
HEATMAP_LABELS = """(sel) => {
  const svg = document.querySelector(sel + ' .main-svg');
  const box = (e) => { const r = e.getBoundingClientRect(); return {text: e.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return {labels: [...document.querySelectorAll(sel + ' g.annotation')].map(box),
          title: box(document.querySelector(sel + ' .gtitle')), svg: box(svg),
          hovers: (document.querySelector(sel + ' .js-plotly-plot').layout.annotations || []).map((a) => a.hovertext || '')};
}"""  # noqa: E501 - JavaScript run in the page


def apart(a: dict, b: dict, gap: float = 1.0) -> bool:
    return (a["right"] + gap <= b["left"] or b["right"] + gap <= a["left"] or
            a["bottom"] + gap <= b["top"] or b["bottom"] + gap <= a["top"])


@pytest.mark.parametrize("width", [1440, 420])
def test_the_dish_keeps_the_users_layout_and_reads_whole_at_each_width(app, browser, width, tmp_path):
    """Issue 60, items 4 and 6: shuffle per sample was on by default, so no sample had the chip where
    the user put it; the final text broke words mid-word with each anchor on a line of its own; the
    pair table cut off its values at 420 px; the shuffled flip map's slot labels touched. Now: by
    default every sample pins each concept where its chip is; with shuffling on, the canvas says so
    and the slot labels say per sample what sat there, apart from each other and the title."""
    family, url, service = app
    if family != "uniform":
        pytest.skip("layout: one family is enough")
    page = open_dish(browser, url, width)
    try:
        assert not page.locator("#petri-shuffle-per-sample input").is_checked()  # the default keeps the layout
        # the canvas control draws its chips after the page's first paint (under load, seconds later)
        page.wait_for_function("document.querySelectorAll('#petri-canvas .pc-chip').length >= 3")
        chips = dict(page.locator("#petri-canvas .pc-chip").evaluate_all("els => els.map(e => [e.dataset.concept, +e.dataset.start])"))
        assert page.evaluate("document.querySelector('#petri-canvas .pc-track').dataset.shuffled") == "0"
        run_id, traj = run_dish(page, service, samples=2, steps=4)
        for spans in traj.anchors:  # every sample: each concept where its chip is
            assert {a.concept: a.start for a in spans} == chips
        page.wait_for_selector("#petri-final .token.highlighted")
        text = page.evaluate(FINAL_TEXT_PROBE, "#petri-final")
        assert text["anchors"] >= 3 and not text["broken"] and not text["alone"] and not text["unflowed"], text
        page.wait_for_function("[...document.querySelectorAll('#petri-pairs [role=gridcell]')].some((c) => c.innerText.includes('|'))")
        pairs = page.evaluate(TABLE_IN_VIEW, "#petri-pairs")
        assert len(pairs["heads"]) == 3 and len(pairs["cells"]) >= 3, pairs
        assert all(whole for _, whole in pairs["heads"] + pairs["cells"]), pairs
        # no header or pair broken mid-word ("n_segment/s", "instabili/ty")
        assert not page.evaluate(BROKEN_WORDS, "#petri-pairs thead th, #petri-pairs [role=gridcell]")
        # the flips chart: its title whole inside the figure, clear of its anchor labels
        page.wait_for_selector("#petri-flips .gtitle")
        bars = page.evaluate(HEATMAP_LABELS, "#petri-flips")
        assert bars["title"]["right"] <= bars["svg"]["right"] + 0.5 and bars["title"]["top"] >= bars["svg"]["top"] - 0.5, bars
        assert all(apart(label, bars["title"]) for label in bars["labels"]), bars
        save_screenshot(page, tmp_path, f"dish-{width}.png")
        # shuffled per sample: the canvas says so, the flip map's slot labels say what each sample had there
        page.check("#petri-shuffle-per-sample input")
        page.wait_for_function("document.querySelector('#petri-canvas .pc-track').dataset.shuffled === '1'")
        assert "Shuffled per sample" in page.inner_text("#petri-canvas .pc-msg")
        run_id, traj = run_dish(page, service, samples=4)
        page.wait_for_function(f"(document.querySelector('#petri-heatmap .gtitle') || {{}}).textContent?.includes('{run_id[:12]}')")
        page.wait_for_timeout(500)
        found = page.evaluate(HEATMAP_LABELS, "#petri-heatmap")
        slots = [b for b in found["labels"] if b["text"].startswith("slot")]
        if len({tuple(sorted((a.start, a.concept) for a in spans)) for spans in traj.anchors}) > 1:
            assert slots, found["labels"]
            for k, hover in enumerate(h for h in found["hovers"] if h.startswith("slot")):
                by_sample = [sorted(spans, key=lambda a: a.start)[k].concept for spans in traj.anchors]
                assert hover.endswith("per sample: " + " · ".join(f"{s} {c}" for s, c in enumerate(by_sample))), hover
        for i, a in enumerate(found["labels"]):
            assert apart(a, found["title"]), (a, found["title"])
            assert a["left"] >= found["svg"]["left"] - 0.5 and a["right"] <= found["svg"]["right"] + 0.5, a
            for b in found["labels"][i + 1:]:
                assert apart(a, b), (a, b)
        title, svg = found["title"], found["svg"]
        assert title["right"] <= svg["right"] + 0.5 and title["top"] >= svg["top"] - 0.5, (title, svg)  # not cut
        save_screenshot(page, tmp_path, f"dish-shuffled-{width}.png")
    finally:
        page.close()


def test_the_viewer_draws_its_pause_mark_and_sets_renoised_pieces_apart_in_flowing_text(browser, tiny_lm):
    """Issue 60, item 11: the Pause glyph (U+23F8) was a box in fonts without it, and flowing text ran
    renoised pieces (random tokens) into their neighbours ("lovelyottedarer"). The viewer alone, as
    Gradio hands it a record (test_browser_viewer_families' harness)."""
    from test_browser_viewer_families import DISH, harness, view_of

    from petri.core.trajectory import SamplerSettings
    from petri.engine.seeding import seed_dish

    traj = seed_dish(tiny_lm, DISH, 1, SamplerSettings(max_denoising_steps=6, entropy_bound=3.0), seed=3)
    record, _ = view_of(tiny_lm, traj)
    page = browser.new_page(viewport={"width": 1200, "height": 700})
    try:
        page.set_content(harness(record))
        page.click(".pt-play")
        page.wait_for_function("document.querySelector('.pt').dataset.playing === '1'")
        # every character the button shows is drawn by the font, not its "missing glyph" box: a
        # character's drawing differs from that of a code point no font has (U+10FFFD, private use)
        missing = page.evaluate("""() => {
            const btn = document.querySelector('.pt-play'), font = getComputedStyle(btn).font;
            const draw = (ch) => { const c = document.createElement('canvas'); c.width = 40; c.height = 40;
                const x = c.getContext('2d'); x.font = font; x.fillText(ch, 5, 30); return c.toDataURL(); };
            const none = draw(String.fromCodePoint(0x10FFFD));
            return [...btn.textContent].filter((ch) => ch.trim() && draw(ch) === none);
        }""")
        assert missing == [], missing
        mark = page.evaluate("(() => { const m = document.querySelector('.pt-play .pt-pause-mark'); "
                             "return m ? m.getBoundingClientRect().width : 0; })()")
        assert "Pause" in page.inner_text(".pt-play") and mark >= 6
        page.click(".pt-play")  # pause
        page.check(".pt-flow-toggle")
        # a step with two renoised pieces side by side on the canvas: drawn apart
        t, i = next((t, i) for t in range(int(traj.steps[0]) - 1) for i in range(traj.canvas_length - 1)
                    if not traj.accepted[0, t, i] and not traj.accepted[0, t, i + 1])
        page.locator(".pt-slider").fill(str(t))
        page.wait_for_function(f"document.querySelector('.pt').dataset.step === '{t}'")
        gap = page.evaluate(f"""() => {{
            const a = document.querySelector('.pt-tok[data-pos="{i}"]').getClientRects();
            const b = document.querySelector('.pt-tok[data-pos="{i + 1}"]').getClientRects();
            const ra = a[a.length - 1], rb = b[0];
            return Math.abs(rb.top - ra.top) > 2 ? 99 : rb.left - ra.right;
        }}""")
        assert gap >= 4, gap
    finally:
        page.close()


#: The runs table's scroller (its scroll and client widths), its right edge, the headers shown and the
#: shown cells whose text is wider than the cell.
RUNS_TABLE_FIT = """() => {
  const table = document.querySelector('#petri-runs-table'), box = table.querySelector('.virtual-table-viewport');
  const shown = (e) => e.getBoundingClientRect().width > 0;
  return {scroll: box.scrollWidth, client: box.clientWidth, right: table.getBoundingClientRect().right, width: innerWidth,
          heads: [...table.querySelectorAll('thead th')].filter(shown).map((h) => h.innerText.trim()),
          cut: [...table.querySelectorAll('.body-cell')].filter(shown).filter((c) => c.scrollWidth > c.clientWidth + 1)
                 .map((c) => c.innerText.trim())};
}"""


#: The text of the runs table's rows as drawn (every column's cell, shown or not on a phone): not the
#: table's innerText (a phone's hidden run_id column is not in it) nor its text content (Gradio's
#: hidden sizing rows are in it).
LISTED = "[...document.querySelectorAll('#petri-runs-table .body-cell')].map((c) => c.textContent).join(' ')"


def test_runs_open_says_it_is_working_shows_the_result_and_the_list_reads_whole(app, browser, tmp_path):
    """Issue 60, items 7 and 9 (420 px): Open took seconds with nothing shown and left the page
    where it was; search filtered only on Enter and an empty result said nothing; a deleted run stayed
    listed after a failed Open; at 420 px the Run choice was cut and the table showed only kind and
    what, scrolling sideways. Now the table fits the phone (kind, what and headline, wrapped); the button says "Opening…", the opened tab's
    results come into view, the list filters as one types and says when nothing matches, a failed Open reads the list again, and the picked
    run's whole row is written under the choice."""
    from test_browser_pages import seeded

    family, url, service = app
    if family != "uniform":
        pytest.skip("the Runs tab: one family is enough")
    older = seeded(service, [(None, "The ledger was balanced on Monday.")])
    newer = seeded(service, [(None, "The parcel left the depot at noon.")])
    page = open_dish(browser, url, 420)
    try:
        tab(page, "Runs")
        page.wait_for_function(f"{LISTED}.includes('{newer}')")
        page.wait_for_function(f"document.querySelector('#petri-runs-choice input').value.includes('{newer[:12]}')")
        picked = page.inner_text("#petri-runs-picked")
        assert newer in picked and "parcel left the depot" in picked and "headline" in picked, picked
        # the table fits the phone (its nine columns of fixed width scrolled sideways): kind, what and
        # headline, each cell's text wrapped inside its cell
        fit = page.evaluate(RUNS_TABLE_FIT)
        assert fit["heads"] == ["kind", "what", "headline"], fit
        assert fit["scroll"] <= fit["client"] and fit["right"] <= fit["width"] and not fit["cut"], fit
        page.fill("#petri-runs-search input, #petri-runs-search textarea", "ledger")  # no Enter
        page.wait_for_function(f"!{LISTED}.includes('{newer}')")
        assert older in page.evaluate(LISTED)
        no_match = "#petri-runs-status:has-text('No stored run matches')"
        page.fill("#petri-runs-search input, #petri-runs-search textarea", "zebra crossing")
        page.wait_for_selector(no_match)
        page.fill("#petri-runs-search input, #petri-runs-search textarea", "")
        page.wait_for_function(f"{LISTED}.includes('{newer}')")
        # a run deleted behind the page: Open fails with one line, and the list no longer holds it
        page.wait_for_function(f"document.querySelector('#petri-runs-choice input').value.includes('{newer[:12]}')")
        service.remove_run(newer, None)
        page.click("#petri-runs-open")
        page.wait_for_selector("#petri-runs-status:has-text('Cannot open')")
        page.wait_for_function(f"!{LISTED}.includes('{newer}')")
        # Open: the button says it works, then the opened tab's result is in view
        page.wait_for_function(f"document.querySelector('#petri-runs-choice input').value.includes('{older[:12]}')")
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.evaluate("""() => { window.__openLabels = []; const b = document.querySelector('#petri-runs-open');
            new MutationObserver(() => window.__openLabels.push(b.innerText.trim())).observe(b, {subtree: true, childList: true, characterData: true}); }""")  # noqa: E501 - JavaScript run in the page
        page.click("#petri-runs-open")
        page.wait_for_selector(f"#petri-status:has-text('{older}')")
        page.wait_for_function("document.querySelector('#petri-runs-open').innerText.trim() === 'Open'")
        assert "Opening…" in page.evaluate("window.__openLabels")
        page.wait_for_function("""(() => { const r = document.querySelector('#petri-run-badge').getBoundingClientRect();
            return r.top >= -1 && r.bottom <= innerHeight + 1; })()""")
        save_screenshot(page, tmp_path, "runs-opened-420.png")
    finally:
        page.close()


def test_compare_ties_each_text_and_trajectory_to_one_sample(app, browser):
    """Issue 60, item 10: Compare could show Event A's trajectory for sample 1 under "benign: sample 0"
    final text, with no selector tying them. One *Sample* selector now sets both texts and both views."""
    family, url, service = app
    if family != "uniform":
        pytest.skip("the Compare tab: one family is enough")
    page = open_dish(browser, url, 1440)
    try:
        run_compare(page, {r["run_id"] for r in service.store.list_runs(200)}, samples=3, steps=4)
        assert not page.locator("#petri-traj-a-sample").is_visible()  # the views' own selectors are gone
        box = page.locator("#petri-cmp-sample input[type=number]")
        box.fill("2")
        box.press("Enter")
        for view in ("#petri-traj-a", "#petri-traj-b"):
            page.wait_for_function(f"document.querySelector('{view} .pt').dataset.sample === '2'")
        for text in ("#petri-cmp-text-a", "#petri-cmp-text-b"):
            page.wait_for_selector(f"{text} label:has-text('sample 2')")
        assert "sample 2" in page.inner_text("#petri-traj-a .pt-step") and "sample 2" in page.inner_text("#petri-traj-b .pt-step")
    finally:
        page.close()


def says_busy_then_shows_files(page, button: str, files: str, label: str) -> None:
    """Click ``button``: it said "Preparing…" while it worked, its label is ``label…`` again, and its
    files came right under it (less than 150 px below) and in view."""
    page.evaluate("""(sel) => { window.__busyLabels = []; const b = document.querySelector(sel);
        new MutationObserver(() => window.__busyLabels.push(b.innerText.trim())).observe(b, {subtree: true, childList: true, characterData: true}); }""", button)  # noqa: E501 - JavaScript run in the page
    page.click(button)
    page.wait_for_selector(f"{files} td.filename", timeout=300_000)
    page.wait_for_function("([sel, label]) => document.querySelector(sel).innerText.startsWith(label)", arg=[button, label])
    assert any(text.startswith("Preparing") for text in page.evaluate("window.__busyLabels")), page.evaluate("window.__busyLabels")
    near = page.evaluate("""([b, f]) => { const r = document.querySelector(b).getBoundingClientRect();
        const g = document.querySelector(f).getBoundingClientRect();
        return {gap: g.top - r.bottom, inView: g.top >= -1 && g.top < innerHeight}; }""", [button, files])
    assert 0 <= near["gap"] < 150 and near["inView"], near


@contextmanager
def held_after_each_step(service):
    """Within the block, a seed run of ``service`` waits after each step (a gate); at its end the gate
    opens and the service is as before. Yields the gate (set it to let the run go on at once)."""
    gate, submit = threading.Event(), service.submit_seed

    def held(plan, *, owner=None, watch=NO_WATCH):
        def step(*args):
            watch.on_step(*args)
            gate.wait(120)

        return submit(plan, owner=owner, watch=replace(watch, on_step=step if watch.on_step else None))

    service.submit_seed = held
    try:
        yield gate
    finally:
        gate.set()
        del service.submit_seed


def test_downloads_and_cancel_say_what_they_do_where_the_user_clicked(app, browser):
    """Issue 60, items 7 and 11: "Prepare downloads" took about 15 s with nothing at the button and
    the files 900 px lower, and so did "Download figures" (its files beside the button, nothing
    shown); the "Cancelling…" toast stayed after the run had stopped; the Sample slider kept the
    last run's range while a new run sampled and after it was cancelled."""
    family, url, service = app
    if family != "uniform":
        pytest.skip("one family is enough")
    page = open_dish(browser, url, 1440)
    try:
        run_dish(page, service, samples=4, steps=4)
        says_busy_then_shows_files(page, "#petri-traj-export", "#petri-traj-files", "Prepare downloads")
        # "Download figures" (shared by Dish and Study): "Preparing…" at the button, the files right under it
        says_busy_then_shows_files(page, "#petri-dish-figures-button", "#petri-dish-figures", "Download figures")
        assert page.get_attribute("#petri-sample input[type=range]", "max") == "3"
        # a run held after each step (the gate), cancelled: the status line says so, then that it
        # stopped; no toast stays
        with held_after_each_step(service):
            page.fill("#petri-samples input[type=number]", "2")
            page.click("#petri-run")
            page.wait_for_function("(document.querySelector('#petri-status').innerText || '').includes('Sampling… step')")
            assert page.get_attribute("#petri-sample input[type=range]", "max") == "1"  # not the last run's 0..3
            page.click("#petri-cancel")
            page.wait_for_selector("#petri-status:has-text('Cancelling')")
        page.wait_for_function("(document.querySelector('#petri-status').innerText || '').includes('Stopped')")
        page.wait_for_timeout(500)
        toasts = page.evaluate("[...document.querySelectorAll('.toast-body, [data-testid=toast-body]')].map((t) => t.innerText)")
        assert not any("Cancelling" in t for t in toasts), toasts
        assert page.get_attribute("#petri-sample input[type=range]", "max") == "1"
    finally:
        page.close()
