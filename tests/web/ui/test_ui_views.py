"""The UI's new views without a browser: the final text read as the model's answer, the canvas
control's value both ways, the Compare tab (same layouts, the difference map, paired differences),
the shipped study results and reopening stored runs (dish, comparison, study) without sampling."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from petri.app.service import PetriService
from petri.core.paths import shipped_run_dir
from petri.measure.metrics import flip_grid
from petri.measure.tables import samples_table, segments_table
from petri.runs.store import RunStore
from petri.web.ui.compare import CompareController, paired_samples
from petri.web.ui.dish_tab.dish import DishController
from petri.web.ui.runs import RunsController, runs_table
from petri.web.ui.study_tab.shipped import load_shipped, shipped_figures, shipped_markdown
from petri.web.ui.study_tab.study import StudyController
from petri.web.ui.views import END_TOKEN_LABEL, highlighted_text
from petri.web.ui.widgets.canvas import placement_rows


def one_sample_dish(service, ctl):
    *_, final = ctl.run("order, person", "x", "{event}", 1, 0,
                        pd.DataFrame({"concept": ["order", "person"], "start": [2, 9], "tokens": [1, 1]}),
                        False, 2, 0.1, 0.4, 0.8, False, True)
    return service.store.load_events(final["run_id"])[0][2]


def test_final_text_hides_special_tokens_and_marks_end_of_turn_tokens(service):
    ctl = DishController(service)
    tok = service.lm.tokenizer
    traj = one_sample_dish(service, ctl)
    word = tok.encode(" stock", add_special_tokens=False)
    assert len(word) == 1
    ids = traj.final_ids.copy()
    # positions 0..1 words, 2 = order (anchor), 3 <pad>, 4 word, 5 <eos>, 6 word, 7 <bos>, 8 word, 9 = person (anchor)
    ids[0, [0, 1, 4, 6, 8]] = word[0]
    ids[0, 3], ids[0, 5], ids[0, 7] = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    ids[0, 10:] = word[0]
    pieces = highlighted_text(replace(traj, final_ids=ids), 0, ctl.tokens)
    labels = [label for _, label in pieces]
    texts = "".join(t for t, _ in pieces)
    assert "<pad>" not in texts and "<bos>" not in texts
    # the <eos> at 5 is one marker; the words after it are the answer as plainly as those before
    assert labels == [None, None, "order", None, END_TOKEN_LABEL, None, None, "person"] + [None] * (16 - 10)
    assert pieces[4] == ("<eos>", END_TOKEN_LABEL)
    assert [t for t, label in pieces if label is None] == [" stock"] * (5 + 16 - 10)


def test_a_canvas_starting_with_eos_shows_what_the_model_wrote(service):
    """<eos> at 0 and 1 (one marker, ×2), the answer after it unlabelled, trailing <eos> fill one marker
    (positions: 0-1 <eos>, 2 order, 3-8 words, 9 person, 10-11 words, 12 <eos>, 13 <pad>, 14-15 <eos>)."""
    ctl = DishController(service)
    tok = service.lm.tokenizer
    traj = one_sample_dish(service, ctl)
    word = tok.encode(" stock", add_special_tokens=False)[0]
    ids = traj.final_ids.copy()
    kept = traj.final_ids[0, [2, 9]]  # the anchors stay
    ids[0, [0, 1, 3, 4, 5, 6, 7, 8, 10, 11]] = word
    ids[0, [0, 1, 12, 13, 14, 15]] = tok.eos_token_id
    ids[0, 13] = tok.pad_token_id  # a hidden special inside the trailing run does not split it
    pieces = highlighted_text(replace(traj, final_ids=ids), 0, ctl.tokens)
    assert pieces == ([("<eos> ×2", END_TOKEN_LABEL), (ctl.tokens(kept[0]), "order")]
                      + [(" stock", None)] * 6 + [(ctl.tokens(kept[1]), "person")] + [(" stock", None)] * 2
                      + [("<eos> ×3", END_TOKEN_LABEL)])


def test_canvas_value_round_trips_to_the_slot_table(service):
    ctl = DishController(service)
    table = ctl.spread("order, inventory, person")
    value = ctl.canvas(table)
    assert value["canvas_length"] == 16 and value["error"] == ""
    assert [(c["concept"], c["start"], c["tokens"]) for c in value["chips"]] == [tuple(r) for r in table.values.tolist()]
    moved = {**value, "chips": [{**c, "start": c["start"] + (1 if c["concept"] == "person" else 0)} for c in value["chips"]]}
    back = ctl.from_canvas(moved)
    assert placement_rows(moved) == back.values.tolist()
    assert back.set_index("concept").loc["person", "start"] == table.set_index("concept").loc["person", "start"] + 1


def compare(service, samples=3):
    ctl = CompareController(service, DishController(service))
    *_, final = ctl.run("order, inventory, person", "benign", "The order was packed.", "contradictory",
                        "Ninety units in stock, none in stock.", "{event}", samples, 4, 5)
    return ctl, final


def test_compare_runs_both_events_on_the_same_layouts_and_seed(service):
    _, final = compare(service)
    (_, ga, a), (_, gb, b) = service.store.load_events(final["run_id"])
    assert (ga, gb) == ("benign", "contradictory")
    assert a.anchors == b.anchors and a.seed == b.seed and not np.array_equal(a.prompt_ids, b.prompt_ids)
    # the difference map is B's flip counts minus A's (independently: the two grids summed over samples)
    diff = final["difference"].data[0].z
    ca = flip_grid(a.argmax, a.steps, a.anchor_mask).sum(axis=0).astype(float)
    cb = flip_grid(b.argmax, b.steps, b.anchor_mask).sum(axis=0).astype(float)
    expected = cb - ca
    expected[:, a.anchor_mask.all(axis=0)] = np.nan
    np.testing.assert_array_equal(np.asarray(diff, dtype=float), expected)
    assert "benign" in final["heatmap_a"].layout.title.text and "contradictory" in final["heatmap_b"].layout.title.text
    run = final["run_id"][:12]  # every panel names the run it shows (issue 49)
    for shown in (final["heatmap_a"].layout.title.text, final["heatmap_b"].layout.title.text,
                  final["difference"].layout.title.text, final["traj_a_view"]["title"], final["traj_b_view"]["title"]):
        assert f"run {run}" in shown, shown
    assert final["summary"].startswith(f"Run `{final['run_id']}`")
    # paired per sample: each sample's mean segment instability in B minus in A
    paired = paired_samples(a, b, ("benign", "contradictory"))
    for s in range(3):
        ia = segments_table(a).query("sample == @s")["instability"].mean()
        ib = segments_table(b).query("sample == @s")["instability"].mean()
        assert paired.loc[s, "instability contradictory − benign"] == pytest.approx(ib - ia, nan_ok=True)
    assert "same layouts and seed" in final["summary"]
    assert {"pair", "instability benign", "instability contradictory"} <= set(final["pairs"].columns)


def test_shipped_study_results_are_the_committed_ones():
    shipped = load_shipped(shipped_run_dir())
    assert shipped is not None
    committed = json.loads((shipped_run_dir() / "run.json").read_text())
    instability, ranked, jaccard = shipped_figures(shipped)
    assert committed["analysis"]["comparison"]["event"]["summary"].replace("<", "") in \
        instability.layout.title.text.replace("<br>", " ").replace("<b>", "").replace("</b>", "")
    assert sorted(ranked.data[0].y) == sorted(shipped.events.query("group == 'benign'")["event_id"])
    assert len(ranked.layout.yaxis.categoryarray) == len(committed["study"]["events"]) == 36
    text = shipped_markdown(shipped)
    assert committed["run_id"] in text and committed["model_id"] in text and "Shipped results" in text
    assert jaccard.data[0].z.shape == (5, 5)


def test_stored_runs_reopen_without_sampling(service, monkeypatch):
    dish = DishController(service)
    *_, dish_final = dish.run("order, inventory, person", "x", "{event}", 2, 1, dish.spread("order, inventory, person"),
                              True, 3, 0.1, 0.4, 0.8, False, True)
    cmp_ctl, cmp_final = compare(service, samples=2)
    study = StudyController(service)
    events = pd.DataFrame([["b1", "benign", "A.", ""], ["b2", "benign", "B.", ""], ["c1", "contradictory", "C.", ""],
                           ["c2", "contradictory", "D.", ""]], columns=["id", "group", "text", "concepts"])
    templates = pd.DataFrame([["t1", "{event}"]], columns=["id", "text"])
    *_, study_final = study.run({"id": "m", "title": "m"}, "order, person", events, templates, "benign, contradictory",
                                "", ["t1"], 2, 0, 3)
    table = runs_table(service)
    # newest first (the store keeps times to the second, so runs of one second may come in any order)
    assert sorted(table["kind"]) == ["compare", "dish", "study"] and table["created_at"].is_monotonic_decreasing
    by_kind = table.set_index("kind")
    assert by_kind.loc["dish", "concepts"] == "order, inventory, person"
    assert by_kind.loc["dish", "run_id"] == dish_final["run_id"] and by_kind.loc["compare", "run_id"] == cmp_final["run_id"]

    def no_sampling(*args, **kwargs):
        raise AssertionError("reopening a run sampled the model")

    monkeypatch.setattr(service.lm, "sample", no_sampling)
    runs = RunsController(service, {"dish": dish, "compare": cmp_ctl, "study": study})
    kind, note, views = runs.open(dish_final["run_id"])
    assert kind == "dish" and "nothing was sampled" in note
    assert views["heatmap"].layout.title.text == dish_final["heatmap"].layout.title.text
    assert views["pairs"].equals(dish_final["pairs"]) and len(views["files"]) == 5
    kind, _, views = runs.open(cmp_final["run_id"])
    assert kind == "compare" and views["paired"].equals(cmp_final["paired"])
    kind, _, views = runs.open(by_kind.loc["study", "run_id"])
    # the same statistics as when the run finished (the run line differs: wall time, batches resumed)
    assert kind == "study" and views["stats"].split("**Headline")[1] == study_final["stats"].split("**Headline")[1]
    assert views["groups"]["value"].equals(study_final["groups"]["value"])
    # issue 49 item 13: a reopened study said "0.0 s" (nothing computed); it gives its batches' own sampling time
    stored = service.store.load_events(by_kind.loc["study", "run_id"])
    sampled = sum(traj.timings["total_s"] for _, _, traj in stored)
    assert sampled > 0 and f"{sampled:.1f} s of sampling, as stored" in views["stats"], views["stats"].splitlines()[0]


def test_runs_rows_say_what_first_with_the_design_and_a_headline(service):
    """Issue 49 item 7: each row of the Runs table starts with its kind and what was run (the event in
    full up to 60 characters), then the design and a headline number: the mean flips per free position
    of each group, here worked from the samples tables of the two events."""
    from petri.measure.tables import samples_table

    cmp_ctl, cmp_final = compare(service, samples=2)
    row = runs_table(service).set_index("run_id").loc[cmp_final["run_id"]]
    assert list(runs_table(service).columns[:4]) == ["kind", "what", "design", "headline"]
    assert row["design"] == "2 events × 2 samples, seed 4"
    (_, group_a, a), (_, group_b, b) = service.store.load_events(cmp_final["run_id"])
    want = " · ".join(f"{g} {samples_table(t)['mean_flips_free'].mean():.2f}" for g, t in ((group_a, a), (group_b, b)))
    assert row["headline"] == want
    # the difference comes first in both of Compare's tables (it was off-screen at 1440 px)
    assert list(cmp_final["pairs"].columns[:2]) == ["pair", f"{group_b} − {group_a}"]
    assert list(cmp_final["paired"].columns[:3]) == ["sample", f"instability {group_b} − {group_a}", f"flips {group_b} − {group_a}"]


def test_flip_difference_is_b_minus_a_with_the_shorter_map_padded():
    from petri.study.figures.plots import flip_difference_heatmap

    a = [[0, 1, 2], [1, 0, 0]]  # A stopped after 2 steps
    b = [[1, 1, 0], [0, 2, 0], [3, 0, 1]]
    fig = flip_difference_heatmap(a, b, labels=("benign", "contradictory"), pinned=[False, True, False], n_samples=3)
    expected = [[1, np.nan, -2], [-1, np.nan, 0], [3, np.nan, 1]]  # worked by hand, the pinned column blank
    np.testing.assert_array_equal(np.asarray(fig.data[0].z, dtype=float), np.array(expected, dtype=float))
    assert fig.data[0].zmid == 0 and "contradictory − benign" in fig.layout.title.text


def test_a_reopened_run_puts_every_control_back(service):
    """Reopening a dish, a comparison and a study sets every input of its tab to the run's values:
    fed back to the tab, they make the same request (Run starts the same run; a study resumes)."""
    from petri.web.ui.study_tab.study import fields_to_study

    dish = DishController(service)
    table = dish.spread("order, person", False).iloc[::-1].reset_index(drop=True)  # person's slot first
    inputs = ("order, person", "The stock was counted.", "{event} ({concepts})", 3, 4, table, False, 5, 0.2, 0.3,
              0.7, False, False)
    *_, done = dish.run(*inputs)
    cmp_ctl, cmp_done = compare(service, samples=2)
    study = StudyController(service)
    events = pd.DataFrame([["b1", "benign", "A.", ""], ["b2", "benign", "B.", ""], ["c1", "contradictory", "C.", ""],
                           ["c2", "contradictory", "D.", ""]], columns=["id", "group", "text", "concepts"])
    templates = pd.DataFrame([["t1", "{event}"], ["t2", "{event}: {concepts}"]], columns=["id", "text"])
    *_, study_done = study.run({"id": "m", "title": "m"}, "order, person", events, templates, "benign, contradictory",
                               "", ["t2"], 2, 3, 3)
    runs = RunsController(service, {"dish": dish, "compare": cmp_ctl, "study": study})

    _, _, views = runs.open(done["run_id"])
    assert (views["samples"], views["seed"], views["shuffle"], views["steps"]) == (3, 4, False, 5)
    assert (views["entropy_bound"], views["t_min"], views["t_max"], views["adaptive"], views["pin_thought"]) == \
        (0.2, 0.3, 0.7, False, False)
    assert views["template"] == "{event} ({concepts})" and views["event"] == "The stock was counted."
    assert views["placement"].values.tolist() == table.values.tolist()  # person first, at its start
    again = dish.build_request(*(views[k] for k in ("concepts", "event", "template", "samples", "seed", "placement",
                                                    "shuffle", "steps", "entropy_bound", "t_min", "t_max", "adaptive",
                                                    "pin_thought")))
    assert again == dish.build_request(*inputs)

    _, _, views = runs.open(cmp_done["run_id"])
    assert [views[k] for k in ("label_a", "event_a", "label_b", "event_b", "template", "samples", "seed", "steps")] == \
        ["benign", "The order was packed.", "contradictory", "Ninety units in stock, none in stock.", "{event}", 2, 4, 5]

    run_id = study_done["status"].split("`")[1]
    _, _, views = runs.open(run_id)
    assert (views["samples"], views["seed"], views["steps"], views["template_ids"]["value"]) == (2, 3, 3, ["t2"])
    reopened = fields_to_study(views["meta"], views["concepts"], views["events_table"], views["templates_table"],
                               views["comparison"], views["show"])
    assert reopened.content_hash() == fields_to_study({"id": "m", "title": "m"}, "order, person", events, templates,
                                                      "benign, contradictory", "").content_hash()
    assert run_id in views["loaded"]


def test_count_colour_bars_tick_whole_numbers_and_the_difference_scale_fits_the_data():
    """Few samples: ticks 0, 1, 2, 3 (plotly's 0.5 steps printed as integers read 0, 1, 1, 2, 2, 3, 3);
    many: about 8 whole-number ticks. The difference map's symmetric scale is the largest difference
    drawn (2 here, not the 8 samples), and its anchors are outlined in the concept colours."""
    from petri.core.trajectory import AnchorSpan
    from petri.study.figures.plots import flip_difference_heatmap, flip_heatmap

    bar = flip_heatmap(np.zeros((4, 6)), n_samples=3).data[0].colorbar
    assert (bar.tickmode, bar.tick0, bar.dtick) == ("linear", 0, 1)
    assert flip_heatmap(np.zeros((4, 6)), n_samples=40).data[0].colorbar.dtick == 5
    a, b = np.zeros((3, 6)), np.zeros((5, 6))
    b[4, 2], a[1, 3] = 2, 1  # B − A: +2 at (4, 2), −1 at (1, 3)
    span = AnchorSpan("order", 0, (7,))
    fig = flip_difference_heatmap(a, b, n_samples=8, anchors=[span], colors={"order": "#123456"})
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-2, 2) and fig.data[0].colorbar.dtick == 1
    assert [s.line.color for s in fig.layout.shapes] == ["#123456"]


def test_compare_heatmaps_share_one_step_axis(service):
    _, final = compare(service)
    ya, yb = final["heatmap_a"].layout.yaxis, final["heatmap_b"].layout.yaxis
    assert tuple(ya.range) == tuple(yb.range) and final["heatmap_a"].layout.height == final["heatmap_b"].layout.height
    (_, _, a), (_, _, b) = service.store.load_events(final["run_id"])
    assert tuple(ya.range) == (max(a.steps.max(), b.steps.max()) - 0.5, -0.5)


def test_heatmap_boxes_name_slots_when_samples_shuffle_their_anchors():
    """Item 7 of issue 20: a figure over every sample labels what it aggregates. Hand-worked: sample 0
    pins order at 3 (one token) and person at 8-9; sample 1 swaps them (person 3-4, order 8)."""
    from petri.core.trajectory import AnchorSpan
    from petri.study.figures.anchor_marks import aggregate_anchor_boxes
    from petri.study.figures.plots import flip_heatmap

    order_a, person_a = AnchorSpan("order", 3, (11,)), AnchorSpan("person", 8, (12, 13))
    same = aggregate_anchor_boxes([[order_a, person_a], [person_a, order_a]])  # same layout, other list order
    assert [(b.concept, b.start, b.end) for b in same] == [("order", 3, 4), ("person", 8, 10)]
    shuffled = [[order_a, person_a], [AnchorSpan("person", 3, (12, 13)), AnchorSpan("order", 8, (11,))]]
    boxes = aggregate_anchor_boxes(shuffled)
    assert [(b.concept, b.start, b.end) for b in boxes] == [("slot 1: order/person", 3, 5), ("slot 2: person/order", 8, 10)]
    fig = flip_heatmap(np.zeros((2, 12)), n_samples=2, anchors=boxes)
    labels = [a.text for a in fig.layout.annotations]
    assert "<b>slot 1: order/person</b>" in labels and not any(t == "<b>order</b>" for t in labels)


def test_the_template_dropdown_keeps_each_templates_newline(service):
    """Issue 20 item 13: the dropdown showed "Event: {event}Describe how…" (a one-line box drops
    the newline). Its choices' labels mark the newline and their values are the true texts; a shown
    label that comes back as the value (typed or kept) is still the template with its newline."""
    from petri.core.dish import DEFAULT_TEMPLATE
    from petri.web.ui.dish_tab.dish import TEMPLATE_CHOICES, template_control

    ctl = DishController(service)
    default_label, default_value = TEMPLATE_CHOICES[0]
    assert default_value == "Event: {event}\nDescribe how {concepts} relate in this event." == DEFAULT_TEMPLATE
    assert default_label == "Event: {event}⏎Describe how {concepts} relate in this event."
    inputs = ["order, inventory, person", "Only 90 units are in stock.", None, 3, 2, ctl.spread("order, inventory, person"),
              True, 5, 0.1, 0.4, 0.8, False, True]
    for shown in (default_label, default_value):
        inputs[2] = shown
        assert ctl.build_request(*inputs).template == "Event: {event}\nDescribe how {concepts} relate in this event."
    inputs[2] = "A: {event}⏎B: {concepts}"  # a typed template using the mark
    assert ctl.build_request(*inputs).template == "A: {event}\nB: {concepts}"
    assert template_control("A: {event}\nB: {concepts}") == "A: {event}⏎B: {concepts}"  # a reopened custom one
    assert template_control(DEFAULT_TEMPLATE) == DEFAULT_TEMPLATE  # a choice: its value, shown by its label


def test_the_samples_table_gives_each_header_its_line_and_final_text_room(service):
    """Issue 20 item 13: the Samples table squeezed its headers ("sa/mp/le") and cut final_text.
    Every column gets a width that holds its header on one line (9 px a character of the 14 px
    font plus 24 px of cell padding, a generous bound) and final_text the widest; the view carries
    each sample's whole final text."""
    from petri.web.ui.build import build_ui

    demo = build_ui(service)
    table = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "petri-samples-table")
    ctl = DishController(service)
    final = list(ctl.run("order, inventory, person", "Only 90 units are in stock.", "{event}", 2, 1,
                         ctl.spread("order, inventory, person"), True, 4, 0.1, 0.4, 0.8, False, True))[-1]
    view = final["samples_table"]
    traj = service.store.load_events(final["run_id"])[0][2]
    widths = [int(str(w).removesuffix("px")) for w in table.column_widths]
    assert len(widths) == len(view.columns)
    for header, width in zip(view.columns, widths):
        assert width >= 9 * len(header) + 24, (header, width)
    assert widths[list(view.columns).index("final_text")] == max(widths) >= 400
    assert table.wrap
    full = samples_table(traj)["final_text"]
    assert list(view["final_text"]) == list(full) and all(len(t) > 0 for t in full)


def test_compare_takes_the_dish_tabs_slots_and_settings_and_reopens_them(service):
    """Issue 20 item 11: the Compare tab's slot table (person's slot first), per-sample shuffle off and
    non-default sampler settings reach the stored run (every sample of both events has its anchors
    at the table's starts; the settings are the ones typed); reopened, every control reads them,
    and fed back they make the same run request."""
    from petri.web.ui.runs import RunsController

    dish = DishController(service)
    ctl = CompareController(service, dish)
    table = dish.spread("order, person", False).iloc[::-1].reset_index(drop=True)
    table.loc[table["concept"] == "person", "start"] = 2  # person's slot first, off the even spread
    table.loc[table["concept"] == "order", "start"] += 3
    inputs = ("order, person", "calm", "The order was packed.", "tense", "Ninety units in stock, none in stock.",
              "{event} ({concepts})", 2, 4, 5, table, False, 0.2, 0.3, 0.7, False, False)
    *_, done = ctl.run(*inputs)
    request = service.store.get_run(done["run_id"])["request"]
    settings = request["settings"]
    assert (settings["max_denoising_steps"], settings["entropy_bound"], settings["t_min"], settings["t_max"]) == \
        (5, 0.2, 0.3, 0.7)
    assert settings["stability_threshold"] is None and settings["pin_thought_channel"] is False
    starts = {c: int(s) for c, s in zip(table["concept"], table["start"])}
    for _, _, traj in service.store.load_events(done["run_id"]):
        assert traj.template == "{event} ({concepts})"
        for spans in traj.anchors:
            assert {a.concept: a.start for a in spans} == starts

    _, _, views = RunsController(service, {"dish": dish, "compare": ctl}).open(done["run_id"])
    names = ("concepts", "label_a", "event_a", "label_b", "event_b", "template", "samples", "seed", "steps", "placement",
             "shuffle", "entropy_bound", "t_min", "t_max", "adaptive", "pin_thought")
    assert views["placement"].values.tolist() == table.values.tolist()
    assert views["concepts"] == "person, order"  # the slot order
    assert [views[k] for k in names[1:] if k != "placement"] == [x for i, x in enumerate(inputs) if i not in (0, 9)]
    *_, again = ctl.run(*(views[k] for k in names))
    assert service.store.get_run(again["run_id"])["request"] == request


def test_the_slot_tables_redraw_carries_the_number_of_the_newest_chip_move(service):
    """Issue 21 item 3: a chip move's number (the canvas script counts its moves) goes into the slot
    table's state with the table; the table's redraw of the canvas (its echo) carries it, so the
    script can drop the echo of an older move; a table the server sets itself (Spread, Shuffle, a
    new concept list) carries none (drawn whatever the canvas did), a kept one leaves the number.
    The number is a hidden component that each writer sets before the table, so the page sends it
    with the table the redraw draws."""
    import gradio as gr

    from petri.web.ui.build import build_ui

    demo = build_ui(service)
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}

    def event(elem_id: str, name: str):
        found = [fn for fn in demo.fns.values() if any(t[0] == by_id[elem_id]._id and t[1] == name for t in fn.targets)]
        assert len(found) == 1, (elem_id, name, found)
        return found[0]

    from_canvas, redraw = event("petri-canvas", "input"), event("petri-placement", "change")
    spread, shuffle, respread = event("petri-spread", "click"), event("petri-shuffle", "click"), event("petri-concepts", "change")
    move = by_id["petri-canvas-move"]
    for writer in (from_canvas, spread, shuffle, respread):
        assert writer.outputs[:2] == [move, by_id["petri-placement"]], writer.name  # the number first
    assert redraw.inputs[2] is move
    concepts = "order, inventory, person"
    number, table = spread.fn(concepts, True)
    assert number is None and list(table["concept"]) == ["order", "inventory", "person"]
    drawn = redraw.fn(table, True, number)
    assert drawn["seq"] is None and [c["start"] for c in drawn["chips"]] == list(table["start"])
    # the script's second move: person one position on, numbered 2
    moved = {**drawn, "seq": 2, "chips": [dict(c, start=c["start"] + (c["concept"] == "person")) for c in drawn["chips"]]}
    number2, table2 = from_canvas.fn(moved)
    assert number2 == 2
    assert list(table2["start"]) == [table["start"][0], table["start"][1], table["start"][2] + 1]
    echo = redraw.fn(table2, True, number2)
    assert echo["seq"] == 2 and echo["chips"] == moved["chips"] and echo["error"] == ""
    number3, shuffled = shuffle.fn(table2, True)
    assert number3 is None and sorted(shuffled["concept"]) == sorted(table2["concept"])
    assert respread.fn(concepts, True, table2) == (gr.update(), gr.update())  # the same concepts: the table kept
    number4, fresh = respread.fn("order, person", True, table2)
    assert number4 is None and list(fresh["concept"]) == ["order", "person"]


def test_the_compare_tabs_empty_views_name_their_columns_and_what_fills_them(service):
    """Before a run the Compare tables show the columns a run fills in (they showed 1, 2, 3) and its
    trajectory viewers say to compare (they said "run a dish", the Dish tab's action)."""
    from petri.web.ui.build import build_ui
    from petri.web.ui.compare import compare_pairs, paired_samples

    demo = build_ui(service)
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    ctl = DishController(service)
    final = list(ctl.run("order, inventory, person", "Only 90 units are in stock.", "{event}", 2, 1,
                         ctl.spread("order, inventory, person"), True, 3, 0.1, 0.4, 0.8, False, True))[-1]
    traj = service.store.load_events(final["run_id"])[0][2]
    for elem_id, table in (("petri-cmp-pairs", compare_pairs(traj, traj, ("A", "B"))),
                           ("petri-cmp-paired", paired_samples(traj, traj, ("A", "B")))):
        assert by_id[elem_id].value["headers"] == list(table.columns), elem_id
    assert by_id["petri-traj"].value["note"] == "No trajectory yet: run a dish."
    for x in "ab":
        assert by_id[f"petri-traj-{x}"].value["note"] == "No trajectory yet: compare the two events."


def test_runs_search_reads_every_word_of_an_event(tmp_path):
    """Issue 49, item 8: the row shows an event's first 60 characters, and the search read only those,
    so "held" from "...although the inventory held no units at all." found nothing."""

    long_event = "The customer ordered 120 units for delivery on Friday, although the inventory held no units at all."
    assert long_event.index("held") > 60
    store = RunStore(tmp_path / "store")
    store.create_run("aaaa0000bbbb1111", "seed", "m", {"events": [{"event": long_event, "concepts": ["order", "person"]}],
                                                      "n_samples": 2, "seed": 0})
    store.create_run("cccc2222dddd3333", "seed", "m", {"events": [{"event": "A short one.", "concepts": ["order", "person"]}],
                                                      "n_samples": 2, "seed": 0})
    service = PetriService(lm=None, store=store)
    assert runs_table(service, search="held")["run_id"].tolist() == ["aaaa0000bbbb1111"]
    assert runs_table(service, search="held short")["run_id"].tolist() == []  # every word must be found
    assert "held" not in runs_table(service, search="held")["what"].iloc[0]  # the row still shows 60 characters
