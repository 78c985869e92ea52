"""The trajectory viewer's script in a real browser (Debian's chromium via Playwright), on records of
both model families, with no server: the page holds the viewer's HTML, CSS and script and hands it
a record as Gradio would (``props.value`` and ``watch``). What each cell shows is checked against
the stored trajectory itself: the canvas by default, ``[MASK]`` cells for masked diffusion,
anchors with their own tokens, the raw argmax on request, and a last frame that is the final text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS

from petri.core.dish import Dish
from petri.core.trajectory import SamplerSettings
from petri.engine.families.masked import MaskedSettings
from petri.engine.seeding import seed_dish
from petri.engine.torch.tiny import tiny_masked_model
from petri.web.tokens import TokenText
from petri.web.ui.widgets.trajectory import VIEW_CSS, VIEW_HTML, VIEW_JS, TrajectoryView

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

DISH = Dish(("order", "person"), "Only 90 units are in stock, but the customer ordered 120.")


def harness(record: dict) -> str:
    """A page that runs the viewer's script as Gradio's ``gr.HTML`` would: ``element``, ``props``, ``watch``."""
    return f"""<html><head><style>{VIEW_CSS}</style></head><body><div id="el">{VIEW_HTML}</div><script>
(() => {{  // a scope of its own: the next page of the same tab declares these again
  const element = document.getElementById('el');
  const props = {{value: {json.dumps(record)}}};
  let watcher = null;
  const watch = (name, fn) => {{ watcher = fn; }};
  (function (element, props, watch) {{ {VIEW_JS} }})(element, props, watch);
  window.setValue = (v) => {{ props.value = v; watcher(); }};
}})();
</script></body></html>"""


def cells(page) -> dict:
    return page.evaluate("""() => {
        const root = document.querySelector('.pt'), toks = [...root.querySelectorAll('.pt-tok')];
        return {step: +root.dataset.step, steps: +root.dataset.steps, result: root.dataset.result, family: root.dataset.family,
                mode: root.dataset.mode, label: document.querySelector('.pt-step').textContent,
                legend: document.querySelector('.pt-legend').textContent,
                options: [...document.querySelectorAll('.pt-mode option')].map((o) => o.value),
                ids: toks.map((e) => +e.dataset.id), texts: toks.map((e) => e.textContent),
                masked: toks.map((e) => e.dataset.masked === '1'), faded: toks.map((e) => e.classList.contains('pt-renoised'))};
    }""")


def go_to(page, step: int) -> dict:
    page.locator(".pt-slider").fill(str(step))
    page.wait_for_function(f"document.querySelector('.pt').dataset.step === '{step}'")
    return cells(page)


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser.new_page(viewport={"width": 1200, "height": 700})
        browser.close()


def view_of(lm, traj):
    tokens = TokenText(lm.tokenizer)
    return TrajectoryView(service=None, tokens=tokens).record(traj, 0, "run:0"), tokens


def test_masked_diffusion_shows_mask_cells_until_unmasked_and_ends_on_the_final_text(page):
    lm = tiny_masked_model(canvas_length=16, seed=2)
    traj = seed_dish(lm, DISH, 2, MaskedSettings(max_denoising_steps=8), seed=1)
    record, tokens = view_of(lm, traj)
    page.set_content(harness(record))
    first = cells(page)
    assert first["family"] == "masked-diffusion" and first["mode"] == "canvas"
    assert first["options"] == ["canvas", "peek", "argmax"] and "[MASK]" in first["legend"]
    steps = int(traj.steps[0])
    anchors = traj.anchor_mask[0]
    for t in (0, steps // 2, steps - 1):
        shown = go_to(page, t)
        canvas = traj.canvas[0, t]
        still = canvas == lm.mask_token_id
        assert shown["masked"] == still.tolist(), t  # [MASK] exactly where the canvas is still masked
        assert all(text == "[MASK]" for text, m in zip(shown["texts"], still) if m)
        assert [i for i, m in zip(shown["ids"], still) if not m] == canvas[~still].tolist()  # committed tokens
        assert np.array(shown["ids"])[anchors].tolist() == traj.final_ids[0][anchors].tolist()  # anchors: their own
    assert traj.canvas[0, 0][~anchors].tolist().count(lm.mask_token_id) > 0  # the first frame is mostly masks
    # under [MASK], the model's raw argmax on request
    page.select_option(".pt-mode", "peek")
    shown = go_to(page, 0)
    still = traj.canvas[0, 0] == lm.mask_token_id
    assert [i for i, m in zip(shown["ids"], still) if m] == traj.argmax[0, 0][still].tolist()
    # the last frame: the returned canvas, which is the final text
    page.select_option(".pt-mode", "canvas")
    last = go_to(page, steps)
    assert last["result"] == "1" and "returned canvas" in last["label"]
    assert last["ids"] == traj.final_ids[0].tolist() and not any(last["masked"])
    assert "".join(tokens(i) for i in last["ids"]) == traj.final_texts[0]


def test_uniform_diffusion_shows_the_canvas_renoised_cells_faded_and_the_argmax_on_request(page, tiny_lm):
    traj = seed_dish(tiny_lm, DISH, 2, SamplerSettings(max_denoising_steps=6, entropy_bound=3.0), seed=3)
    record, tokens = view_of(tiny_lm, traj)
    page.set_content(harness(record))
    first = cells(page)
    assert first["family"] == "uniform-diffusion" and first["options"] == ["canvas", "argmax"]
    assert "renoised" in first["legend"] and "[MASK]" not in first["legend"]
    anchors = traj.anchor_mask[0]
    for t in range(int(traj.steps[0])):
        shown = go_to(page, t)
        assert shown["ids"] == traj.canvas[0, t].tolist(), t  # the tokens on the canvas, anchors included
        assert shown["faded"] == (~traj.accepted[0, t]).tolist()  # renoised = not accepted at this step
        assert not any(shown["masked"])
    page.select_option(".pt-mode", "argmax")
    # a step where the model's own argmax disagrees with an anchor (this seed has one)
    t = next(t for t in range(int(traj.steps[0])) if (traj.argmax[0, t][anchors] != traj.final_ids[0][anchors]).any())
    shown = go_to(page, t)
    ids = np.array(shown["ids"])
    assert ids[~anchors].tolist() == traj.argmax[0, t][~anchors].tolist()  # the raw argmax off the anchors
    assert ids[anchors].tolist() == traj.final_ids[0][anchors].tolist()  # anchors keep their own tokens
    last = go_to(page, int(traj.steps[0]))
    assert last["result"] == "1" and last["ids"] == traj.final_ids[0].tolist()
    assert "".join(tokens(i) for i in last["ids"]) == traj.final_texts[0]


def test_the_flip_mark_is_a_form_no_concept_colour_takes(page, tiny_lm):
    """Issue 49, item 5: the flip mark was a red ring, the colour of the concept *order*'s border, so
    an *order* anchor looked flipped. Now a flip is a dashed outline and an anchor a solid border."""
    traj = seed_dish(tiny_lm, DISH, 1, SamplerSettings(max_denoising_steps=6, entropy_bound=3.0), seed=3)
    record, _ = view_of(tiny_lm, traj)
    page.set_content(harness(record))
    flipped_step = next(t for t in range(1, int(traj.steps[0])) if any(record["flipped"][t]))
    go_to(page, flipped_step)
    styles = page.evaluate("""() => [...document.querySelectorAll('.pt-tok')].map((e) => {
        const c = getComputedStyle(e);
        return {flip: e.dataset.flipped === '1', anchor: !!e.dataset.concept, outline: c.outlineStyle,
                border: c.borderTopStyle, shadow: c.boxShadow, colour: c.borderTopColor};
    })""")
    assert any(s["flip"] for s in styles) and any(s["anchor"] for s in styles)
    for cell in styles:
        assert (cell["outline"] == "dashed") == cell["flip"]  # only a flip is dashed
        assert cell["shadow"] == "none"  # no coloured ring at all
        if cell["anchor"]:
            assert cell["border"] == "solid" and cell["outline"] != "dashed"
    order = next(s for s in styles if s["anchor"] and s["colour"] == "rgb(214, 39, 40)")  # #d62728, the order chip
    assert order["outline"] != "dashed"


def test_a_run_stored_before_the_canvas_shows_the_argmax_and_says_so(page, tiny_lm):
    from dataclasses import replace

    traj = replace(seed_dish(tiny_lm, DISH, 1, SamplerSettings(max_denoising_steps=4), seed=3), canvas=None)
    record, _ = view_of(tiny_lm, traj)
    page.set_content(harness(record))
    shown = cells(page)
    assert shown["options"] == ["argmax"] and shown["mode"] == "argmax"
    assert np.array(shown["ids"])[~traj.anchor_mask[0]].tolist() == traj.argmax[0, 0][~traj.anchor_mask[0]].tolist()


@pytest.mark.parametrize("family", ["uniform", "masked"])
def test_flowing_text_joins_word_pieces_into_the_text_the_model_wrote(page, tiny_lm, family):
    """Issue 49, item 12: the boxes split words ("sem ic ut on ents"); flowing text joins the pieces
    as the tokenizer writes them, with the same colours and tooltips. On the last frame it reads as
    the decoded final canvas."""
    if family == "masked":
        lm = tiny_masked_model(canvas_length=16, seed=2)
        traj = seed_dish(lm, DISH, 1, MaskedSettings(max_denoising_steps=8), seed=1)
    else:
        lm = tiny_lm
        traj = seed_dish(lm, DISH, 1, SamplerSettings(max_denoising_steps=4), seed=3)
    record, tokens = view_of(lm, traj)
    page.set_content(harness(record))
    page.check(".pt-flow-toggle")
    last = go_to(page, int(traj.steps[0]))
    flowing = page.evaluate("() => document.querySelector('.pt-canvas').textContent")
    assert page.evaluate("() => document.querySelector('.pt').dataset.flow") == "1"
    assert flowing == "".join(tokens(i) for i in traj.final_ids[0])  # exactly the decoded pieces, joined
    assert last["ids"] == traj.final_ids[0].tolist()  # the same cells, with their ids and tooltips
    gaps = page.evaluate("() => getComputedStyle(document.querySelector('.pt-tok')).paddingLeft")
    assert gaps == "0px"
    if family == "masked":  # an early frame: masks read as [MASK] between the words
        go_to(page, 0)
        assert "[MASK]" in page.evaluate("() => document.querySelector('.pt-canvas').textContent")
