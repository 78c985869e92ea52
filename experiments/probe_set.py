"""Build the probe's shipped labelled set, ``assets/probe/events.jsonl``, from the shipped study's events.

One item per (event, concept) of ``assets/studies/inventory_order.json`` (36 events × 3 concepts =
108 items). The prompt is the event; the frame pins the concept and leaves two slots:

- ``consistent`` ("Is this event consistent?", yes / no): gold ``yes`` for the benign and control
  events, ``no`` for the contradictory ones (the study's group labels);
- ``category`` ("Which category is the pinned concept?", transaction / goods / human): gold from
  the pinned concept (order → transaction, inventory → goods, person → human).

Deterministic: the same study file gives the same file byte for byte
(``tests/experiments/test_probe_set.py`` rebuilds it and compares).

    python3 experiments/probe_set.py            # writes assets/probe/events.jsonl
    python3 experiments/probe_set.py --check    # exits 1 if the shipped file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from petri.core.probe import Question  # noqa: E402
from petri.study.probe.probe_set import LabelledItem, LabelledSet, labelled_set_lines, parse_jsonl  # noqa: E402

STUDY = ROOT / "assets" / "studies" / "inventory_order.json"
TARGET = ROOT / "assets" / "probe" / "events.jsonl"
CATEGORY = {"order": "transaction", "inventory": "goods", "person": "human"}
CONSISTENT = {"benign": "yes", "control": "yes", "contradictory": "no"}
QUESTIONS = (
    Question("consistent", "consistent", ("yes", "no"), text="Is this event consistent?"),
    Question("category", "category", ("transaction", "goods", "human"), text="Which category is the pinned concept?"),
)
FRAME = "Consistent: {{consistent}}\nCategory: {{category}}"
INSTRUCTIONS = "Answer each question with the letter of one alternative."


def build(study_path: Path = STUDY) -> LabelledSet:
    study = json.loads(study_path.read_text(encoding="utf-8"))
    items = []
    for event in study["events"]:
        for concept in study["concepts"]:
            items.append(LabelledItem(
                item_id=f"{event['id']}:{concept}", prompt=f"Event: {event['text']}",
                frame=f"Concept: {concept}\n{FRAME}",
                gold={"consistent": CONSISTENT[event["group"]], "category": CATEGORY[concept]},
                extra={"event_id": event["id"], "group": event["group"], "concept": concept}))
    return LabelledSet("events", QUESTIONS, FRAME, INSTRUCTIONS, tuple(items))


def text() -> str:
    built = build()
    lines = labelled_set_lines(built)
    assert parse_jsonl("\n".join(lines)).items == built.items  # the file reads back as built
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing")
    args = parser.parse_args()
    wanted = text()
    if args.check:
        same = TARGET.is_file() and TARGET.read_text(encoding="utf-8") == wanted
        print("identical" if same else f"{TARGET} differs from what the study builds")
        return 0 if same else 1
    TARGET.write_text(wanted, encoding="utf-8")
    print(f"wrote {TARGET} ({len(build().items)} items)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
