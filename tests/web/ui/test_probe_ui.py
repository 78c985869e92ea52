"""The Probe tab's handlers called directly on a tiny random model (the real read): an uploaded
labelled set evaluates as a job into the summary, the reliability diagram and the predictions, the
same numbers the run store serves; the Runs tab lists a read and an evaluation as ``probe`` rows and
reopens each into the Probe tab; a read whose Cancel was pressed stops before it stores a run; the
frame is drawn on the canvas control as pinned text and one chip per slot."""

from __future__ import annotations

import json
import threading

import pandas as pd
import pytest

from petri.runs.formats import RESULT_TABLES
from petri.web.ui.probe_tab.probe import ProbeController
from petri.web.ui.runs import RunsController, runs_table

QUESTIONS = [["consistent", "", "yes, no", "", ""]]


def labelled_file(tmp_path) -> str:
    lines = [{"probe_set": "tiny-set", "frame": "ok {{consistent}}",
              "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}]},
             {"id": "a", "prompt": "Only 90 units are in stock, but a customer ordered 120.", "gold": {"consistent": "no"}},
             {"id": "b", "prompt": "The order was packed.", "gold": {"consistent": "yes"}},
             {"id": "c", "prompt": "The shop sold 5 of its 3 chairs.", "gold": {"consistent": "no"}}]
    path = tmp_path / "tiny-set.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return str(path)


def test_an_uploaded_set_evaluates_into_the_report_the_store_serves(service, tmp_path):
    ctl = ProbeController(service)
    updates = list(ctl.evaluate(None, labelled_file(tmp_path), "1", 1, 2, 0, "cyclic", 0.0))
    last = updates[-1]
    assert last["status"].startswith("Done: run") and any("item 3 of 6" in u["status"] for u in updates)
    predictions, summary = last["predictions"], last["summary"]
    assert len(predictions) == 3 * 2 and sorted(set(predictions["item"])) == ["a", "b", "c"]  # 2 repeats
    first = predictions[predictions["repeat"] == 0]
    accuracy = first["right"].astype(bool).mean()
    # shown to two significant digits with its Wilson interval, under a header that says what it is
    shown = dict(zip(summary["measure"], summary["value"]))  # one row per question and measure (one question here)
    assert set(summary["question"]) == {"consistent"}
    assert shown["accuracy, answered"].startswith(f"{accuracy:.2g} [")
    assert shown["answered of n (coverage)"].startswith("3 of 3 (1 [")
    assert last["reliability"] is not None and len(last["reliability"].data) >= 2  # the diagonal and the question
    stored = service.store.load_results(last["eval_run_id"])
    served = pd.concat(list(RESULT_TABLES["summary"].chunks(stored)))
    assert served["accuracy"].tolist() == pytest.approx([accuracy])
    assert all(len(text) <= 6 for text in predictions["p"])  # three significant digits, not ten
    csv = next(p for p in last["eval_files"] if p.endswith("-predictions.csv"))
    assert len(pd.read_csv(csv)) == 6


def test_the_runs_tab_lists_probe_runs_and_reopens_them_in_the_probe_tab(service, tmp_path):
    ctl = ProbeController(service)
    read = list(ctl.read("Only 90 units", "", "ok {{consistent}}", QUESTIONS, "1", 2, 0, "cyclic", 0.5))[-1]
    evaluation = list(ctl.evaluate(None, labelled_file(tmp_path), "1", 1, 1, 0))[-1]
    table = runs_table(service, kind="probe")
    rows = {r.run_id: r for r in table.itertuples()}
    assert set(rows) == {read["run_id"], evaluation["eval_run_id"]}
    assert rows[read["run_id"]].what == "Only 90 units" and rows[read["run_id"]].concepts == "consistent"
    stored = service.store.load_results(read["run_id"])["read"]["reads"][-1]
    mass = f"{100 * stored['mass']:.2g}"  # the tiny model's mass on two labels is well under 10 %
    assert stored["answer"] is None and stored["orders"] == 2
    assert rows[read["run_id"]].headline == f"consistent no answer ({mass} % on its labels)"
    assert read["answers"].iloc[0]["answer"] == (f"no answer (only {mass} % of the model's probability is on these "
                                                 "labels; 50 % needed for an answer)")
    assert f"consistent = no answer (only {mass} %" in read["status"]
    # the default evaluation (cyclic, min_mass 0.5) abstains on every item: none answered
    assert rows[evaluation["eval_run_id"]].headline == "consistent accuracy – (0 of 3 answered)"
    runs = RunsController(service, {"probe": ctl})
    kind, note, views = runs.open(read["run_id"])
    assert kind == "probe" and views["frame"] == "ok {{consistent}}" and views["steps"] == 2
    assert (views["order"], views["min_mass"]) == ("cyclic", 0.5)
    assert views["answers"].equals(read["answers"])
    kind, _, views = runs.open(evaluation["eval_run_id"])
    assert kind == "probe" and views["summary"].equals(evaluation["summary"])


def test_a_read_cancelled_before_it_starts_stores_no_run(service):
    cancel = threading.Event()
    cancel.set()
    updates = list(ProbeController(service).read("x", "", "ok {{consistent}}", QUESTIONS, "1", 1, 0, cancel=cancel))
    assert updates[-1]["status"].startswith("Stopped") and service.store.list_runs() == []


def test_the_frame_is_drawn_as_pinned_text_and_one_chip_per_slot(service):
    value = ProbeController(service).canvas("x", "", "ok {{a}} then {{b}}",
                                            [["a", "", "yes, no", "", ""], ["b", "", "yes, no", "", ""]])
    chips = [(c["concept"], c["start"], c["tokens"]) for c in value["chips"]]
    slots = [c for c in chips if c[0].startswith("{{")]
    assert [s[0] for s in slots] == ["{{a}}", "{{b}}"] and all(s[2] == 1 for s in slots)
    # pinned text and slots tile the frame without a gap or an overlap
    assert all(a[1] + a[2] == b[1] for a, b in zip(chips, chips[1:])) and value["error"] == ""
    refused = ProbeController(service).canvas("x", "", "no slot here", [["a", "", "yes, no", "", ""]])
    assert refused["chips"] == [] and "frame" in refused["error"]


def test_the_probe_tabs_seed_inputs_take_the_one_seed_bound(service):
    """Both seed inputs (a read's and an evaluation's) refuse 2**32 as ``POST /api/probe`` and the
    CLI do (:data:`petri.core.settings.MAX_SEED`; tests/web/api/test_probe_limits.py), by Gradio's
    own check of a Number's maximum."""
    import gradio as gr

    from petri.core.settings import MAX_SEED
    from petri.web.ui.probe_tab.probe import build_probe_tab

    with gr.Blocks() as blocks:
        build_probe_tab(service)
    seeds = [b for b in blocks.blocks.values() if isinstance(b, gr.Number) and b.label == "Seed"]
    assert len(seeds) == 2 and any(b.elem_id == "petri-probe-seed" for b in seeds)
    for number in seeds:
        assert number.preprocess(2**31) == 2**31 and number.preprocess(MAX_SEED) == MAX_SEED
        with pytest.raises(gr.Error, match="greater than maximum"):
            number.preprocess(MAX_SEED + 1)
