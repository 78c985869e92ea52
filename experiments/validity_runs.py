"""Run the two positive-control studies on the embedded models, one condition at a time (issue 59).

    python3 experiments/validity_runs.py split                   # per-condition study files
    python3 experiments/validity_runs.py run --model petri-small --study anchor_congruence \\
        --samples 4 --templates t1_describe --threads 1          # every condition, one after another
                                                                 # (other options pass to petri study)

A paired study file (``conditions``) is cut into one schema-1 study per condition: the same event ids,
texts and concepts that condition gives them, so the existing ``python -m petri study`` runs it and
every condition of an event gets the same batch seed (a hash of the base seed, the event id and the
template id), the same templates and, where the concepts have the same token lengths (all of them on
petri-small, whose tokenizer keeps every concept one token), the same anchor slots and the same
per-sample slot order. Schema 1 needs two groups for its group test, which this design does not use:
the first half of the events is labelled ``first_half``, the rest ``second_half``; only the per-event
instability (``events.csv``) is read, by ``experiments/validity_stats.py``, which pairs the conditions.

The files go to ``experiments/results/validity/studies/<study>.<condition>.json``, the runs to
``experiments/results/validity/<study>-<model>-<condition>/`` (resumable from ``runs/store``).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STUDIES = REPO / "assets" / "studies"
OUT = REPO / "experiments" / "results" / "validity"
PAIRED = ("anchor_congruence", "dose_response")


def condition_study(data: dict, condition: str) -> dict:
    """The schema-1 study of one condition of a paired study dict (see the module docstring)."""
    ids = [c["id"] for c in data["conditions"]]
    if condition not in ids:
        raise ValueError(f"{data['id']}: no condition {condition!r}; it has {ids}")
    out = {k: copy.deepcopy(v) for k, v in data.items() if k not in ("conditions", "events", "comparison")}
    out["id"] = f"{data['id']}.{condition}"
    out["title"] = f"{data['title']} [condition {condition}]"
    half = (len(data["events"]) + 1) // 2
    events = []
    for i, event in enumerate(data["events"]):
        variant = event.get("conditions", {}).get(condition, {})
        concepts = variant.get("concepts", event.get("concepts"))
        row = {"id": event["id"], "group": "first_half" if i < half else "second_half",
               "text": variant.get("text", event["text"])}
        if concepts is not None:
            row["concepts"] = list(concepts)
        events.append(row)
    out["groups"] = ["first_half", "second_half"]
    out["events"] = events
    return out


def split_path(study: str, condition: str) -> Path:
    return OUT / "studies" / f"{study}.{condition}.json"


def split() -> list[Path]:
    written = []
    for study in PAIRED:
        data = json.loads((STUDIES / f"{study}.json").read_text(encoding="utf-8"))
        for cond in data["conditions"]:
            path = split_path(study, cond["id"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(condition_study(data, cond["id"]), indent=1) + "\n", encoding="utf-8")
            written.append(path)
    return written


def run(model: str, study: str, samples: int, templates: str, seed: int, extra: list[str],
        conditions: list[str] | None = None) -> int:
    data = json.loads((STUDIES / f"{study}.json").read_text(encoding="utf-8"))
    for cond in conditions or [c["id"] for c in data["conditions"]]:
        path = split_path(study, cond)
        out = OUT / f"{study}-{model}-{cond}"
        cmd = [sys.executable, "-m", "petri", "study", str(path.relative_to(REPO)), "--samples", str(samples),
               "--seed", str(seed), "--templates", templates, "--model", model, "--out", str(out.relative_to(REPO)),
               "--store", "runs/store", "--no-images", "--quiet", *extra]
        print(" ".join(cmd[1:]), flush=True)
        code = subprocess.call(cmd, cwd=REPO)
        if code:
            return code
    return 0


def stored_events(study: str, model: str, condition: str, store: Path = REPO / "runs" / "store") -> dict[str, dict]:
    """Per-event mean pair instability of the batches of one condition's run held in the run store,
    finished or not: ``{event_id: {"instability", "n_samples"}}`` (``{}`` when there is no run).
    The value is the one ``events.csv`` holds (the mean over the event's segments,
    ``petri.stats.groups.event_level_values``), so a run cut short gives the events it finished;
    every condition's run takes the events in the same order (a hash of the seed and the event id),
    so the events two cut runs share are a seeded subset, not a chosen one. The run is the one of
    that model and condition study with the most stored batches."""
    import sqlite3

    import pandas as pd

    from petri.runs.store import RunStore
    from petri.stats.groups import event_level_values
    from petri.study.execution.runner import study_batch
    from petri.study.results.analysis import batch_tables
    from petri.study.schema import load_study

    path = split_path(study, condition)
    sid = f"{study}.{condition}"
    if not (store / "petri.sqlite").exists():
        return {}
    with sqlite3.connect(f"file:{store / 'petri.sqlite'}?mode=ro", uri=True) as db:
        runs = [(rid, json.loads(req)) for rid, req in
                db.execute("SELECT run_id, request FROM runs WHERE kind = 'study' AND model_id = ?", (model,))]
        counts = dict(db.execute("SELECT run_id, COUNT(*) FROM events GROUP BY run_id"))
    mine = [(counts.get(rid, 0), rid, req) for rid, req in runs if req.get("study", {}).get("id") == sid]
    if not mine:
        return {}
    _, run_id, request = max(mine, key=lambda t: t[0])
    spec = load_study(path)
    batches = [study_batch(spec, key, int(request["seed"]), traj) for key, _, traj in RunStore(store).load_events(run_id)]
    if not batches:
        return {}
    seg = pd.concat([batch_tables(b, spec.id, names=["segments"])["segments"] for b in batches], ignore_index=True)
    values = event_level_values(seg, event_col="event_id")
    samples = {b.event_id: b.trajectory.argmax.shape[0] for b in batches}
    return {row.event_id: {"instability": float(row.instability), "n_samples": samples[row.event_id]}
            for row in values.itertuples()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("split")
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--study", choices=PAIRED, required=True)
    r.add_argument("--samples", type=int, default=4)
    r.add_argument("--templates", default="t1_describe")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--conditions", default=None,
                   help="comma-separated condition ids in the order to run them (default: all, in the file's order)")
    args, extra = ap.parse_known_args(argv)
    if args.cmd == "split":
        for path in split():
            print(f"wrote {path.relative_to(REPO)}")
        return 0
    conditions = args.conditions.split(",") if args.conditions else None
    return run(args.model, args.study, args.samples, args.templates, args.seed, extra, conditions)


if __name__ == "__main__":
    sys.exit(main())
