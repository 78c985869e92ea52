"""Study throughput on Ray workers: the same study with 1 worker and with N, batches per second.

Each worker count gets a fresh Ray executor, a warm-up run (one batch per worker's worth, another
seed; first calls pay CUDA and allocator warm-up) and then the timed run of the whole study into a
fresh store. Prints one JSON object (and writes it with ``--out``).

    # full-size DiffusionGemma architecture (random bf16 weights, seeded so every worker holds the
    # same ones) on a machine with two GPUs; the embedded model's tokenizer writes the prompts
    python experiments/ray_scaling.py --model full --workers 1 2 --out experiments/results/ray_scaling_h200x2.json
    # a CPU smoke run with the embedded model
    python experiments/ray_scaling.py --model embedded --device cpu --workers 1 2 --samples 2 --steps 4 --events 2
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from petri.core.paths import embedded_model_path, studies_dir  # noqa: E402
from petri.core.trajectory import SamplerSettings  # noqa: E402
from petri.runs.store import RunStore  # noqa: E402
from petri.study.execution.executors import ModelSpec  # noqa: E402
from petri.study.execution.runner import run_study  # noqa: E402
from petri.study.plan import StudyPlan  # noqa: E402
from petri.study.schema import load_study, study_from_dict  # noqa: E402


@dataclass(frozen=True)
class RandomFullSizeSpec:
    """What a worker loads: the full-size architecture with weights drawn from ``seed`` on its GPU."""

    device: str = "cuda"
    seed: int = 0
    threads: int | None = None

    def load(self):
        import torch
        from transformers import AutoTokenizer

        sys.path.insert(0, str(REPO / "experiments"))
        from bench import build_full_size

        torch.manual_seed(self.seed)
        lm = build_full_size(torch.device(self.device))
        lm.tokenizer = AutoTokenizer.from_pretrained(embedded_model_path())
        return lm


def subset(study, events: int | None):
    """The study with its first ``events`` events of each group (all when None)."""
    if events is None:
        return study
    data = study.to_dict()
    kept, per_group = [], {}
    for event in data["events"]:
        if per_group.get(event["group"], 0) < events:
            per_group[event["group"]] = per_group.get(event["group"], 0) + 1
            kept.append(event)
    return study_from_dict({**data, "events": kept}, source=study.source)


def measure(spec, workers: int, study, samples: int, settings: SamplerSettings) -> dict:
    from petri.study.execution.ray_executor import RayExecutor

    started = time.perf_counter()
    executor = RayExecutor(spec, address="local", workers=workers)
    load_s = time.perf_counter() - started
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm = subset(study, 2)  # the schema wants two events per compared group
            run_study(executor, StudyPlan(warm, samples, 1_000_003, settings, (warm.templates[0].id,)),
                      RunStore(Path(tmp) / "warm"))
            result = run_study(executor, StudyPlan(study, samples, 0, settings), RunStore(Path(tmp) / "timed"))
    finally:
        executor.close()
    batches = len(result.batches)
    return {
        "workers": workers,
        "batches": batches,
        "wall_s": result.wall_s,
        "batches_per_s": batches / result.wall_s,
        "mean_batch_s": result.timings["mean_batch_s"],
        "per_worker": dict(executor.delivered),
        "worker_load_s": load_s,
        "run_id": result.run_id,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="full", help="full (random full-size architecture) | embedded | a checkpoint folder")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--study", default=str(studies_dir() / "inventory_order.json"))
    parser.add_argument("--events", type=int, default=None, help="keep the first N events of each group")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--steps", type=int, default=24, help="denoising steps (adaptive stopping off)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    study = subset(load_study(args.study), args.events)
    if args.model == "full":
        spec = RandomFullSizeSpec(device=args.device)
        settings = SamplerSettings(max_denoising_steps=args.steps)
    else:
        spec = ModelSpec(str(embedded_model_path()) if args.model == "embedded" else args.model, device=args.device,
                         threads=1 if args.device == "cpu" else None)
        settings = spec.load().default_settings()
        settings = replace(settings, max_denoising_steps=args.steps)
    settings = replace(settings, stability_threshold=None, confidence_threshold=None)
    runs = [measure(spec, n, study, args.samples, settings) for n in args.workers]
    assert len({r["run_id"] for r in runs}) == 1, "worker counts gave different run ids"
    base = runs[0]["batches_per_s"] / runs[0]["workers"]
    import ray

    report = {
        "what": "study throughput on Ray workers (one model per worker), timed after a warm-up run",
        "model": args.model,
        "device": args.device,
        "study": study.id,
        "events": len(study.events),
        "templates": len(study.templates),
        "samples_per_batch": args.samples,
        "steps": args.steps,
        "runs": runs,
        "throughput_ratio_vs_first": {str(r["workers"]): r["batches_per_s"] / runs[0]["batches_per_s"] for r in runs},
        "scaling_efficiency": {str(r["workers"]): r["batches_per_s"] / (base * r["workers"]) for r in runs},
        "ray": ray.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
