"""Issue 60's small things without a browser: what each handler hands the page (the browser tests in
test_browser_dish.py check the page itself). Expected values are worked by hand or read from the
stored trajectory, never from the code under test."""

from __future__ import annotations

import numpy as np
import pandas as pd

from petri.app.service import SeedEvent
from petri.core.dish import Dish
from petri.core.paths import assets_dir
from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.study.figures.anchor_marks import aggregate_anchor_boxes
from petri.web.ui.build import build_ui
from petri.web.ui.compare import CompareController
from petri.web.ui.dish_tab.dish import DishController
from petri.web.ui.model import model_card
from petri.web.ui.probe_tab.probe_views import probe_row
from petri.web.ui.runs import empty_note, run_details, runs_table
from petri.web.ui.views import END_TOKEN_LABEL


def test_a_shuffled_slots_hover_says_per_sample_what_sat_there():
    """Hand-worked: three samples put order, person, order in slot 1 (start 3) and person, order,
    person in slot 2 (start 8)."""
    order3, person8 = AnchorSpan("order", 3, (11,)), AnchorSpan("person", 8, (12,))
    person3, order8 = AnchorSpan("person", 3, (12,)), AnchorSpan("order", 8, (11,))
    boxes = aggregate_anchor_boxes([[order3, person8], [person3, order8], [order3, person8]])
    assert [b.detail for b in boxes] == ["slot 1: order/person; per sample: 0 order · 1 person · 2 order",
                                         "slot 2: person/order; per sample: 0 person · 1 order · 2 person"]


def test_the_masked_models_tab_finds_its_model_card_by_name():
    """The Model tab said "No model card" for ``--model petri-small-mdm`` (a name, not a folder)."""
    card = (assets_dir() / "petri-small-mdm" / "README.md").read_text(encoding="utf-8")
    assert card.strip() and model_card("petri-small-mdm").strip() in card
    assert model_card("no-such-model-anywhere") == ""


def test_a_labelled_set_evaluation_is_listed_with_its_set_name():
    """The row read "evaluation of" and nothing: the set's name is its header's ``probe_set``."""
    run = {"kind": "probe-eval", "request": {"set": {"probe_set": "shipped-order-checks", "questions": [{"name": "q"}],
                                                    "items": [{}, {}]}, "repeats": 1, "samples": 2, "steps": 3}}
    assert probe_row(run)[0] == "evaluation of shipped-order-checks"


def test_the_runs_choice_is_not_fixed_when_the_page_is_built(service):
    """The Run dropdown started on the run that was newest when the server started (the oldest one by
    the time the tab opened): the page is built with no run picked; the tab's refresh picks the newest."""
    dish = Dish(("order", "person"), "The order shipped.", "{event}", positions=(2, 9))
    service.seed(service.plan([SeedEvent(dish)], 1, SamplerSettings(max_denoising_steps=2), seed=1))
    config = build_ui(service).get_config_file()
    (choice,) = [c for c in config["components"] if c.get("props", {}).get("elem_id") == "petri-runs-choice"]
    assert choice["props"].get("value") in (None, "", [])


def test_an_empty_search_says_so_and_the_picked_row_reads_whole(service):
    dish = Dish(("order", "person"), "The order shipped.", "{event}", positions=(2, 9))
    run_id = service.seed(service.plan([SeedEvent(dish)], 1, SamplerSettings(max_denoising_steps=2), seed=1)).run_id
    frame = runs_table(service)
    details = run_details(frame, run_id)
    for part in (run_id, "The order shipped.", "order, person", "dish"):
        assert part in details
    assert run_details(frame, None) == "" and run_details(frame.iloc[0:0], run_id) == ""
    assert runs_table(service, search="zebra").empty
    assert empty_note("zebra", "all") == "No stored run matches *zebra*."
    assert empty_note("", "study") == "No stored run of kind *study* yet."


def test_a_new_run_clears_the_sample_range_of_the_last_one(service):
    """The Sample slider kept the previous run's range while a new run sampled (or after it was cancelled)."""
    ctl = DishController(service)
    cleared = ctl.cleared_views()
    assert cleared["sample"]["maximum"] == 1 and cleared["sample"]["value"] == 0
    assert cleared[ctl.trajectory.name("sample")]["maximum"] == 1


def test_compare_shows_one_sample_in_both_texts_and_both_viewers(service):
    """Issue 60, item 10: Compare showed Event A's trajectory for sample 1 under "benign: sample 0"
    text. One selector now sets both texts and both viewers; the end-of-turn chip is in a text's legend
    only where that text has such a token."""
    dish = DishController(service)
    ctl = CompareController(service, dish)
    events = [SeedEvent(Dish(("order", "person"), text, "{event}", positions=(2, 9), shuffle=False), group)
              for group, text in (("benign", "The order shipped."), ("odd", "The order shipped twice and never."))]
    result = service.seed(service.plan(events, 3, SamplerSettings(max_denoising_steps=3), seed=2))
    views = ctl.show_sample(result.run_id, 2, ("canvas", "argmax"))
    assert views["text_a"]["label"] == "benign: sample 2" and views["text_b"]["label"] == "odd: sample 2"
    a, b = (ctl.trajectories[i].name("view") for i in (0, 1))
    assert views[a]["sample"] == 2 and views[b]["sample"] == 2
    assert views[a]["mode"] == "canvas" and views[b]["mode"] == "argmax"  # each viewer keeps its own choice
    stored = [t for _, _, t in service.load_events(result.run_id)]
    for name, traj in zip(("text_a", "text_b"), stored):
        tokens = views[name]["value"]
        has_end = any(label == END_TOKEN_LABEL for _, label in tokens)
        assert (END_TOKEN_LABEL in views[name]["color_map"]) == has_end
        assert "".join(text for text, label in tokens if label != END_TOKEN_LABEL).strip()
        assert len(traj.final_ids) == 3
    assert np.all(stored[0].anchor_mask == stored[1].anchor_mask)


def test_the_canvas_value_says_when_each_sample_shuffles(service):
    ctl = DishController(service)
    table = pd.DataFrame({"concept": ["order", "person"], "start": [2, 9], "tokens": [1, 1]})
    assert ctl.canvas(table, True)["shuffled"] is False
    assert ctl.canvas(table, True, None, True)["shuffled"] is True


def test_the_token_figures_rows_are_the_viewers_cells_then_the_final_text(tiny_lm):
    """Issue 60, item 3, on the figure alone: its rows are the stored canvas (``[MASK]`` where a masked
    canvas is still masked) or the raw argmax, anchors their own token, then the returned canvas."""
    from dataclasses import replace

    import pytest

    from petri.engine.families.masked import MaskedSettings
    from petri.engine.seeding import seed_dish
    from petri.engine.torch.tiny import tiny_masked_model
    from petri.measure.replay import visible_text
    from petri.study.figures.trajectory_plots import figure_rows, shown_mode, trajectory_figure
    from petri.web.tokens import TokenText

    dish = Dish(("order", "person"), "Only 90 units are in stock, but the customer ordered 120.")
    lm = tiny_masked_model(canvas_length=16, seed=2)
    traj = seed_dish(lm, dish, 1, MaskedSettings(max_denoising_steps=8), seed=1)
    steps, anchors = int(traj.steps[0]), traj.anchor_mask[0]
    ids, masked, peek, mode = figure_rows(traj, 0, "canvas")
    want = traj.canvas[0, :steps].copy()
    want[:, anchors] = traj.final_ids[0][anchors]
    assert mode == "canvas" and ids[:-1].tolist() == want.tolist() and ids[-1].tolist() == traj.final_ids[0].tolist()
    assert masked[:-1].tolist() == ((want == lm.mask_token_id) & ~anchors).tolist() and masked[:-1].any()
    assert not masked[-1].any() and not peek.any()
    ids, masked, peek, _ = figure_rows(traj, 0, "peek")
    assert ids[:-1][peek[:-1]].tolist() == traj.argmax[0, :steps][peek[:-1]].tolist() and peek.any()
    fig = trajectory_figure(traj, 0, TokenText(lm.tokenizer), mode="canvas")
    assert "renoised" not in fig.layout.title.text and "[MASK]" in fig.layout.title.text
    uniform = seed_dish(tiny_lm, dish, 1, SamplerSettings(max_denoising_steps=4), seed=3)
    tokens = TokenText(tiny_lm.tokenizer)
    fig = trajectory_figure(uniform, 0, tokens, mode="argmax")
    shown = np.asarray(fig.data[-2].text if fig.data[-1].type == "scatter" else fig.data[-1].text, dtype=object)
    assert shown[-1].tolist() == [visible_text(tokens(int(i))).replace("<", "&lt;").replace(">", "&gt;")
                                  for i in uniform.final_ids[0]]  # whole tokens, the final text
    assert "renoised" in fig.layout.title.text and "raw argmax" in fig.layout.title.text
    assert shown_mode(uniform, "peek") == "canvas" and shown_mode(replace(uniform, canvas=None), "canvas") == "argmax"
    with pytest.raises(ValueError, match="mode"):
        shown_mode(uniform, "sideways")
