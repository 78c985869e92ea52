"""Labelled sets (petri.study.probe.probe_set) and the probe's evaluation (petri.study.probe.probe_eval,
probe_tables): refusals naming the field, metrics against hand-worked cases, McNemar by hand,
the evaluation on a tiny model against read_slots itself, and the files written row by row."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from petri.core.probe import MAX_ITEMS, ProbeInputError, Question
from petri.engine.probe import read_slots
from petri.engine.torch.tiny import tiny_random_model
from petri.study.probe.probe_eval import ProbeEvaluation, compare_evaluations, evaluate, item_request, prediction_columns, summarise
from petri.study.probe.probe_set import LabelledItem, LabelledSet, labelled_set_lines, load_labelled_set
from petri.study.probe.probe_tables import PredictionWriter, write_evaluation

HEADER = {"probe_set": "toy", "frame": "Ok:{{ok}}", "questions": [{"name": "ok", "alternatives": ["yes", "no"],
                                                                  "labels": ["A", "B"]}]}


def write_jsonl(path, header, items):
    path.write_text("\n".join(json.dumps(x) for x in [header, *items]) + "\n", encoding="utf-8")
    return path


def test_jsonl_round_trip(tmp_path):
    items = [{"id": "a", "prompt": "An order.", "gold": {"ok": "yes"}, "group": "benign"},
             {"id": "b", "prompt": "No order.", "gold": {"ok": "no"}, "frame": "Fine:{{ok}}"}]
    labelled = load_labelled_set(write_jsonl(tmp_path / "s.jsonl", HEADER, items))
    assert labelled.name == "toy" and labelled.frame == "Ok:{{ok}}"
    assert [i.gold for i in labelled.items] == [{"ok": "yes"}, {"ok": "no"}]
    assert labelled.items[0].extra == {"group": "benign"} and labelled.items[1].frame == "Fine:{{ok}}"
    again = tmp_path / "again.jsonl"
    again.write_text("\n".join(labelled_set_lines(labelled)), encoding="utf-8")
    assert load_labelled_set(again) == labelled


def test_csv_with_and_without_header(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("id,prompt,ok,kind\n1,An order.,yes,x\n2,No order.,no,y\n3,Late.,no,\n", encoding="utf-8")
    inferred = load_labelled_set(path)
    assert [q.alternatives for q in inferred.questions] == [("yes", "no"), ("x", "y")]
    assert inferred.frame == "ok: {{ok}}\nkind: {{kind}}"
    assert inferred.items[2].gold == {"ok": "no"}  # an empty cell: read, not scored
    (tmp_path / "s.json").write_text(json.dumps({**HEADER, "questions": [
        {"name": "ok", "alternatives": ["yes", "no", "maybe"]}, {"name": "kind", "alternatives": ["x", "y", "z"]}]}))
    with_header = load_labelled_set(path)
    assert with_header.questions[0].alternatives == ("yes", "no", "maybe")


@pytest.mark.parametrize("header,items,field", [
    (HEADER, [{"id": "a", "prompt": "x", "gold": {"ok": "maybe"}}], "items[0].gold.ok"),
    (HEADER, [{"id": "a", "prompt": "x", "gold": {"other": "yes"}}], "items[0].gold.other"),
    (HEADER, [{"id": "a", "prompt": "", "gold": {}}], "items[0].prompt"),
    (HEADER, [{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}], "items[1].id"),
    (HEADER, [], "items"),
    ({**HEADER, "questions": [{"name": f"q{i}", "alternatives": ["a", "b"]} for i in range(17)]},
     [{"id": "a", "prompt": "x"}], "questions"),
    ({**HEADER, "questions": [{"name": "ok", "alternatives": [f"a{i}" for i in range(201)]}]},
     [{"id": "a", "prompt": "x"}], "questions[0].alternatives"),
    (HEADER, [{"id": str(i), "prompt": "x"} for i in range(MAX_ITEMS + 1)], "items"),
])
def test_set_refusals_name_the_field(tmp_path, header, items, field):
    with pytest.raises(ProbeInputError) as caught:
        load_labelled_set(write_jsonl(tmp_path / "s.jsonl", header, items))
    assert caught.value.field == field, str(caught.value)


def test_bad_files(tmp_path):
    (tmp_path / "s.txt").write_text("x")
    (tmp_path / "bad.jsonl").write_text(json.dumps(HEADER) + "\n{not json\n")
    for name, field in (("s.txt", "file"), ("missing.jsonl", "file"), ("bad.jsonl", "line 2")):
        with pytest.raises(ProbeInputError) as caught:
            load_labelled_set(tmp_path / name)
        assert caught.value.field == field


QUESTION = Question("ok", "ok", ("yes", "no"))
TOY = LabelledSet("toy", (QUESTION,), "Ok:{{ok}}", None,
                  tuple(LabelledItem(str(i), "x", None, {"ok": g}) for i, g in enumerate(["yes", "yes", "no", "no"])))


def _predictions(p_yes, repeat_answers=None):
    rows = []
    for i, p in enumerate(p_yes):
        gold = TOY.items[i].gold["ok"]
        answer = "yes" if p >= 0.5 else "no"
        rows.append({"item_id": str(i), "question": "ok", "repeat": 0, "gold": gold, "answer": answer,
                     "correct": answer == gold, "skipped": False, "p_answer": max(p, 1 - p),
                     "p_gold": p if gold == "yes" else 1 - p, "mass": 0.5, "entropy": 0.1, "draws": 1,
                     "p_yes": p, "p_no": 1 - p})
    for r, answers in enumerate(repeat_answers or [], start=1):
        for i, answer in enumerate(answers):
            rows.append({**rows[i], "repeat": r, "answer": answer})
    return pd.DataFrame(rows)


def test_summary_hand_worked():
    # items: gold yes, yes, no, no; p_yes .9, .4, .2, .7 → answers yes, no, no, yes: 2 of 4 correct
    predictions = _predictions([0.9, 0.4, 0.2, 0.7], repeat_answers=[["yes", "yes", "no", "yes"]])
    summary, reliability = summarise(TOY, predictions)
    row = summary.iloc[0]
    assert (row["n"], row["correct"], row["accuracy"]) == (4, 2, 0.5)
    # Brier: (.1²+.1²) + (.6²+.6²) + (.2²+.2²) + (.7²+.7²) = .02 + .72 + .08 + .98 = 1.8, / 4
    assert row["brier"] == pytest.approx(0.45)
    # confidences .9 (right), .6 (wrong), .8 (right), .7 (wrong): bins 9, 6, 8, 7 each alone
    assert row["ece"] == pytest.approx((0.1 + 0.6 + 0.2 + 0.7) / 4)
    assert row["changed_share"] == 0.25 and row["repeats"] == 2  # item 1: no → yes
    assert row["commonest_gold_share"] == 0.5
    assert reliability["n"].sum() == 4 and set(reliability["question"]) == {"ok"}


def test_abstentions_and_position_bias_hand_worked():
    """Six items, gold yes yes no no yes no; answers yes yes yes (none) yes no (the fourth read's
    mass under min_mass). Answered 5 of 6; right 4 (items 0, 1, 4, 5); the first listed
    alternative (yes) is answered 4 of 5 times where the gold answers of those 5 give it 3 of 5."""
    from statsmodels.stats.proportion import proportion_confint

    golds, answers = ["yes", "yes", "no", "no", "yes", "no"], ["yes", "yes", "yes", None, "yes", "no"]
    rows = [{"item_id": str(i), "question": "ok", "repeat": 0, "gold": g, "answer": a, "answered": a is not None,
             "correct": a == g, "skipped": False, "p_answer": 0.6 if a else np.nan,
             "p_gold": 0.6 if a == g else 0.4, "mass": 0.9 if a else 0.1, "order_spread": 0.0, "orders": 2,
             "entropy": 0.6, "draws": 1, "p_yes": 0.6 if a == "yes" else 0.4, "p_no": 0.6 if a == "no" else 0.4}
            for i, (g, a) in enumerate(zip(golds, answers))]
    labelled = LabelledSet("toy", (QUESTION,), "Ok:{{ok}}", None,
                           tuple(LabelledItem(str(i), "x", None, {"ok": g}) for i, g in enumerate(golds)))
    summary, reliability = summarise(labelled, pd.DataFrame(rows))
    row = summary.iloc[0]
    expected = {"coverage": (5, 6), "accuracy": (4, 5), "accuracy_with_abstentions": (4, 6),
                "answers_first": (4, 5), "gold_first": (3, 5)}
    bounds = {"coverage": "coverage", "accuracy": "wilson", "accuracy_with_abstentions": "with_abstentions",
              "answers_first": "answers_first", "gold_first": "gold_first"}
    for name, (hits, n) in expected.items():
        assert row[name] == pytest.approx(hits / n), name
        low, high = proportion_confint(hits, n, alpha=0.05, method="wilson")
        assert (row[f"{bounds[name]}_low"], row[f"{bounds[name]}_high"]) == (pytest.approx(low), pytest.approx(high))
    assert (row["n"], row["answered"], row["correct"]) == (6, 5, 4)
    assert row["position_bias"] == pytest.approx(0.8 - 0.6)
    assert reliability["n"].sum() == 5  # calibration over the answered items only
    # Brier over the answered: right at .6 → (.4² + .4²), wrong (item 2) at .6 on yes → (.6² + .6²)
    assert row["brier"] == pytest.approx((4 * 0.32 + 0.72) / 5)


def test_compare_hand_worked():
    a = ProbeEvaluation(_predictions([0.9, 0.4, 0.2, 0.7]), pd.DataFrame(), pd.DataFrame())  # right: 0, 2
    b = ProbeEvaluation(_predictions([0.9, 0.8, 0.6, 0.3]), pd.DataFrame(), pd.DataFrame())  # right: 0, 1, 3
    out = compare_evaluations(a, b)
    (q,) = out["questions"]
    assert (q["n"], q["a_correct"], q["b_correct"]) == (4, 2, 3)
    # discordant: item 1 (b only), 2 (a only), 3 (b only) → a_only 1, b_only 2, p = 2·P(X<=1 | n=3) = 1
    assert (q["mcnemar"]["a_only"], q["mcnemar"]["b_only"], q["mcnemar"]["p_value"]) == (1, 2, 1.0)
    assert [d["item_id"] for d in out["discordant"]] == ["1", "2", "3"]
    assert out["discordant"][1] == {"item_id": "2", "question": "ok", "gold": "no", "answer_a": "no",
                                    "correct_a": True, "answer_b": "yes", "correct_b": False}


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_model(canvas_length=16)


def test_evaluate_on_a_tiny_model_reports_what_read_slots_reads(tiny, tmp_path):
    labelled = LabelledSet("toy", (Question("ok", "ok", ("yes", "no"), labels=("A", "B")),), "Ok:{{ok}}", None,
                           TOY.items)
    written = PredictionWriter(tmp_path / "predictions.csv", prediction_columns(labelled))
    progress = []
    evaluation = evaluate(tiny, labelled, samples=2, repeats=2, seed=3, on_rows=written, min_mass=0.0,
                          on_item=lambda done, total: progress.append((done, total)))
    written.close()
    assert progress[-1] == (8, 8)
    for item in labelled.items:
        for repeat in range(2):
            read = read_slots(tiny, item_request(labelled, item, samples=2, steps=1, seed=3 + repeat,
                                                 min_mass=0.0)).reads[0]
            assert read.order_probs.shape == (2, 2)  # an evaluation reads both cyclic orders unless told
            row = evaluation.predictions.query(f"item_id == '{item.item_id}' and repeat == {repeat}").iloc[0]
            assert row["p_yes"] == pytest.approx(read.probs[0]) and row["answer"] == read.answer
            assert row["draws"] == 2
    streamed = pd.read_csv(tmp_path / "predictions.csv", dtype={"item_id": str})
    assert len(streamed) == 8 and list(streamed.columns) == prediction_columns(labelled)
    np.testing.assert_allclose(streamed["p_yes"], evaluation.predictions["p_yes"])
    files = write_evaluation(evaluation, tmp_path, predictions=False)
    saved = json.loads(files["evaluation"].read_text())
    assert saved["summary"][0]["n"] == 4 and saved["meta"]["repeats"] == 2
    assert pd.read_csv(files["summary"])["accuracy"].iloc[0] == pytest.approx(evaluation.summary["accuracy"].iloc[0])


def test_abstentions_are_exported_as_null(tiny, tmp_path):
    """A random tiny model puts far less than half its probability on two labels: at the default
    min_mass (0.5) every read abstains; the files say so (an empty CSV cell, JSON null)."""
    labelled = LabelledSet("toy", (Question("ok", "ok", ("yes", "no"), labels=("A", "B")),), "Ok:{{ok}}", None,
                           TOY.items[:2])
    evaluation = evaluate(tiny, labelled, order="as_listed")
    assert evaluation.predictions["answer"].isna().all() and not evaluation.predictions["answered"].any()
    row = evaluation.summary.iloc[0]
    assert (row["answered"], row["coverage"], row["accuracy_with_abstentions"]) == (0, 0.0, 0.0)
    assert np.isnan(row["accuracy"]) and (row["wilson_low"], row["wilson_high"]) == (0.0, 1.0)
    files = write_evaluation(evaluation, tmp_path)
    table = pd.read_csv(files["predictions"], keep_default_na=False)
    assert list(table["answer"]) == ["", ""] and list(table["answered"].astype(str)) == ["False", "False"]
    saved = json.loads(files["evaluation"].read_text())
    assert [p["answer"] for p in saved["predictions"]] == [None, None]


def test_evaluate_refuses_before_reading(tiny):
    bad = LabelledSet("toy", (Question("ok", "ok", ("yes", "no"), labels=("yes", "no")),), "Ok:{{ok}}", None,
                      TOY.items)
    with pytest.raises(ProbeInputError) as caught:
        evaluate(tiny, bad, on_item=lambda *_: pytest.fail("read before refusing"))
    assert caught.value.field == "questions[0].labels"
