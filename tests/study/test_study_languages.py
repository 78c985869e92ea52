"""The Korean and Japanese study files run through the CLI (on a tiny random model with a
byte-level tokenizer: the embedded petri-tiny model is English-only) and their reports use the
language's noun analyser, named with its version in report.md and run.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from petri.cli.main import main as cli_main
from petri.measure.nouns import FUGASHI, KIWI, tagger_name

STUDIES = Path(__file__).resolve().parents[2] / "assets" / "studies"


#: the ``checkpoint`` fixture (tests/conftest.py): a canvas that holds three CJK concepts (6 byte tokens each)
CHECKPOINT = {"canvas_length": 32, "seed": 1}


def cut_down(name: str) -> dict:
    """The shipped study, 2 events per group and its first 2 templates (so it runs in seconds)."""
    data = json.loads((STUDIES / name).read_text(encoding="utf-8"))
    keep = {g: [e for e in data["events"] if e["group"] == g][:2] for g in data["groups"]}
    return {**data, "templates": data["templates"][:2], "events": [e for g in data["groups"] for e in keep[g]]}


@pytest.mark.parametrize("name, method", [("inventory_order_ko.json", KIWI), ("inventory_order_ja.json", FUGASHI)])
def test_translated_study_runs_through_the_cli_with_its_analyser(checkpoint, tmp_path, capsys, name, method):
    study_file = tmp_path / name
    study_file.write_text(json.dumps(cut_down(name), ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out"
    code = cli_main(["study", str(study_file), "--model", str(checkpoint), "--device", "cpu", "--out", str(out),
                     "--store", str(tmp_path / "store"), "--samples", "2", "--steps", "2", "--no-images", "--quiet"])
    assert code == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    report = (out / "report.md").read_text(encoding="utf-8")
    assert run["tagger"] == tagger_name(method) and run["notes"] == []
    assert f"Tagger: {tagger_name(method)}." in report
    assert "word-level" not in report and "English-only" not in report
