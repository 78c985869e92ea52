"""The Probe tab in a real browser (Debian's chromium via Playwright) on the embedded small model
(a tiny random one where it is absent; the real read either way): a frame typed into the editor is drawn on the canvas control (pinned text
grey, the slot a chip of its own); Read draws one bar per alternative and the settling over the steps; nothing of
the tab overflows its box at 1440 px or at 420 px (the page never scrolls sideways, every figure
text lies inside its figure, every tab of the page stays in view); the read reopens from the Runs tab into the Probe tab;
an uploaded labelled set evaluates into its summary and reliability diagram.
``PETRI_SCREENSHOT_DIR=assets/screenshots`` keeps the tab's screenshot (docs/web.md)."""

from __future__ import annotations

import re

import pytest
from test_browser import CHROMIUM, opened_page, reopen_run, save_screenshot, tab
from test_browser_dish import BROKEN_WORDS

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

FRAME = "The answer is {{consistent}} for sure"
PROMPT = "Only 90 units are in stock, but a customer ordered 120."


@pytest.fixture(scope="module")
def served(tmp_path_factory, live_server):
    from petri.app.service import PetriService
    from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    if (EMBEDDED_MODEL_PATH / "config.json").exists():
        lm, source = load_model(EMBEDDED_MODEL_PATH, device="cpu"), str(EMBEDDED_MODEL_PATH)
    else:
        lm, source = tiny_random_model(canvas_length=48), None
    service = PetriService(lm, RunStore(tmp_path_factory.mktemp("probe-browser")))
    with live_server(create_app(service, model_source=source)) as live:
        yield live.url, service
    service.shutdown()


def fill_and_read(page, steps: int = 3, min_mass: float | None = None) -> str:
    """Type the prompt and frame, set the steps (and the least mass), press Read; the run id the
    status line names."""
    tab(page, "Probe")
    page.fill("#petri-probe-prompt textarea", PROMPT)
    page.fill("#petri-probe-frame textarea", FRAME)
    page.locator("#petri-probe-frame textarea").blur()
    page.wait_for_selector("#petri-probe-canvas .pc-chip[data-concept='{{consistent}}']")
    steps_box = page.locator("#petri-probe-steps input[type=number]")
    steps_box.fill(str(steps))
    steps_box.press("Enter")
    if min_mass is not None:
        mass_box = page.locator("#petri-probe-min-mass input")
        mass_box.fill(str(min_mass))
        mass_box.press("Enter")
        page.wait_for_timeout(300)
    before = re.findall(r"run ([0-9a-f]{32})", page.inner_text("#petri-probe-status"))
    page.click("#petri-probe-run")
    page.wait_for_function("""(before) => { const t = document.querySelector('#petri-probe-status').innerText;
        const run = t.match(/run ([0-9a-f]{32})/);
        return t.includes('Done:') && run && !before.includes(run[1]); }""", arg=before)
    status = page.inner_text("#petri-probe-status")
    found = re.search(r"run ([0-9a-f]{32})", status)
    assert found, status
    return found.group(1)


def overflow(page) -> dict:
    """What sticks out: the page's sideways scroll, every figure text of the Probe tab outside its
    figure's box (left/right), and titles of a figure that overlap, with the viewport width."""
    return page.evaluate("""() => {
        const out = [];
        for (const fig of document.querySelectorAll('#petri-probe-bars .main-svg, #petri-probe-settling .main-svg')) {
            const box = fig.getBoundingClientRect();
            if (!box.width) continue;
            for (const t of fig.parentElement.querySelectorAll('text')) {
                const r = t.getBoundingClientRect();
                if (!r.width || !t.textContent.trim()) continue;
                if (r.left < box.left - 1 || r.right > box.right + 1) out.push([t.textContent, r.left, r.right, box.left, box.right]);
            }
        }
        // the titles (the figure's and each subplot's) never overlap one another
        const overlapping = [];
        for (const fig of document.querySelectorAll('#petri-probe-bars, #petri-probe-settling')) {
            const titles = [...fig.querySelectorAll('.gtitle, g.annotation')].map((t) => [t.textContent, t.getBoundingClientRect()])
                .filter(([, r]) => r.width);
            titles.forEach(([a, r], i) => titles.slice(i + 1).forEach(([b, q]) => {
                if (r.left < q.right - 0.5 && q.left < r.right - 0.5 && r.top < q.bottom - 0.5 && q.top < r.bottom - 0.5)
                    overlapping.push([a, b]);
            }));
        }
        const status = document.querySelector('#petri-probe-status').getBoundingClientRect();
        return {pageWidth: document.documentElement.scrollWidth, width: innerWidth, outside: out,
                statusRight: status.right, overlapping};
    }""")


def test_a_frame_read_draws_its_bars_and_settling_and_fits_at_1440_and_420_px(served, tmp_path):
    url, service = served
    with opened_page(url, width=1440) as page:
        run_id = fill_and_read(page, steps=3)
        page.wait_for_timeout(500)
        save_screenshot(page, tmp_path, "probe.png")
        chips = page.locator("#petri-probe-canvas .pc-chip").evaluate_all(
            "els => els.map(e => [e.dataset.concept, +e.dataset.tokens])")
        assert [c for c, _ in chips].count("{{consistent}}") == 1 and len(chips) == 3, chips  # text, slot, text
        assert dict(chips)["{{consistent}}"] == 1
        # the frame's text places the chips: the arrow keys move none, and the hint says where to edit
        slot = page.locator("#petri-probe-canvas .pc-chip[data-concept='{{consistent}}']")
        before = slot.get_attribute("data-start")
        slot.focus()
        page.keyboard.press("ArrowRight")
        assert page.locator("#petri-probe-canvas .pc-chip[data-concept='{{consistent}}']").get_attribute("data-start") == before
        assert "edit it to move" in page.inner_text("#petri-probe-canvas .pc-msg")
        page.wait_for_selector("#petri-probe-bars .main-svg")
        bars = page.locator("#petri-probe-bars g.trace.bars g.point").count()
        assert bars == 2, bars  # yes and no
        stored = service.store.load_results(run_id)["read"]
        assert len(stored["reads"]) == 3  # one read per step
        assert page.locator("#petri-probe-settling g.scatterlayer g.trace").count() == 2  # a line per alternative
        for width in (1440, 420):
            page.set_viewport_size({"width": width, "height": 900})
            page.wait_for_timeout(800)  # plotly relays out on the resize
            found = overflow(page)
            assert found["pageWidth"] <= width + 1, (width, found)
            assert found["statusRight"] <= width + 1, (width, found)
            assert not found["outside"], (width, found["outside"][:5])
            assert not found["overlapping"], (width, found["overlapping"])
            # the sixth tab did not push Runs behind the tab bar's overflow menu: every tab is in view
            shown = page.locator("button[role=tab]").evaluate_all(
                "els => els.filter(e => e.offsetParent !== null).map(e => e.innerText.trim())")
            assert shown == ["Dish", "Compare", "Study", "Probe", "Runs", "Model"], (width, shown)


def test_a_read_reopens_from_the_runs_tab_into_the_probe_tab(served):
    url, _ = served
    with opened_page(url, width=1440) as page:
        run_id = fill_and_read(page, steps=1)
        page.fill("#petri-probe-frame textarea", "{{consistent}}")  # changed after the read
        reopen_run(page, run_id)
        page.wait_for_selector(f"#petri-probe-status:has-text('Reopened probe run {run_id}')")
        assert page.locator("#petri-probe-frame textarea").input_value() == FRAME
        assert page.locator("button[role=tab][aria-selected=true]").inner_text().strip() == "Probe"
        page.wait_for_selector("#petri-probe-bars g.trace.bars")


def test_an_uploaded_set_evaluates_into_its_report_and_reliability_diagram(served, tmp_path):
    """The evaluation half of the tab: a JSONL set uploaded through the file control, least mass 0, Evaluate, and
    the per-question summary (its accuracy the share of the predictions that are correct) with the
    reliability diagram drawn; nothing sticks out at 420 px."""
    from test_probe_ui import labelled_file

    from petri.runs.probe_results import document_frame

    path = labelled_file(tmp_path)  # three items, one yes/no question
    url, service = served
    with opened_page(url, width=1440) as page:
        tab(page, "Probe")
        page.click("#petri-probe-eval button:has-text('Evaluate a labelled set')")
        page.set_input_files("#petri-probe-upload input[type=file]", path)
        page.wait_for_timeout(1000)  # the upload reaches the server
        least = page.locator("#petri-probe-eval-min-mass input")  # every item answered: the diagram has points
        least.fill("0")
        least.press("Enter")
        page.wait_for_timeout(300)
        page.click("#petri-probe-eval-run")
        page.wait_for_selector("#petri-probe-eval-status:has-text('Done:')", timeout=120_000)
        run_id = re.search(r"run ([0-9a-f]{32})", page.inner_text("#petri-probe-eval-status")).group(1)
        predictions = document_frame(service.load_results(run_id)["predictions"])
        accuracy = predictions["correct"].astype(bool).mean()  # the share right, from the stored predictions
        page.wait_for_selector("#petri-probe-reliability .main-svg")
        summary = page.inner_text("#petri-probe-summary")
        # two significant digits with its Wilson interval, all three items answered
        assert "consistent" in summary and f"{accuracy:.2g} [" in summary and "3 of 3" in summary, (summary, accuracy)
        page.set_viewport_size({"width": 420, "height": 900})
        page.wait_for_timeout(800)
        assert page.evaluate("document.documentElement.scrollWidth") <= 421
        found = answer_cells(page, "#petri-probe-summary")  # one row per measure: three columns fit a phone
        assert found["texts"] and not found["clipped"], found["clipped"]
        assert all(height < 60 for _, height in found["headers"]), found["headers"]


def answer_cells(page, table: str = "#petri-probe-answers") -> dict:
    """A table's cells as shown (the answers table unless told): their text, and those whose text
    is clipped (wider than its cell, or its cell past the table's box) at the current width."""
    return page.evaluate("""(selector) => {
        const table = document.querySelector(selector);
        const box = table.getBoundingClientRect();
        const cells = [...table.querySelectorAll('.virtual-body .body-cell')].filter((c) => c.getBoundingClientRect().width);
        const clipped = cells.filter((c) => {
            const r = c.getBoundingClientRect();
            return r.right > box.right + 1 || r.left < box.left - 1 || c.scrollWidth > c.clientWidth + 1;
        }).map((c) => c.innerText);
        return {texts: cells.map((c) => c.innerText.trim()), clipped,
                headers: [...table.querySelectorAll('thead th')].filter((h) => h.innerText.trim())
                    .map((h) => [h.innerText.trim(), h.getBoundingClientRect().height])};
    }""", table)


def shows(page, text: str) -> None:
    """Wait until a visible cell of the answers table holds ``text``."""
    page.wait_for_function("""(text) => [...document.querySelectorAll('#petri-probe-answers .virtual-body .body-cell')]
        .some((c) => c.getBoundingClientRect().width && c.innerText.includes(text))""", arg=text)


def test_every_answer_shows_its_mass_in_words_and_no_answer_shows_at_1440_and_420_px(served):
    """Issue 59: the mass on the labels in words beside the answer; min_mass 1 leaves no answer and
    says how little lay on the labels; the answers table keeps every value column in view at 420 px
    (issue 60 item 6), the explanation of frame, slot, draws and order is in the tab."""
    url, service = served
    with opened_page(url, width=1440) as page:
        answered = fill_and_read(page, steps=1, min_mass=0)
        mass = service.store.load_results(answered)["read"]["reads"][-1]["mass"]
        words = f"{100 * mass:.0f}" if mass >= 0.1 else f"{100 * mass:.2g}"
        page.wait_for_timeout(3000)
        shows(page, "of the model")
        shown = " ".join(answer_cells(page)["texts"])
        assert f"{words} % of the model's probability is on these labels" in shown, shown
        assert "no answer" not in shown
        explained = page.inner_text("#petri-probe-explained")
        for word in ("Frame", "Slot", "Draws", "Order", "Mass"):
            assert word in explained, explained
        refused = fill_and_read(page, steps=1, min_mass=1)
        got = service.store.load_results(refused)["read"]
        assert got["reads"][-1]["answer"] is None, (got["request"], got["reads"][-1]["mass"])
        shows(page, "no answer")
        for width in (1440, 420):
            page.set_viewport_size({"width": width, "height": 900})
            page.wait_for_timeout(800)
            found = answer_cells(page)
            shown = " ".join(found["texts"])
            assert f"no answer (only {words} % of the model's probability is on these labels" in shown, (width, shown)
            assert not found["clipped"], (width, found["clipped"])
            assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
            # a header stays on one or two lines, never wrapped letter by letter
            assert all(height < 60 for _, height in found["headers"]), (width, found["headers"])
            # and no header or question name broken mid-word ("quest/ion", "order/s", "consi/stent" at 420 px)
            assert not page.evaluate(BROKEN_WORDS, "#petri-probe-answers thead th, #petri-probe-answers [role=gridcell]"), width
