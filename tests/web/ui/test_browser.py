"""A real browser (Debian's chromium, driven by Playwright; no ``playwright install``) drives the UI:
the Study tab opens on the shipped results; concept chips are dragged with the mouse and moved with
the keyboard, and the run's stored anchors sit at the new positions; an overlapping drop is refused
where the user sees it; a dish runs with its live heatmap (the screenshot for the README); a study's
provisional instability figure appears before the study ends; a comparison shows both heatmaps; a
stored run reopens; at 420 px wide no Study figure or table is cut off. Screenshots go to tmp_path
and, when ``PETRI_SCREENSHOT_DIR`` is set, there too.

The model is the embedded one (``assets/petri-tiny``) when its weights are present, else a tiny
random DiffusionGemma with a 48-token canvas. The study is held after its third batch (a gate in the
service, opened by the test once the provisional figure is on the page), so "before the study
ends" is a fact of the test, not a race.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from petri.core.watch import NO_WATCH
from petri.study.plan import StudyPlan

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
GATE_AFTER_BATCHES = 3

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium); .ci/run installs it"
)


@pytest.fixture(scope="module")
def served(tmp_path_factory, live_server):
    """(url, service, gate): the app on a live server; a study run waits at ``gate`` after its
    third batch until the test sets it."""
    from petri.app.service import PetriService
    from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    if (EMBEDDED_MODEL_PATH / "config.json").exists():
        lm, source = load_model(EMBEDDED_MODEL_PATH, device="cpu"), str(EMBEDDED_MODEL_PATH)
    else:
        lm, source = tiny_random_model(canvas_length=48), None
    gate = threading.Event()

    class GatedService(PetriService):
        """The Study tab's job (``submit_study``) waits at the gate after its third batch."""

        def submit_study(self, plan, *, owner=None, watch=NO_WATCH):
            def held(p):
                if watch.progress is not None:
                    watch.progress(p)
                if p.done == GATE_AFTER_BATCHES:
                    gate.wait(300)

            return super().submit_study(plan, owner=owner, watch=replace(watch, progress=held))

        seed_gate: threading.Event | None = None  # set by a test: a UI seed run waits at it after every step

        def submit_seed(self, plan, *, owner=None, watch=NO_WATCH):
            gate_now, on_step = self.seed_gate, watch.on_step
            if gate_now is not None and on_step is not None:
                def held_step(*args):
                    on_step(*args)
                    gate_now.wait(300)

                return super().submit_seed(plan, owner=owner, watch=replace(watch, on_step=held_step))
            return super().submit_seed(plan, owner=owner, watch=watch)

    service = GatedService(lm, RunStore(tmp_path_factory.mktemp("browser-store")))
    with live_server(create_app(service, model_source=source)) as live:
        yield live.url, service, gate
    gate.set()


@contextmanager
def opened_page(url: str, width: int = 1200, height: int = 900):
    """A Chromium page on the app at ``url`` (its Run button drawn), closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(120_000)
        page.goto(url)
        page.wait_for_selector("#petri-run")
        yield page
        browser.close()


@pytest.fixture(scope="module")
def page(served):
    with opened_page(served[0]) as page:
        yield page


def save_screenshot(page, tmp_path: Path, name: str, full_page: bool = True, clip: dict | None = None) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=full_page, clip=clip)
    extra = os.environ.get("PETRI_SCREENSHOT_DIR")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / name)
    return path


def tab(page, name: str) -> None:
    page.click(f"button[role=tab]:has-text('{name}')")


def chips(page, canvas: str = "#petri-canvas") -> dict[str, tuple[int, int]]:
    """concept → (start, tokens) as the canvas control ``canvas`` draws them."""
    found = page.locator(f"{canvas} .pc-chip").evaluate_all(
        "els => els.map(e => [e.dataset.concept, +e.dataset.start, +e.dataset.tokens])")
    return {c: (s, t) for c, s, t in found}


def wait_chips(page, starts: dict[str, int], canvas: str = "#petri-canvas", timeout_ms: int = 60_000) -> None:
    """Wait until the chips of ``canvas`` start where ``starts`` says (concept → start); on timeout
    the assertion shows what they read."""
    probe = f"[...document.querySelectorAll('{canvas} .pc-chip')].map(e => [e.dataset.concept, +e.dataset.start])"
    want = json.dumps(sorted(starts.items()), separators=(",", ":"))
    try:
        page.wait_for_function(
            f"JSON.stringify(({probe}).sort((a, b) => a[0] < b[0] ? -1 : 1)) === {json.dumps(want)}", timeout=timeout_ms)
    except Exception as error:  # playwright's TimeoutError: fall through to the assertion that names it
        if "Timeout" not in type(error).__name__:
            raise
    assert {c: s for c, (s, _) in chips(page, canvas).items()} == starts


def canvas_geometry(page) -> tuple[dict, int, int]:
    box = page.locator("#petri-canvas .pc-track").bounding_box()
    length = int(page.locator("#petri-canvas .pc-track").get_attribute("data-length"))
    prefix = int(page.locator("#petri-canvas .pc-track").get_attribute("data-prefix"))
    return box, length, prefix


def free_start(placed: dict[str, tuple[int, int]], concept: str, length: int, prefix: int, avoid: set[int]) -> int:
    """A start where ``concept`` fits without touching another chip (and not in ``avoid``)."""
    tokens = placed[concept][1]
    taken = {p for c, (s, t) in placed.items() if c != concept for p in range(s - 1, s + t + 1)}
    for start in range(prefix, length - tokens + 1):
        if start not in avoid and not taken & set(range(start, start + tokens)):
            return start
    raise AssertionError(f"no free slot for {concept} in {placed}")


def drag(page, concept: str, to_start: int) -> None:
    """Drag ``concept``'s chip with the mouse so that it starts at position ``to_start``."""
    box, length, _ = canvas_geometry(page)
    unit = box["width"] / length
    chip = page.locator(f"#petri-canvas .pc-chip[data-concept='{concept}']").bounding_box()
    y = chip["y"] + chip["height"] / 2
    grab_x = chip["x"] + unit / 2  # grab the chip's first token
    page.mouse.move(grab_x, y)
    page.mouse.down()
    target = box["x"] + (to_start + 0.5) * unit
    page.mouse.move((grab_x + target) / 2, y, steps=4)
    page.mouse.move(target, y, steps=4)
    page.mouse.up()


def wait_table_start(page, concept: str, start: int) -> None:
    """Wait until the slot table's row of ``concept`` shows ``start`` (the cells read in order)."""
    page.wait_for_function(
        f"() => {{ const w = document.querySelector('#petri-placement').innerText.split(/\\s+/);"
        f" const i = w.lastIndexOf('{concept}'); return i >= 0 && w[i + 1] === '{start}'; }}")


def test_study_tab_opens_on_the_shipped_results(page):
    tab(page, "Study")
    page.wait_for_selector("#petri-study-stats:has-text('Shipped results')")
    stats = page.inner_text("#petri-study-stats")
    assert "petri-tiny" in stats and "d894fb59657f4120473aeb68" in stats and "Mann-Whitney" in stats
    page.wait_for_selector("#petri-study-instability .js-plotly-plot")
    page.wait_for_selector("#petri-study-events-fig .js-plotly-plot")
    title = page.locator("#petri-study-instability .gtitle").text_content()
    assert "event level: benign n=12" in title and "provisional" not in title
    names = {h.rsplit("/", 1)[-1] for h in page.locator("#petri-study-files a[href]").evaluate_all("els => els.map(e => e.href)")}
    assert {"events.csv", "report.md", "positions.csv.gz"} <= names
    tab(page, "Dish")


def test_drag_and_keyboard_placement_reaches_the_run(page, served, tmp_path):
    _, service, _ = served
    page.wait_for_selector("#petri-canvas .pc-chip[data-concept='order']")
    before = chips(page)
    _, length, prefix = canvas_geometry(page)
    # the mouse: order to a free slot
    order_to = free_start(before, "order", length, prefix, avoid={before["order"][0]})
    drag(page, "order", order_to)
    page.wait_for_function(f"document.querySelector(\"#petri-canvas .pc-chip[data-concept='order']\").dataset.start == '{order_to}'")
    wait_table_start(page, "order", order_to)
    # the table's echo back to the canvas (placement.change → canvas) lands a round trip after the
    # table; an older move's echo is dropped since issue 21 (see
    # test_a_quick_second_move_is_not_drawn_over_by_the_first_moves_echo), but let it land first
    page.wait_for_timeout(1500)
    # the keyboard: person one position along, towards free room
    placed = chips(page)
    start, tokens = placed["person"]
    others = {p for c, (s, t) in placed.items() if c != "person" for p in range(s, s + t)}
    key, person_to = ("ArrowRight", start + 1) if start + tokens < length and start + tokens not in others else ("ArrowLeft", start - 1)
    assert person_to >= prefix and person_to not in others
    page.focus("#petri-canvas .pc-chip[data-concept='person']")
    page.keyboard.press(key)
    wait_table_start(page, "person", person_to)
    page.wait_for_function(f"document.querySelector(\"#petri-canvas .pc-chip[data-concept='person']\").dataset.start == '{person_to}'")
    assert page.evaluate("document.activeElement.dataset.concept") == "person"  # focus stays on the chip

    # run without per-sample shuffling: every sample's anchors sit where the chips were put
    page.uncheck("label:has-text('Shuffle concepts over the slots per sample') input")
    page.fill("#petri-samples input[type=number]", "3")
    open_settings(page)
    page.fill("#petri-steps input[type=number]", "16")
    page.click("#petri-run")
    page.wait_for_selector("#petri-heatmap .js-plotly-plot")
    page.wait_for_selector("#petri-status:has-text('Done')")
    run_id = re.search(r"/api/runs/([0-9a-f]+)", page.inner_text("#petri-status")).group(1)
    traj = service.store.load_events(run_id)[0][2]
    final_chips = chips(page)
    for spans in traj.anchors:
        assert {a.concept: a.start for a in spans} == {c: s for c, (s, _) in final_chips.items()}
    assert {a.concept: a.start for a in traj.anchors[0]}["order"] == order_to
    assert {a.concept: a.start for a in traj.anchors[0]}["person"] == person_to

    page.wait_for_selector("#petri-heatmap .hm, #petri-heatmap .heatmaplayer image", state="attached")
    assert "flips per step and position (3 samples)" in page.locator("#petri-heatmap .gtitle").text_content()
    final = page.inner_text("#petri-final")
    assert "<pad>" not in final
    for concept in ("order", "inventory", "person"):
        assert concept in final
    assert "|" in page.inner_text("#petri-pairs")
    links = page.locator("#petri-files a[href]").evaluate_all("els => els.map(e => e.href)")
    names = {link.rsplit("/", 1)[-1] for link in links}
    run_id = next(n for n in names if n.endswith("-pairs.csv")).removesuffix("-pairs.csv")  # named by their run
    assert {f"{run_id}-{n}" for n in ("positions.csv", "segments.csv", "samples.csv", "pairs.csv", "run.json")} <= names
    download = httpx.get(next(link for link in links if link.endswith("-pairs.csv")), timeout=30)
    assert download.status_code == 200 and download.text.startswith('"event","event_index","group"')
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("!document.querySelector('#petri-heatmap .js-plotly-plot').classList.contains('is-transitioning')")
    shot = save_screenshot(page, tmp_path, "dish.png")
    assert shot.stat().st_size > 10_000


def test_a_quick_second_move_is_not_drawn_over_by_the_first_moves_echo(page, monkeypatch):
    """Issue 21 item 3: two arrow-key moves of a chip within one round trip, with the slot table's
    redraw of the canvas (the echo of a move) held 1.5 s on the server: the first move's echo, which
    arrives after the second move, is dropped (it carries an older move number), so the chip never
    goes back to the first move's position once it showed the second's, and it ends there, with
    the slot table."""
    from petri.web.ui.dish_tab.dish import DishController

    tab(page, "Dish")
    page.fill("#petri-concepts textarea, #petri-concepts input", "order, inventory, person")
    page.wait_for_function("document.querySelectorAll('#petri-canvas .pc-chip').length === 3")
    page.wait_for_timeout(1000)  # the respread's redraw has landed
    placed = chips(page)
    _, length, prefix = canvas_geometry(page)
    taken = {p for c, (s, t) in placed.items() for p in range(s, s + t)}
    concept, key, one, two = next(
        (c, k, s + d, s + 2 * d) for c, (s, t) in placed.items() for k, d in (("ArrowRight", 1), ("ArrowLeft", -1))
        if all(prefix <= x and x + t <= length and not (set(range(x, x + t)) & (taken - set(range(s, s + t))))
               for x in (s + d, s + 2 * d)))
    real_canvas = DishController.canvas

    def slow_canvas(self, *args, **kwargs):
        time.sleep(1.5)
        return real_canvas(self, *args, **kwargs)

    monkeypatch.setattr(DishController, "canvas", slow_canvas)
    page.evaluate(f"""() => {{ window.__starts = [];
      new MutationObserver(() => {{ const c = document.querySelector("#petri-canvas .pc-chip[data-concept='{concept}']");
        if (c) window.__starts.push(+c.dataset.start); }}).observe(document.querySelector('#petri-canvas .pc-track'),
        {{childList: true}}); }}""")
    page.focus(f"#petri-canvas .pc-chip[data-concept='{concept}']")
    page.keyboard.press(key)
    page.keyboard.press(key)
    wait_table_start(page, concept, two)
    page.wait_for_timeout(4000)  # both echoes are back (1.5 s each, one after the other)
    starts = page.evaluate("window.__starts")
    assert two in starts, starts
    assert one not in starts[starts.index(two):], f"the first move's echo drew the chip back: {starts}"
    assert chips(page)[concept][0] == two
    wait_table_start(page, concept, two)


def test_an_overlapping_drop_is_refused_where_the_user_sees_it(page):
    placed = chips(page)
    (a, (a_start, _)), (b, (b_start, _)) = sorted(placed.items(), key=lambda kv: kv[1][0])[:2]
    table_before = page.inner_text("#petri-placement")
    drag(page, b, a_start)  # onto the first chip
    page.wait_for_selector("#petri-canvas .pc-msg.pc-bad:has-text('Refused')")
    message = page.inner_text("#petri-canvas .pc-msg")
    assert f"{b} at {a_start} would overlap {a}" in message
    assert page.locator(f"#petri-canvas .pc-chip[data-concept='{b}']").get_attribute("class").count("pc-refused") == 1
    assert chips(page)[b][0] == b_start  # the chip went back
    assert page.inner_text("#petri-placement") == table_before


def test_a_drop_off_the_left_edge_names_the_canvas_start_not_a_prefix(page):
    """With no pinned prefix (the embedded model has no chat template), a chip dragged off the left
    edge is refused for starting before the canvas, not for covering a prefix at 'positions 0--1'."""
    tab(page, "Dish")
    _, _, prefix = canvas_geometry(page)
    first = min(chips(page).items(), key=lambda kv: kv[1][0])[0]
    drag(page, first, -3)
    page.wait_for_selector("#petri-canvas .pc-msg.pc-bad:has-text('Refused')")
    message = page.inner_text("#petri-canvas .pc-msg")
    if prefix == 0:
        assert "would start before the canvas" in message and "prefix" not in message, message
    else:
        assert f"pinned prefix (positions 0-{prefix - 1})" in message, message


def small_study_file(folder: Path) -> Path:
    """A 6-event, 1-template study file (benign / contradictory), for a study that runs in seconds."""
    import pandas as pd

    from petri.web.ui.study_tab.study import fields_to_dict

    texts = {"benign": ["The order was packed.", "The stock was counted.", "A customer paid for the order."],
             "contradictory": ["Ninety units in stock, none in stock.", "The order arrived before it was placed.",
                               "The empty shelf held forty units."]}
    events = pd.DataFrame([[f"{g[0]}{i}", g, t, ""] for g, ts in texts.items() for i, t in enumerate(ts)],
                          columns=["id", "group", "text", "concepts"])
    templates = pd.DataFrame([["t1", "Event: {event}\nDescribe how {concepts} relate."]], columns=["id", "text"])
    data = fields_to_dict({"id": "browser", "title": "Browser study", "language": "en"}, "order, inventory, person",
                          events, templates, "benign, contradictory", "")
    path = folder / "browser_study.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_study_figure_appears_before_the_study_ends(page, served, tmp_path):
    _, _, gate = served
    tab(page, "Study")
    page.click("button:has-text('Study set-up')")
    page.set_input_files("#petri-study-upload input[type=file]", str(small_study_file(tmp_path)))
    page.wait_for_selector("text=Loaded Browser study")
    page.fill("#petri-study-samples input[type=number]", "2")
    page.fill("#petri-study-steps input[type=number]", "4")
    try:
        page.click("#petri-study-run")
        page.wait_for_function(
            "(document.querySelector('#petri-study-instability .gtitle') || {}).textContent?.includes('provisional')")
        title = page.locator("#petri-study-instability .gtitle").text_content()
        # (the page's figure wraps its title: a line break is no character in the text)
        assert re.search(r"provisional: \d of 6 batches; events so far: ?benign \d", title), title
        assert "Done" not in page.inner_text("#petri-study-status")  # the study is held at its gate
        assert "provisional" in page.inner_text("#petri-study-stats").lower()
        save_screenshot(page, tmp_path, "study-live.png", full_page=False)
    finally:
        gate.set()
    page.wait_for_selector("#petri-study-status:has-text('Done')", timeout=300_000)
    page.wait_for_function(
        "!document.querySelector('#petri-study-instability .gtitle').textContent.includes('provisional')")
    assert page.inner_text("#petri-study-stats").startswith("Final")


def test_a_new_study_holds_and_names_its_run_in_every_view(page, served, tmp_path):
    """From the moment a study starts, no view keeps the shipped study's data (its downloads, its
    Jaccard figure); once done, every figure, the groups table, the downloads and the report hold and
    name the new run."""
    _, _, gate = served
    gate.set()  # not held (the gated test may have run before, or not at all)
    shipped = "d894fb59"
    tab(page, "Study")
    if not page.locator("text=Loaded Browser study").count():
        page.click("button:has-text('Study set-up')")
        page.set_input_files("#petri-study-upload input[type=file]", str(small_study_file(tmp_path)))
        page.wait_for_selector("text=Loaded Browser study")
    page.fill("#petri-study-samples input[type=number]", "2")
    page.fill("#petri-study-steps input[type=number]", "4")
    page.fill("#petri-study-seed input[type=number]", "11")
    page.locator("#petri-study-seed input[type=number]").blur()
    page.click("#petri-study-run")
    page.wait_for_function("document.querySelector('#petri-study-status').innerText.startsWith('Study run')")
    run_id = re.search(r"Study run `?([0-9a-f]{24})", page.inner_text("#petri-study-status")).group(1)
    page.wait_for_function(f"document.querySelector('#petri-study-files').innerText.includes('{run_id}')")
    hrefs = page.locator("#petri-study-files a[href]").evaluate_all("els => els.map(e => e.href)")
    assert not any(shipped in h for h in hrefs)
    page.wait_for_selector("#petri-study-status:has-text('Done')", timeout=300_000)
    assert run_id in page.inner_text("#petri-study-status")
    tag = f"run {run_id[:8]}"
    for fig in ("instability", "events-fig"):
        text = page.locator(f"#petri-study-{fig} .js-plotly-plot").text_content()
        assert tag in text and shipped not in text, fig
    # one template: a sentence naming the run in place of the Jaccard heatmap (issue 60)
    assert run_id in page.inner_text("#petri-study-jaccard-note") and shipped not in page.inner_text("#petri-study-jaccard-note")
    assert run_id in page.inner_text("#petri-study-groups")
    assert run_id in page.inner_text("#petri-study-files")
    hrefs = page.locator("#petri-study-files a[href]").evaluate_all("els => els.map(e => e.href)")
    assert {"events.csv", "run.json", "report.md"} <= {h.rsplit("/", 1)[-1] for h in hrefs}
    run_json = httpx.get(next(h for h in hrefs if h.endswith("/run.json")), timeout=30).text
    assert run_id in run_json and shipped not in run_json
    page.click("button:has-text('Report (report.md)')")
    page.wait_for_selector(f"#petri-study-report:has-text('{run_id}')")


def single_token_words(tokenizer, n: int) -> list[tuple[int, str]]:
    """``n`` (token id, text) of words that are one token each in ``tokenizer``."""
    found = []
    for text in (" ledger", " stock", " and", " of", " to", " in", " is", " was"):  # none a word of the label
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == 1 and text.strip() not in {t for _, t in found}:
            found.append((ids[0], tokenizer.decode(ids).strip()))
    assert len(found) >= n, found
    return found[:n]


def reopen_run(page, run_id: str) -> None:
    """Open a stored run from the Runs tab by clicking its row (whichever tab the page was on: the
    Refresh button lists runs stored since the tab was last selected)."""
    tab(page, "Runs")
    page.click("#petri-runs-refresh")
    # its row's kind cell (on a phone the run_id column is not shown)
    cell = f"[...document.querySelectorAll('#petri-runs-table .body-cell')].find((c) => c.textContent.trim() === '{run_id}')"
    page.wait_for_function(f"!!{cell}")
    row = page.evaluate(f"{cell}.dataset.row")
    page.click(f"#petri-runs-table .body-cell[data-row='{row}'][data-col='0']")
    page.wait_for_function(f"document.querySelector('#petri-runs-choice input').value.includes('{run_id[:12]}')")
    page.click("#petri-runs-open")


def test_reopened_dish_and_study_restore_their_controls(page, served):
    """A 3-sample unshuffled dish with its anchors at 5/30/50 and a 2-sample, 8-step study with seed
    3 (run through the service), reopened from the Runs tab: every control reads the run's values."""
    from dataclasses import replace

    from petri.app.service import SeedEvent
    from petri.core.dish import Dish
    from petri.study.schema import load_study

    _, service, gate = served
    gate.set()
    settings = replace(service.lm.default_settings(), max_denoising_steps=7)
    dish = Dish(("order", "inventory", "person"), "The stock was counted.", "{event}", positions=(5, 30, 50),
                shuffle=False)
    dish_run = service.seed(service.plan([SeedEvent(dish)], 3, settings, seed=6)).run_id
    study = load_study(small_study_file(Path(service.store.path).parent))
    study_run = service.run_study(StudyPlan(study, samples=2, seed=3, settings=replace(settings, max_denoising_steps=8))).run_id

    tab(page, "Dish")  # other concepts on screen, so reopening changes the concept field (and fires its change)
    page.fill("#petri-concepts textarea, #petri-concepts input", "order, person")
    page.wait_for_function("!document.querySelector('#petri-placement').innerText.includes('inventory')")
    reopen_run(page, dish_run)
    page.wait_for_selector(f"#petri-status:has-text('{dish_run}')")
    page.wait_for_function("document.querySelector('#petri-samples input[type=number]').value === '3'")
    # the chips follow the restored table one round trip later (placement.change → canvas): wait for them
    wait_chips(page, {"order": 5, "inventory": 30, "person": 50})
    assert not page.is_checked("label:has-text('Shuffle concepts over the slots per sample') input")
    open_settings(page)
    assert page.input_value("#petri-steps input[type=number]") == "7"
    assert page.input_value("#petri-event textarea") == "The stock was counted."
    page.wait_for_timeout(1000)  # the concept field's change event must not respread the slots
    assert {c: s for c, (s, _) in chips(page).items()} == {"order": 5, "inventory": 30, "person": 50}

    reopen_run(page, study_run)
    page.wait_for_selector(f"#petri-study-status:has-text('{study_run}')")
    page.wait_for_function("document.querySelector('#petri-study-samples input[type=number]').value === '2'")
    assert page.input_value("#petri-study-steps input[type=number]") == "8"
    assert page.input_value("#petri-study-seed input[type=number]") == "3"
    if not page.locator("#petri-study-set-up-note").count():
        page.click("button:has-text('Study set-up')")
    page.wait_for_selector(f"#petri-study-set-up-note:has-text('{study_run}')")


def test_cancel_stops_a_running_study(page, served, tmp_path):
    """The Study tab's Cancel button: the study job stops (its stored batches stay) and the tab says
    so. Runs after the gated test (its study is loaded, the gate open); 160 steps a batch keep it
    running long enough to be cancelled midway."""
    _, service, gate = served
    assert gate.is_set()
    tab(page, "Study")  # the gated test's study is still loaded in the set-up
    page.wait_for_selector("#petri-study-samples input[type=number]")
    page.fill("#petri-study-samples input[type=number]", "2")
    page.fill("#petri-study-steps input[type=number]", "160")
    before = {j.job_id for j in service.jobs}
    page.click("#petri-study-run")
    deadline = time.monotonic() + 300
    while not any(j.job_id not in before and j.done >= 1 for j in service.jobs):  # a batch of this run stored
        assert time.monotonic() < deadline, "the study never stored a batch"
        page.wait_for_timeout(50)
    page.click("#petri-study-cancel")
    page.wait_for_selector("#petri-study-status:has-text('stopped (the job was cancelled)')", timeout=120_000)
    job = max((j for j in service.jobs if j.kind == "study"), key=lambda j: j.created)
    assert job.status == "cancelled" and 1 <= job.done < 6
    assert service.store.get_run(job.run_id)["status"] == "cancelled"


def wait_new_done(page, status: str, before: set[str]) -> str:
    """Wait until ``status`` reads Done for a run id not in ``before`` (a status left by an earlier
    run reads Done too); that run's id."""
    page.wait_for_function(
        "([sel, old]) => { const m = (document.querySelector(sel).innerText || '').match(/Done: run `?([0-9a-f]{32})/);"
        " return m && !old.includes(m[1]); }", arg=[status, sorted(before)])
    return re.search(r"Done: run `?([0-9a-f]{32})", page.inner_text(status)).group(1)


def run_compare(page, before: set[str], samples: int, steps: int) -> str:
    """Run the Compare tab's two events (``samples`` each, ``steps`` at most); the new run's id
    (``before``: the run ids stored before)."""
    tab(page, "Compare")
    page.fill("#petri-cmp-samples input[type=number]", str(samples))
    open_settings(page, "petri-cmp")
    page.fill("#petri-cmp-steps input[type=number]", str(steps))
    page.click("#petri-cmp-run")
    return wait_new_done(page, "#petri-cmp-status", before)


def open_settings(page, elem: str = "petri") -> None:
    """Open the tab's closed "Sampler settings" accordion (left open if it is)."""
    if not page.locator(f"#{elem}-steps input[type=number]").is_visible():
        page.click(f"#{elem}-settings button:has-text('Sampler settings')")
    page.wait_for_selector(f"#{elem}-steps input[type=number]", state="visible")


def test_compare_shows_both_heatmaps(page, tmp_path):
    """A comparison runs and shows both heatmaps, their difference and the paired table (the
    screenshot of the Compare tab on the Web app page, compare.png)."""
    tab(page, "Compare")
    page.fill("#petri-cmp-samples input[type=number]", "2")
    open_settings(page, "petri-cmp")
    page.fill("#petri-cmp-steps input[type=number]", "6")
    page.click("#petri-cmp-run")
    page.wait_for_selector("#petri-cmp-status:has-text('Done')")
    for part in ("heatmap-a", "heatmap-b", "difference"):
        page.wait_for_selector(f"#petri-cmp-{part} .js-plotly-plot")
    assert "benign" in page.locator("#petri-cmp-heatmap-a .gtitle").text_content()
    assert "contradictory" in page.locator("#petri-cmp-heatmap-b .gtitle").text_content()
    assert "same layouts and seed" in page.inner_text("#petri-cmp-summary")
    assert "contradictory − benign" in page.inner_text("#petri-cmp-paired")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("[...document.querySelectorAll('#petri-cmp-heatmap-a .js-plotly-plot, "
                           "#petri-cmp-difference .js-plotly-plot')].every(p => !p.classList.contains('is-transitioning'))")
    # the page down to the paired table (the trajectory views below it have their own screenshots)
    bottom = page.evaluate("document.querySelector('#petri-cmp-paired').getBoundingClientRect().bottom + scrollY")
    shot = save_screenshot(page, tmp_path, "compare.png", clip={"x": 0, "y": 0, "width": 1200, "height": bottom + 16})
    assert shot.stat().st_size > 10_000


def test_compare_has_the_dish_tabs_canvas_and_settings_and_the_run_gets_them(page, served):
    """Issue 20 item 11: the Compare tab shows the chip canvas (chips as the slot table puts them)
    and the Dish tab's sampler settings; a chip moved with the keyboard, per-sample shuffle off and
    non-default settings reach the service: every sample of both events has its anchors where the
    chips are, and the stored settings are those typed."""
    _, service, _ = served
    tab(page, "Compare")
    page.wait_for_selector("#petri-cmp-canvas .pc-chip[data-concept='person']")
    placed = chips(page, "#petri-cmp-canvas")
    assert set(placed) == {"order", "inventory", "person"}
    _, length, _ = canvas_geometry(page)
    start, tokens = placed["person"]
    others = {p for c, (s, t) in placed.items() if c != "person" for p in range(s, s + t)}
    key, person_to = ("ArrowRight", start + 1) if start + tokens < length and start + tokens not in others else ("ArrowLeft", start - 1)
    page.focus("#petri-cmp-canvas .pc-chip[data-concept='person']")
    page.keyboard.press(key)
    page.wait_for_function(
        f"() => {{ const w = document.querySelector('#petri-cmp-placement').innerText.split(/\\s+/);"
        f" const i = w.lastIndexOf('person'); return i >= 0 && w[i + 1] === '{person_to}'; }}")
    page.uncheck("#petri-cmp-shuffle-per-sample input")
    page.fill("#petri-cmp-samples input[type=number]", "2")
    open_settings(page, "petri-cmp")
    for elem, value in (("steps", "5"), ("entropy-bound", "0.2"), ("t-min", "0.3"), ("t-max", "0.7")):
        page.fill(f"#petri-cmp-{elem} input[type=number]", value)
        page.press(f"#petri-cmp-{elem} input[type=number]", "Tab")
    page.uncheck("#petri-cmp-adaptive input")
    before = {r["run_id"] for r in service.store.list_runs(200)}
    page.click("#petri-cmp-run")
    wait_new_done(page, "#petri-cmp-status", before)
    (run,) = [r for r in service.store.list_runs(200) if r["run_id"] not in before]
    settings = run["request"]["settings"]
    assert (settings["max_denoising_steps"], settings["entropy_bound"], settings["t_min"], settings["t_max"]) == \
        (5, 0.2, 0.3, 0.7)
    assert settings["stability_threshold"] is None and run["request"]["n_samples"] == 2
    expected = {c: s for c, (s, _) in chips(page, "#petri-cmp-canvas").items()}
    assert expected["person"] == person_to
    for _, _, traj in service.store.load_events(run["run_id"]):
        for spans in traj.anchors:
            assert {a.concept: a.start for a in spans} == expected


def test_compare_draws_live_and_a_dish_run_queued_behind_it_says_so(page, served):
    """Issue 20 items 11 and 13: while a comparison samples (held after its first step by the
    service's seed gate) its first flip map is drawn live; a Dish run clicked meanwhile waits in
    the queue and its status line says it is queued (not the previous run's last line); once the
    gate opens both finish."""
    _, service, _ = served
    tab(page, "Dish")  # valid dish inputs, whatever an earlier test typed
    page.fill("#petri-concepts textarea, #petri-concepts input", "order, inventory, person")
    page.fill("#petri-samples input[type=number]", "2")
    open_settings(page)
    page.fill("#petri-steps input[type=number]", "4")
    tab(page, "Compare")
    page.fill("#petri-cmp-samples input[type=number]", "2")
    open_settings(page, "petri-cmp")
    page.fill("#petri-cmp-steps input[type=number]", "6")
    gate = threading.Event()
    service.seed_gate = gate
    before = {r["run_id"] for r in service.store.list_runs(200)}
    try:
        page.click("#petri-cmp-run")
        page.wait_for_function(
            "(document.querySelector('#petri-cmp-heatmap-a .gtitle') || {}).textContent?.includes('flips while sampling')")
        assert "benign" in page.locator("#petri-cmp-heatmap-a .gtitle").text_content()
        assert "Sampling benign (event 1 of 2)" in page.inner_text("#petri-cmp-status")
        assert not service.store.get_run(next(j for j in service.jobs if j.status == "running").run_id)["status"] == "done"
        tab(page, "Dish")
        page.click("#petri-run")
        page.wait_for_selector("#petri-status:has-text('Queued')")
        save_screenshot(page, Path(service.store.path).parent, "dish-queued.png", full_page=False)
    finally:
        gate.set()
        service.seed_gate = None
    wait_new_done(page, "#petri-status", before)
    tab(page, "Compare")
    wait_new_done(page, "#petri-cmp-status", before)
    assert "flips per step and position" in page.locator("#petri-cmp-heatmap-a .gtitle").text_content()


def test_a_stored_run_reopens(page, served):
    """A one-event dish stored through the service (not by an earlier test: this one runs alone too)
    reopens from the Runs tab with its heatmap, text and downloads."""
    from dataclasses import replace

    from petri.app.service import SeedEvent
    from petri.core.dish import Dish

    _, service, _ = served
    settings = replace(service.lm.default_settings(), max_denoising_steps=4)
    dish = Dish(("order", "inventory", "person"), "The stock was counted.", "{event}", positions=(4, 14, 24),
                shuffle=False)
    run_id = service.seed(service.plan([SeedEvent(dish)], 2, settings, seed=5)).run_id
    dish_run = next(r for r in service.store.list_runs(20) if r["run_id"] == run_id)
    reopen_run(page, dish_run["run_id"])
    page.wait_for_selector("#petri-status:has-text('Reopened dish run')")
    assert dish_run["run_id"] in page.inner_text("#petri-status")
    page.wait_for_selector("#petri-heatmap .js-plotly-plot")
    assert "order" in page.inner_text("#petri-final")
    links = page.locator("#petri-files a[href]").evaluate_all("els => els.map(e => e.href)")
    assert any(f"/{dish_run['run_id']}/" in link or link.endswith("run.json") for link in links)


def test_a_canvas_starting_with_eos_shows_its_text(page, served):
    """A stored dish whose sample 0 reads <eos> at position 0, then words (the store's copy rewritten,
    so the canvas is fixed, not sampled), reopened: the final text shows the words and a visible
    end-of-turn marker, drawn in a colour far from the page's background."""
    from dataclasses import replace

    from petri.app.service import SeedEvent
    from petri.core.dish import Dish

    _, service, _ = served
    settings = replace(service.lm.default_settings(), max_denoising_steps=3)
    dish = Dish(("order", "person"), "The stock was counted.", "{event}", positions=(4, 12), shuffle=False)
    run_id = service.seed(service.plan([SeedEvent(dish)], 1, settings, seed=2)).run_id
    key, group, traj = service.store.load_events(run_id)[0]
    tok = service.lm.tokenizer
    [(word, text)] = single_token_words(tok, 1)
    ids = traj.final_ids.copy()
    free = ~traj.anchor_mask[0]
    ids[0, free] = word
    ids[0, 0] = tok.eos_token_id
    service.store.save_event(run_id, 0, key, replace(traj, final_ids=ids), group)

    reopen_run(page, run_id)
    page.wait_for_selector(f"#petri-status:has-text('{run_id}')")
    page.wait_for_selector(f"#petri-final:has-text('{text}')")
    final = page.inner_text("#petri-final")
    assert final.count(text) >= int(free.sum()) - 1  # every free position but the <eos>
    assert "<eos>" in final and "order" in final and "person" in final
    # the marker's colour over the white page: as dark as the concept colours (#1f77b4 at Gradio's 50 %
    # reads 0.70), far from white (the old grey #e5e7eb at 50 % read 0.95)
    marker = page.locator("#petri-final *:text-is('<eos>')").first
    color = marker.evaluate("""e => { for (let n = e; n; n = n.parentElement) {
        const c = getComputedStyle(n).backgroundColor; if (c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') return c; }
        return ''; }""")
    r, g, b, *alpha = [float(x) for x in re.findall(r"[\d.]+", color)]
    a = alpha[0] if alpha else 1.0
    lum = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255 * a + (1 - a)  # over a white page
    assert lum < 0.75, color


def test_the_sample_selector_follows_arrows_and_typing(page, served):
    """A stored 4-sample dish whose sample s reads one word w_s at every free position (the store's
    copy rewritten), reopened: arrow keys on the slider and a number typed into its box each bring
    that sample's text and flips chart, and the slider reads the same sample."""
    from dataclasses import replace

    from petri.app.service import SeedEvent
    from petri.core.dish import Dish

    _, service, _ = served
    settings = replace(service.lm.default_settings(), max_denoising_steps=3)
    dish = Dish(("order", "person"), "The stock was counted.", "{event}", positions=(4, 12), shuffle=False)
    run_id = service.seed(service.plan([SeedEvent(dish)], 4, settings, seed=2)).run_id
    key, group, traj = service.store.load_events(run_id)[0]
    words = single_token_words(service.lm.tokenizer, 4)
    ids = traj.final_ids.copy()
    for s, (word, _) in enumerate(words):
        ids[s, ~traj.anchor_mask[s]] = word
    service.store.save_event(run_id, 0, key, replace(traj, final_ids=ids), group)
    reopen_run(page, run_id)
    page.wait_for_selector(f"#petri-status:has-text('{run_id}')")
    page.wait_for_selector(f"#petri-final:has-text('{words[0][1]}')")

    def shows(s: int) -> None:
        others = [t for i, (_, t) in enumerate(words) if i != s]
        page.wait_for_function(
            "([w, others]) => { const t = document.querySelector('#petri-final').innerText.split(/\\s+/);"
            " return t.includes(w) && !others.some(o => t.includes(o)); }", arg=[words[s][1], others])
        page.wait_for_function(f"(document.querySelector('#petri-flips .gtitle') || {{}}).textContent?.includes('sample {s} (')")
        assert page.input_value("#petri-sample input[type=number]") == str(s)
        assert page.input_value("#petri-sample input[type=range]") == str(s)
        # one selector for every panel (issue 49, item 9): the trajectory viewer follows it
        page.wait_for_function(f"document.querySelector('#petri-traj .pt').dataset.sample === '{s}'")

    page.focus("#petri-sample input[type=range]")
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    shows(3)
    page.keyboard.press("ArrowLeft")
    shows(2)
    box = page.locator("#petri-sample input[type=number]")
    box.click()
    box.press("Control+a")
    box.type("1")
    shows(1)


def test_bad_concepts_are_named_in_the_browser(page, tmp_path):
    tab(page, "Dish")
    page.fill("#petri-concepts textarea, #petri-concepts input", "order")
    page.wait_for_function("!document.querySelector('#petri-placement').innerText.includes('inventory')")
    page.wait_for_function("!document.querySelector('#petri-canvas').textContent.includes('inventory')")
    page.click("#petri-run")
    # one reading holds both (once under CI-like load a second reading found the message gone: see the
    # issue 20 notes)
    page.wait_for_function("(() => { const t = document.querySelector('#petri-concepts').innerText;"
                           " return t.includes('at least 2 are needed') && t.includes('concepts'); })()")
    save_screenshot(page, tmp_path, "dish-error.png")


def test_a_refusal_stays_named_after_a_later_event(page):
    """Issue 21 item 2: after a refused Run (bad concepts) the message on the concept field went away
    a moment later. The ordering that does it: a later event (here a Shuffle click) ends after the
    refusal, and Gradio's frontend replaces the field's loading status, which holds the mark. The
    status line, written by the Run click itself, still names the refused field after it."""
    tab(page, "Dish")
    page.fill("#petri-concepts textarea, #petri-concepts input", "order")
    page.wait_for_function("!document.querySelector('#petri-canvas').textContent.includes('inventory')")
    page.click("#petri-run")
    page.wait_for_function("document.querySelector('#petri-status').innerText.includes('Not run')", timeout=30_000)
    page.wait_for_function("document.querySelector('#petri-concepts').innerText.includes('at least 2 are needed')")
    page.click("#petri-shuffle")
    try:  # Gradio 6.31 drops the field's mark on the shuffle's status update (within a second)
        page.wait_for_function("!document.querySelector('#petri-concepts').innerText.includes('at least 2 are needed')",
                               timeout=10_000)
    except Exception as error:  # a Gradio that keeps the mark: nothing to wait for
        if "Timeout" not in type(error).__name__:
            raise
    status = page.inner_text("#petri-status")
    assert "Not run" in status and "concepts" in status and "at least 2 are needed" in status, status
    assert "Queued" not in status


#: For each figure and table of the open tab: its id, its right edge, the page width, and whether the part
#: that does not fit scrolls (an ancestor inside the page with overflow-x auto or scroll).
NARROW_PROBE = """() => {
  const out = [];
  const scrolls = el => { for (let e = el; e && e !== document.body; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX; if ((o === 'auto' || o === 'scroll') && e.clientWidth <= innerWidth)
        return e.getBoundingClientRect().right <= innerWidth + 1; } return false; };
  for (const p of document.querySelectorAll('.js-plotly-plot')) {
    if (!p.offsetParent) continue;
    const svg = p.querySelector('.main-svg'); const r = svg.getBoundingClientRect();
    // a figure drawn wider than the page on purpose (readable cells) must scroll sideways in a box that fits
    out.push({kind: 'figure', id: p.closest('[id]').id, right: r.right, width: r.width,
              fits: r.right <= innerWidth + 1 || scrolls(p.parentElement)});
  }
  for (const t of document.querySelectorAll('table')) {
    if (!t.offsetParent) continue;
    const r = t.getBoundingClientRect();
    out.push({kind: 'table', id: t.closest('[id]') ? t.closest('[id]').id : '', right: r.right, width: r.width,
              fits: r.right <= innerWidth + 1 || scrolls(t.parentElement)});
  }
  return out;
}"""


def settle_narrow_layout(page, timeout_ms: int = 30_000) -> None:
    """Wait until plotly has relaid every figure to its container (under load it takes seconds, so a
    fixed sleep made the check flaky); on timeout the caller's assertion names what does not fit."""
    try:
        page.wait_for_function(f"(() => {{ const f = ({NARROW_PROBE})(); return f.length > 0 && f.every(x => x.fits); }})()",
                               timeout=timeout_ms)
    except Exception as error:  # playwright's TimeoutError (imported lazily: the module may be absent)
        if "Timeout" not in type(error).__name__:
            raise


def test_at_420_px_no_study_figure_or_table_is_cut_off(page):
    """Issue 20 item 12: on a 420 px wide screen every figure of the Study tab fits the page
    (figures take their container's width) and every table either fits or scrolls sideways. (The
    module's page, narrowed: a second sync Playwright cannot start beside it.)"""
    page.set_viewport_size({"width": 420, "height": 900})
    try:
        tab(page, "Study")
        page.wait_for_selector("#petri-study-instability .js-plotly-plot")
        page.wait_for_selector("#petri-study-events-fig .js-plotly-plot")
        settle_narrow_layout(page)
        found = page.evaluate(NARROW_PROBE)
        assert sum(f["kind"] == "figure" for f in found) >= 2 and any(f["kind"] == "table" for f in found)
        assert all(f["fits"] for f in found), [f for f in found if not f["fits"]]
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})


#: The canvas ``sel``'s chips (concept, width in px) and their labels' boxes; the download list ``files``'s
#: names that are cut (not wholly shown); the pair table ``pairs``'s header cells wholly in its visible box.
NARROW_PARTS_PROBE = """([sel, files, pairs]) => {
  const chips = [...document.querySelectorAll(sel + ' .pc-chip')].map(c => [c.dataset.concept, c.getBoundingClientRect().width]);
  const labels = [...document.querySelectorAll(sel + ' .pc-label')].map(l => { const r = l.getBoundingClientRect();
      return [l.textContent, r.left, r.right, r.top, r.bottom]; });
  const cut = [...document.querySelectorAll(files + ' td.filename')].filter(td => {
      const stem = td.querySelector('.stem');
      return td.scrollWidth > td.clientWidth + 1 || (stem && stem.scrollWidth > stem.clientWidth + 1); })
    .map(td => td.getAttribute('aria-label'));
  const names = document.querySelectorAll(files + ' td.filename').length;
  const table = document.querySelector(pairs + ' table');
  let box = table.parentElement;
  while (box && box !== document.body && !['auto', 'scroll', 'hidden'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
  const view = (box && box !== document.body ? box : document.documentElement).getBoundingClientRect();
  const shown = [...table.querySelectorAll('thead th')].filter(th => { const r = th.getBoundingClientRect();
      return r.width > 0 && r.left >= Math.max(view.left, 0) - 1 && r.right <= Math.min(view.right, innerWidth) + 1; })
    .map(th => th.innerText.trim());
  return {chips, labels, cut, names, shown};
}"""


def assert_narrow_tab_fits(page, elem: str, files: str, pairs: str) -> None:
    """The open tab at 420 px: every figure fits and every table fits or scrolls (NARROW_PROBE); every
    chip of its canvas is at least 10 px wide and no two chip labels overlap; no download name is cut;
    the pair table shows at least two of its columns at once."""
    settle_narrow_layout(page)
    found = page.evaluate(NARROW_PROBE)
    assert sum(f["kind"] == "figure" for f in found) >= 2, found
    assert all(f["fits"] for f in found), [f for f in found if not f["fits"]]
    parts = page.evaluate(NARROW_PARTS_PROBE, [f"#{elem}-canvas", files, pairs])
    assert len(parts["chips"]) == 3 and all(w >= 10 for _, w in parts["chips"]), parts["chips"]
    labels = parts["labels"]
    for i, (ta, la, ra, ua, da) in enumerate(labels):
        for tb, lb, rb, ub, db in labels[i + 1:]:
            assert ra <= lb or rb <= la or da <= ub or db <= ua, f"labels {ta!r} and {tb!r} overlap"
    assert parts["names"] and not parts["cut"], parts
    assert len(parts["shown"]) >= 2, parts["shown"]


def test_at_420_px_the_dish_and_compare_tabs_fit(page, served):
    """Issue 20 item 12 on the Dish and Compare tabs: a dish and a comparison run at 420 px wide (the
    module's page narrowed), then every figure fits, every table fits or scrolls, chips are at least
    10 px wide with labels that do not overlap, the CSV names are whole (they read ".c" before) and
    the pair table shows more than its "pair" column; so too for a reopened dish whose chips sit side by
    side (their labels stack)."""
    from dataclasses import replace

    from petri.app.service import SeedEvent
    from petri.core.dish import Dish

    _, service, _ = served
    page.set_viewport_size({"width": 420, "height": 900})
    try:
        before = {r["run_id"] for r in service.store.list_runs(200)}
        tab(page, "Dish")
        page.fill("#petri-concepts textarea, #petri-concepts input", "order, inventory, person")
        page.wait_for_selector("#petri-canvas .pc-chip[data-concept='inventory']")
        page.fill("#petri-samples input[type=number]", "2")
        open_settings(page)
        page.fill("#petri-steps input[type=number]", "4")
        page.click("#petri-run")
        wait_new_done(page, "#petri-status", before)
        page.wait_for_selector("#petri-files td.filename")
        assert_narrow_tab_fits(page, "petri", "#petri-files", "#petri-pairs")
        # a stored dish with its chips side by side (their labels would overlap on one line), reopened
        dish = Dish(("order", "inventory", "person"), "The stock was counted.", "{event}", positions=(20, 24, 27),
                    shuffle=False)
        side_by_side = service.seed(service.plan([SeedEvent(dish)], 1,
                                                 replace(service.lm.default_settings(), max_denoising_steps=2))).run_id
        reopen_run(page, side_by_side)
        page.wait_for_selector(f"#petri-status:has-text('{side_by_side}')")
        page.wait_for_function("document.querySelector(\"#petri-canvas .pc-chip[data-concept='person']\").dataset.start == '27'")
        assert_narrow_tab_fits(page, "petri", "#petri-files", "#petri-pairs")
        save_screenshot(page, Path(service.store.path).parent, "dish-420.png")
        run_compare(page, before, samples=2, steps=4)
        page.click("#petri-cmp-figures-button")
        page.wait_for_selector("#petri-cmp-figures td.filename", timeout=300_000)
        assert_narrow_tab_fits(page, "petri-cmp", "#petri-cmp-figures", "#petri-cmp-pairs")
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})
