"""The shipped labelled set (assets/probe/events.jsonl) is what experiments/probe_set.py builds from
the shipped study, and its gold answers follow the study's groups and concepts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from experiment_support import experiment_script
from petri.study.probe.probe_set import load_labelled_set

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_set_equals_the_build():
    script = experiment_script("probe_set")
    shipped = ROOT / "assets" / "probe" / "events.jsonl"
    assert shipped.read_text(encoding="utf-8") == script.text()


def test_gold_follows_the_study():
    study = json.loads((ROOT / "assets" / "studies" / "inventory_order.json").read_text(encoding="utf-8"))
    groups = {e["id"]: e["group"] for e in study["events"]}
    labelled = load_labelled_set(ROOT / "assets" / "probe" / "events.jsonl")
    assert len(labelled.items) == len(study["events"]) * len(study["concepts"]) == 108
    for item in labelled.items:
        event_id, concept = item.item_id.split(":")
        assert item.gold["consistent"] == ("no" if groups[event_id] == "contradictory" else "yes")
        assert f"Concept: {concept}\n" in item.frame
    assert Counter(i.gold["category"] for i in labelled.items) == {"transaction": 36, "goods": 36, "human": 36}
