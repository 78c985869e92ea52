"""``petri probe`` end to end on the embedded petri-tiny: one request printed as JSON, a labelled
set evaluated into its files (predictions written row by row), a comparison of two prompt
configurations by exact McNemar, and refusals that name the field (exit 2)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from petri.cli.main import main
from petri.core.paths import probe_set_path
from petri.study.probe.probe_set import labelled_set_lines, load_labelled_set

REQUEST = {"prompt": "Event: Only 90 units are in stock, but the customer ordered 120.",
           "frame": "Consistent: {{consistent}}",
           "questions": [{"name": "consistent", "alternatives": ["yes", "no"]}]}


def test_request_prints_reads(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(REQUEST))
    assert main(["probe", "--request", str(path), "--model", "petri-tiny", "--out", str(tmp_path / "o.json"),
                 "--min-mass", "0"]) == 0
    printed = json.loads(capsys.readouterr().out)
    (read,) = printed["reads"]
    assert read["labels"] == ["A", "B"] and sum(read["probs"]) == pytest.approx(1.0)
    assert printed["answers"]["consistent"] in ("yes", "no")
    assert json.loads((tmp_path / "o.json").read_text()) == printed


def test_request_refusal_names_the_field(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**REQUEST, "questions": [{"name": "consistent", "alternatives": ["yes"]}]}))
    assert main(["probe", "--request", str(path), "--model", "petri-tiny"]) == 2
    assert "questions[0].alternatives" in capsys.readouterr().err


@pytest.mark.parametrize("flags, field", [(["--order", "sorted"], "order"), (["--order", "permutations:40"], "order"),
                                          (["--min-mass", "1.5"], "min_mass"), (["--min-mass", "-1"], "min_mass")])
def test_order_and_min_mass_refusals_name_the_flag_field(tmp_path, capsys, flags, field):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(REQUEST))
    assert main(["probe", "--request", str(path), "--model", "petri-tiny", *flags]) == 2
    assert f"{field}:" in capsys.readouterr().err


def test_request_order_and_min_mass_flags(tmp_path, capsys):
    """--order cyclic reads both orders of two alternatives; --min-mass 1 leaves no answer (the
    mass on two labels is below 1), printed as null."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(REQUEST))
    assert main(["probe", "--request", str(path), "--model", "petri-tiny", "--order", "cyclic", "--min-mass", "1"]) == 0
    (read,) = json.loads(capsys.readouterr().out)["reads"]
    assert read["orders"] == 2 and read["answer"] is None and read["mass"] < 1 and len(read["order_probs"]) == 2


@pytest.fixture(scope="module")
def small_sets(tmp_path_factory):
    """The shipped set's first 4 items, and the same items with other instructions."""
    folder = tmp_path_factory.mktemp("sets")
    shipped = load_labelled_set(probe_set_path())
    from dataclasses import replace

    small = replace(shipped, items=shipped.items[:4])
    (folder / "a.jsonl").write_text("\n".join(labelled_set_lines(small)))
    (folder / "b.jsonl").write_text("\n".join(labelled_set_lines(replace(small, instructions=None))))
    return folder


def test_set_evaluation_and_comparison(small_sets, tmp_path, capsys):
    out = tmp_path / "eval"
    code = main(["probe", "--set", str(small_sets / "a.jsonl"), "--model", "petri-tiny", "--out", str(out),
                 "--compare-to", str(small_sets / "b.jsonl"), "--repeats", "2"])
    assert code == 0
    text = capsys.readouterr().out
    assert "consistent: accuracy" in text and "ECE" in text and "Brier" in text and "exact McNemar" in text
    assert "order cyclic, min_mass 0.5" in text and "coverage" in text and "first listed answered" in text
    predictions = pd.read_csv(out / "predictions.csv")
    assert len(predictions) == 4 * 2 * 2  # items × questions × repeats
    summary = pd.read_csv(out / "summary.csv")
    assert summary["question"].tolist() == ["consistent", "category"] and (summary["n"] == 4).all()
    assert (out / "reliability.csv").is_file() and (out / "compare" / "predictions.csv").is_file()
    saved = json.loads((out / "evaluation.json").read_text())
    assert [q["question"] for q in saved["comparison"]["questions"]] == ["consistent", "category"]
    discordant = pd.read_csv(out / "discordant.csv")
    assert len(discordant) == sum(q["mcnemar"]["a_only"] + q["mcnemar"]["b_only"]
                                  for q in saved["comparison"]["questions"])


def test_set_refusal(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"frame": "x {{q}}", "questions": [{"name": "q", "alternatives": ["a", "b"]}]}) + "\n"
                   + json.dumps({"id": "1", "prompt": "x", "gold": {"q": "c"}}) + "\n")
    assert main(["probe", "--set", str(bad), "--model", "petri-tiny", "--out", str(tmp_path / "o")]) == 2
    assert "items[0].gold.q" in capsys.readouterr().err


def test_the_evaluation_summary_prints_each_share_with_its_interval_in_order(capsys):
    """The summary line of ``petri probe --set``: every share followed by its [low, high] interval (values
    set by hand, each distinct, so a swapped or wrong column shows)."""
    from types import SimpleNamespace

    from petri.cli.probe import _print_summary

    row = {"question": "consistent", "accuracy": 0.5, "wilson_low": 0.25, "wilson_high": 0.75, "answered": 8, "n": 10,
           "coverage": 0.8, "coverage_low": 0.45, "coverage_high": 0.95, "accuracy_with_abstentions": 0.4,
           "with_abstentions_low": 0.15, "with_abstentions_high": 0.7, "commonest_gold_share": 0.6,
           "answers_first": 0.3, "answers_first_low": 0.1, "answers_first_high": 0.65, "gold_first": 0.35,
           "gold_first_low": 0.12, "gold_first_high": 0.68, "ece": 0.11, "brier": 0.22, "repeats": 1}
    meta = {"model": {"model_id": "m"}, "items": 10, "order": "cyclic", "min_mass": 0.5, "seconds_per_read": 0.25}
    _print_summary(SimpleNamespace(meta=meta, summary=pd.DataFrame([row])), "set")
    out = capsys.readouterr().out
    assert "m, 10 items, order cyclic, min_mass 0.5, 0.25 s per read" in out
    assert "consistent: accuracy 0.50 [0.25, 0.75] over 8 answered of 10 (coverage 0.80 [0.45, 0.95];" in out
    assert "with abstentions counted wrong 0.40 [0.15, 0.70];" in out
    assert "first listed answered 0.30 [0.10, 0.65] against 0.35 [0.12, 0.68] for the gold answers" in out
