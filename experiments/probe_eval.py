"""The probe on the shipped labelled set, on both embedded models, beside the instability sensor.

    python3 experiments/probe_eval.py                       # petri-small and petri-small-mdm, 2 repeats
    python3 experiments/probe_eval.py --models petri-small --repeats 1
    python3 experiments/probe_eval.py --repeats 1 --order cyclic   # every cyclic order of the alternatives

For each model: ``petri.study.probe.probe_eval.evaluate`` on ``assets/probe/events.jsonl`` (108 items: 36
events × 3 pinned concepts; questions ``consistent`` and ``category``), its files under
``experiments/results/probe_eval/<model>/`` (predictions.csv, summary.csv, reliability.csv,
evaluation.json). Then, on the same events, which separates contradictory from benign events
better (and contradictory from their matched controls):

- the probe: an event's score is the mean probability of ``no`` to "Is this event consistent?"
  over its three items (repeat 0);
- the instability sensor: the event's ``mean_flips_free`` and ``instability`` from the model's
  stored run of the shipped study (``experiments/results/inventory_order-en-<model>/events.csv``,
  written by ``experiments/inventory_order.py``; ``assets/studies/results/...`` for petri-tiny).

AUC (contradictory = positive) with DeLong 95% intervals (:func:`petri.stats.calibration.auc_with_interval`),
and the exact McNemar test between the two models' answers. Everything goes to
``experiments/results/probe_eval.json``.

``--order`` (default ``as_listed``; ``cyclic`` or ``permutations:N``) and ``--min-mass`` (default
0.5) are the probe's own (docs/probe.md); another order than as listed writes
``probe_eval_<order>.json`` and ``probe_eval/<model>-<order>/``. The summary counts abstentions apart
(accuracy over answered items, coverage, accuracy with abstentions counted wrong) and gives the
position-bias index; the AUC of p(no) uses every item's order-averaged probability, abstentions
included (an abstention still has a probability).

``--swap``: the same set with every question's alternatives in reverse order (so the labels A, B, ...
stand for other answers), into ``probe_eval/<model>-swapped/`` and ``probe_eval_swapped.json``, with
the exact McNemar test of each model's answers against its unswapped run (read back from its
predictions.csv): a read that follows the content keeps its answers; one that follows the label flips.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from petri.core.paths import probe_set_path, shipped_run_dir  # noqa: E402
from petri.engine.torch.model import load_model  # noqa: E402
from petri.stats.calibration import auc_with_interval  # noqa: E402
from petri.study.probe.probe_eval import ProbeEvaluation, compare_evaluations, evaluate, prediction_columns  # noqa: E402
from petri.study.probe.probe_set import load_labelled_set  # noqa: E402
from petri.study.probe.probe_tables import PredictionWriter, write_evaluation  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
CONTRASTS = {"contradictory_vs_benign": ("contradictory", "benign"),
             "contradictory_vs_control": ("contradictory", "control")}


def stored_events(model: str) -> pd.DataFrame | None:
    """The model's stored run of the shipped study: one row per event (group, mean_flips_free, instability)."""
    folder = shipped_run_dir() if model == "petri-tiny" else RESULTS / f"inventory_order-en-{model}"
    path = folder / "events.csv"
    return pd.read_csv(path) if path.is_file() else None


def auc_entry(scores: pd.Series, groups: pd.Series, positive: str, negative: str) -> dict:
    """AUC of ``scores`` for ``positive`` against ``negative`` rows of ``groups``, with its interval."""
    keep = groups.isin([positive, negative])
    if (groups[keep] == positive).all() or (groups[keep] != positive).all():
        return {"auc": None, "note": "one group is missing"}
    auc, low, high = auc_with_interval(scores[keep].to_numpy(float), (groups[keep] == positive).to_numpy())
    return {"auc": auc, "low": low, "high": high, "n_positive": int((groups[keep] == positive).sum()),
            "n_negative": int((groups[keep] == negative).sum())}


def separation(evaluation, labelled, events: pd.DataFrame | None) -> dict:
    """AUCs of the probe's p(no) per event and of the stored sensor, for each contrast."""
    group = {i.item_id: i.extra["group"] for i in labelled.items}
    event_of = {i.item_id: i.extra["event_id"] for i in labelled.items}
    p = evaluation.predictions
    p = p[(p["question"] == "consistent") & (p["repeat"] == 0)].copy()
    p["event_id"], p["group"] = p["item_id"].map(event_of), p["item_id"].map(group)
    per_event = p.groupby(["event_id", "group"], as_index=False)["p_no"].mean()
    out = {}
    for name, (positive, negative) in CONTRASTS.items():
        entry = {"probe_p_no": auc_entry(per_event["p_no"], per_event["group"], positive, negative)}
        if events is not None:
            for column in ("mean_flips_free", "instability"):
                entry[f"sensor_{column}"] = auc_entry(events[column], events["group"], positive, negative)
        out[name] = entry
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="petri-small,petri-small-mdm")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--samples", default="1")
    parser.add_argument("--limit", type=int, default=None, help="first N items only (a quick run)")
    parser.add_argument("--swap", action="store_true", help="reverse every question's alternatives (label bias)")
    parser.add_argument("--order", default="as_listed", help="as_listed, cyclic or permutations:N")
    parser.add_argument("--min-mass", type=float, default=0.5, help="abstain below this mass on the labels")
    parser.add_argument("--out", default=None, help="default: results/probe_eval.json (_swapped with --swap)")
    args = parser.parse_args()
    tag = ("-swapped" if args.swap else "") + ("" if args.order == "as_listed" else "-" + args.order.replace(":", "-"))
    args.out = args.out or str(RESULTS / f"probe_eval{tag.replace('-', '_')}.json")
    samples = "auto" if args.samples == "auto" else int(args.samples)
    labelled = load_labelled_set(probe_set_path())
    if args.limit:
        labelled = replace(labelled, items=labelled.items[:args.limit])
    if args.swap:
        labelled = replace(labelled, questions=tuple(replace(q, alternatives=q.alternatives[::-1])
                                                     for q in labelled.questions))
    import torch

    result = {"command": "python3 experiments/probe_eval.py " + " ".join(sys.argv[1:]), "set": str(probe_set_path().
              relative_to(ROOT)), "items": len(labelled.items), "repeats": args.repeats, "samples": samples,
              "order": args.order, "min_mass": args.min_mass,
              "machine": {"platform": platform.platform(), "torch_threads": torch.get_num_threads()}, "models": {}}
    evaluations = {}
    for model_name in args.models.split(","):
        model = load_model(model_name, device="cpu")
        folder = RESULTS / "probe_eval" / (model_name + tag)
        writer = PredictionWriter(folder / "predictions.csv", prediction_columns(labelled))
        started = time.perf_counter()

        def progress(done, total, name=model_name):
            print(f"\r{name}: {done}/{total} ({(time.perf_counter() - started) / done:.2f} s each)", end="",
                  file=sys.stderr, flush=True)

        try:
            evaluation = evaluate(model, labelled, samples=samples, repeats=args.repeats, order=args.order,
                                  min_mass=args.min_mass, on_rows=writer, on_item=progress)
        finally:
            writer.close()
        print(file=sys.stderr)
        write_evaluation(evaluation, folder, predictions=False)
        evaluations[model_name] = evaluation
        result["models"][model_name] = {
            "summary": evaluation.to_dict()["summary"], "seconds_per_read": evaluation.meta["seconds_per_read"],
            "answer_counts": {q: evaluation.predictions.query(f"question == '{q}' and repeat == 0")["answer"]
                              .fillna("(no answer)").value_counts().to_dict() for q in ("consistent", "category")},
            "separation": separation(evaluation, labelled, stored_events(model_name)),
            "sensor_source": f"experiments/results/inventory_order-en-{model_name}/events.csv"}
        if args.swap:
            unswapped = RESULTS / "probe_eval" / model_name / "predictions.csv"
            original = ProbeEvaluation(pd.read_csv(unswapped, dtype={"item_id": str, "gold": str, "answer": str}),
                                       pd.DataFrame(), pd.DataFrame())
            versus = compare_evaluations(original, evaluation, ("unswapped", "swapped"))
            versus.pop("discordant")
            result["models"][model_name]["versus_unswapped"] = versus
        print(json.dumps(result["models"][model_name]["summary"], indent=1), file=sys.stderr)
    names = list(evaluations)
    if len(names) == 2:
        result["comparison"] = compare_evaluations(evaluations[names[0]], evaluations[names[1]], tuple(names))
        result["comparison"].pop("discordant")
    Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
