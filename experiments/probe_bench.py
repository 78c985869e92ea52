"""The probe's speed on the CPU: one read per item of a 154-item set, beside a seed of the same event.

    python3 experiments/probe_bench.py                           # petri-small, 154 reads, 6 seeds
    python3 experiments/probe_bench.py --models petri-small,petri-small-mdm --items 154 --seeds 6

The 154 items (the size of the published comparison) are the shipped set's 108 items
(``assets/probe/events.jsonl``) cycled; each is read once (``samples=1``, ``steps=1``: the
prompt encoded, one denoising step, two slots read), timed around
:func:`petri.engine.probe.read_slots` after two warm-up reads. The seed beside it is what
``petri seed`` runs for the same event (:func:`petri.engine.seeding.seed_dish`: the concepts order,
inventory, person pinned, the study's first template, the model's own sampler settings), with 12
samples (the CLI's default) and with 1, on the first ``--seeds`` events. Results (seconds per item,
the ratio) go to ``experiments/results/probe_bench_cpu.json`` with the machine and thread count.
The machine may be shared: the file records its load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from petri.core.dish import DEFAULT_TEMPLATE, Dish  # noqa: E402
from petri.core.paths import probe_set_path  # noqa: E402
from petri.engine.probe import read_slots  # noqa: E402
from petri.engine.seeding import seed_dish  # noqa: E402
from petri.engine.torch.model import load_model  # noqa: E402
from petri.study.probe.probe_eval import item_request  # noqa: E402
from petri.study.probe.probe_set import load_labelled_set  # noqa: E402

CONCEPTS = ("order", "inventory", "person")


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def describe(seconds: list[float]) -> dict:
    return {"n": len(seconds), "mean_s": statistics.fmean(seconds), "median_s": statistics.median(seconds),
            "min_s": min(seconds), "max_s": max(seconds), "total_s": sum(seconds)}


def bench_model(name: str, n_items: int, n_seeds: int) -> dict:
    model = load_model(name, device="cpu")
    labelled = load_labelled_set(probe_set_path())
    items = [labelled.items[i % len(labelled.items)] for i in range(n_items)]
    requests = [item_request(labelled, item, samples=1, steps=1, seed=0) for item in items]
    for request in requests[:2]:
        read_slots(model, request)  # warm-up
    reads = []
    for n, request in enumerate(requests, 1):
        reads.append(timed(lambda r=request: read_slots(model, r)))
        print(f"\r{name}: read {n}/{n_items}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    settings = model.default_settings()
    events = list(dict.fromkeys(item.prompt.removeprefix("Event: ") for item in items))[:n_seeds]
    seeds = {}
    for samples in (12, 1):
        runs = []
        for event in events:
            dish = Dish(concepts=CONCEPTS, event=event, template=DEFAULT_TEMPLATE)
            runs.append(timed(lambda d=dish: seed_dish(model, d, samples, settings, seed=0)))
        seeds[f"samples_{samples}"] = describe(runs)
        print(f"{name}: seed of {samples} sample(s): {statistics.fmean(runs):.2f} s", file=sys.stderr)
    read = describe(reads)
    return {"model": model.describe(), "family": model.family, "settings": settings.to_dict(),
            "read": {**read, "seconds_per_item": read["mean_s"]}, "seed": seeds,
            "seed_12_over_read": seeds["samples_12"]["mean_s"] / read["mean_s"],
            "seed_1_over_read": seeds["samples_1"]["mean_s"] / read["mean_s"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="petri-small")
    parser.add_argument("--items", type=int, default=154)
    parser.add_argument("--seeds", type=int, default=6, help="events seeded (12 samples and 1 sample each)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "probe_bench_cpu.json"))
    args = parser.parse_args()
    import torch

    result = {"command": "python3 experiments/probe_bench.py " + " ".join(sys.argv[1:]),
              "machine": {"platform": platform.platform(), "processor": platform.processor(),
                          "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "load_before": os.getloadavg()}, "models": {}}
    for name in args.models.split(","):
        result["models"][name] = bench_model(name, args.items, args.seeds)
    result["machine"]["load_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
