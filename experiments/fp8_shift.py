"""What the FP8 tier does to the science (issue 25): the distributions of per-sample flips, steps
and entropy drawn in bf16 and in FP8 (``petri.engine.cuda.fp8_tier.fp8``: ``fp8`` and ``fp8-fast``), same sampler
tier, same seeds, plus a null arm (bf16 with other seeds) that shows how far two bf16 runs differ by
chance. Per sample: mean flips per free position, steps run, mean entropy over free positions and
steps run. For each metric and arm against bf16: the relative shift of the mean,
(mean_arm − mean_bf16) / mean_bf16, and two-sample tests at two levels:

- ``seed_level`` (the independent unit: the samples of one seed share the dish, the prompt and the
  anchor layouts): per-seed means, Mann-Whitney U, and (same seeds) the Wilcoxon signed-rank test
  paired by seed;
- ``sample_level`` (not independent, shown for reference): Mann-Whitney U and Kolmogorov-Smirnov.

One JSON object on stdout; ``--npz`` also keeps the per-sample arrays. ``--from-npz`` recomputes
the comparisons of a finished run from its arrays (no model, no GPU) and writes them into the run's
JSON (``--out``).

    # the embedded model with its shipped settings (adaptive stop), two dishes, 250 seeds × 12 samples
    python experiments/fp8_shift.py --model embedded --seeds 250 --batch 12
    # the full-size architecture (random bf16 weights), fixed steps, a 200-token random prompt
    python experiments/fp8_shift.py --model full --seeds 25 --batch 12 --steps 8 --compile
    # the tests of a finished run again, from its arrays
    python experiments/fp8_shift.py --from-npz run.npz --batch 12 --out run.json
    # one more FP8 arm against an earlier run's bf16 arm (its JSON and .npz side by side; the
    # seeds, batch, steps and tier must match, and the JSON names the run it took the arm from)
    python experiments/fp8_shift.py --model full --seeds 250 --batch 12 --steps 8 --compile \
        --arms fp8-fast+sc-fp8 --no-null-arm --reference run.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from petri.engine.cuda.fp8_tier.fp8 import set_precision_choice  # noqa: E402
from petri.engine.precision_choice import PrecisionChoice, parse_precision  # noqa: E402
from petri.engine.torch.model import compile_for_sampling, load_model  # noqa: E402
from petri.measure.tables import samples_table  # noqa: E402

#: the arm drawn in bf16 with other seeds: how far two bf16 runs differ by chance (never paired)
NULL_ARM = "bf16_other_seeds"
DISHES = (
    (("order", "inventory", "person"), "Only 90 units are in stock, but the customer ordered 120."),
    (("invoice", "supplier", "manager"), "The supplier sent the invoice twice and the manager paid both."),
)


def per_sample(traj) -> dict[str, np.ndarray]:
    """(S,) arrays: mean flips per free position, steps, mean entropy over free positions and steps run."""
    table = samples_table(traj)
    free = ~traj.anchor_mask
    entropy = np.array([np.nanmean(traj.entropy[s][: traj.steps[s]][:, free[s]]) for s in range(traj.n_samples)])
    return {"flips": table["mean_flips_free"].to_numpy(float), "steps": traj.steps.astype(float), "entropy": entropy}


def compare(arm: dict[str, np.ndarray], base: dict[str, np.ndarray], batch: int, paired: bool) -> dict:
    """Per metric: means, relative shift, seed-level and sample-level tests (module docstring)."""
    from scipy.stats import ks_2samp, mannwhitneyu, wilcoxon

    out = {}
    for name in base:
        # float64: scipy returns p in its inputs' dtype, and float32 rounds p below 1e-38 to 0
        # (and p below 1e-45 to subnormal steps), as the runs before 2026-12-02 reported
        a, b = np.asarray(arm[name], dtype=np.float64), np.asarray(base[name], dtype=np.float64)
        same = np.all(a == a[0]) and np.all(b == a[0])  # e.g. fixed steps: no test to run
        seeds_a, seeds_b = a.reshape(-1, batch).mean(1), b.reshape(-1, batch).mean(1)
        differs = not np.array_equal(seeds_a, seeds_b)
        out[name] = {
            "mean": float(a.mean()), "mean_bf16": float(b.mean()),
            "relative_shift": float((a.mean() - b.mean()) / b.mean()) if b.mean() else None,
            "seed_level": None if same else {
                "seeds": int(len(seeds_a)),
                "mann_whitney_p": float(mannwhitneyu(seeds_a, seeds_b).pvalue),
                "wilcoxon_paired_p": float(wilcoxon(seeds_a, seeds_b).pvalue) if paired and differs else None,
            },
            "sample_level": None if same else {
                "mann_whitney_p": float(mannwhitneyu(a, b).pvalue), "ks_p": float(ks_2samp(a, b).pvalue),
            },
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded", help="embedded | full | a checkpoint folder")
    parser.add_argument("--seeds", type=int, default=250)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--steps", type=int, default=None, help="fixed steps, adaptive stop off (default: the model's settings)")
    parser.add_argument("--compile", action="store_true", help="both arms in the compiled tier (default: the exact tier)")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (slow; bf16 on the CPU)")
    parser.add_argument("--arms", default="fp8,fp8-fast", help="FP8 arms beside bf16 and the null arm ('': the null arm "
                        "only); a precision, then optionally '+sc-fp8' (the opt-in FP8 self-conditioning, compiled tier) and "
                        "'+enc-fp8' (the opt-in FP8 prompt encoder), e.g. fp8-fast+sc-fp8+enc-fp8")
    parser.add_argument("--null-arm", action=argparse.BooleanOptionalAction, default=True,
                        help="draw the null arm too (--no-null-arm: bf16 and the FP8 arms only, when the device "
                             "time left is short; an earlier run's null arm still tells the test's spread)")
    parser.add_argument("--reference", default=None,
                        help="an earlier run's JSON (its .npz beside it): take its bf16 arm instead of drawing one")
    parser.add_argument("--out", default=None)
    parser.add_argument("--npz", default=None, help="also keep the per-sample arrays (arm_metric: (seeds·batch,))")
    parser.add_argument("--from-npz", default=None, help="recompute a finished run's comparisons from its arrays into --out")
    args = parser.parse_args()
    if args.from_npz:
        recompare(args.from_npz, args.batch, args.out)
        return
    try:  # before the model is built
        choices = {arm: parse_precision(arm) for arm in args.arms.split(",") if arm}
    except ValueError as error:
        raise SystemExit(f"--arms: {error}") from None
    if not args.compile and any(choice.fp8_self_conditioning for choice in choices.values()):
        raise SystemExit("--arms: +sc-fp8 runs in the compiled tier only: add --compile")
    started = time.perf_counter()
    if args.model == "full":
        from bench import build_full_size, three_anchor_layouts

        lm = build_full_size(torch.device("cuda"))
        prompt = torch.randint(3, lm.vocab_size, (200,), generator=torch.Generator().manual_seed(0)).tolist()
        layouts = three_anchor_layouts(args.batch, lm.canvas_length, lm.vocab_size)
        from petri.core.trajectory import SamplerSettings
        from petri.engine.base import SampleRequest

        settings = SamplerSettings()

        def draw(seed: int, dish: int):
            return lm.sample(SampleRequest(prompt, layouts, settings, seed=seed))
        dishes = (0,)
    else:
        from petri.core.dish import Dish
        from petri.engine.seeding import seed_dish

        lm = load_model(None if args.model == "embedded" else args.model, device=args.device, dtype="bf16")
        settings = lm.default_settings()

        def draw(seed: int, dish: int):
            concepts, event = DISHES[dish]
            return seed_dish(lm, Dish(concepts, event), args.batch, settings, seed=seed)
        dishes = (0, 1)
    if args.steps is not None:
        settings = replace(settings, max_denoising_steps=args.steps, stability_threshold=None, confidence_threshold=None)
    if args.compile:
        compile_for_sampling(lm)
    arms: dict[str, dict[str, list]] = {}
    samplers, seconds = {}, {}
    if args.reference:
        arms["bf16"], samplers["bf16"] = reference_arm(args.reference, args, settings)
    plan = ([] if args.reference else [("bf16", PrecisionChoice(), 0)]) \
        + [(arm, choice, 0) for arm, choice in choices.items()] \
        + ([(NULL_ARM, PrecisionChoice(), 10**6)] if args.null_arm else [])
    if not plan:
        raise SystemExit("nothing to draw: name an FP8 arm (--arms) or keep the null arm")
    for arm, choice, offset in plan:
        set_precision_choice(lm, choice)
        began = time.perf_counter()
        values: dict[str, list] = {"flips": [], "steps": [], "entropy": []}
        for seed in range(args.seeds):
            traj = draw(offset + seed, seed % len(dishes))
            samplers[arm] = traj.sampler
            for name, v in per_sample(traj).items():
                values[name].append(v)
        seconds[arm] = round(time.perf_counter() - began, 1)
        arms[arm] = {name: np.concatenate(v) for name, v in values.items()}
        print(arm, samplers[arm], seconds[arm], "s", flush=True)
        text = json.dumps(report(lm, args, settings, arms, samplers, seconds, plan, started), indent=2)
        if args.out:  # after every arm: a run cut short keeps the arms it finished
            Path(args.out).write_text(text)
        if args.npz:
            np.savez_compressed(args.npz, **{f"{a}_{name}": v for a, values in arms.items() for name, v in values.items()})
    print(text)


def reference_arm(path: str, args, settings) -> tuple[dict[str, np.ndarray], str]:
    """The bf16 arm of the run ``path`` (its JSON; the arrays from the ``.npz`` beside it) and its
    sampler name, after checking that it was drawn as this run draws (seeds, batch, steps, tier)."""
    run = json.loads(Path(path).read_text())
    drawn = {k: getattr(settings, k) for k in ("max_denoising_steps", "stability_threshold", "confidence_threshold")}
    wanted = {"seeds": args.seeds, "batch": args.batch, "compiled": args.compile,
              **{f"settings.{k}": v for k, v in drawn.items()}}
    found = {"seeds": run.get("seeds"), "batch": run.get("batch"), "compiled": run.get("compiled"),
             **{f"settings.{k}": run.get("settings", {}).get(k) for k in drawn}}
    mismatched = {k: (found[k], wanted[k]) for k in wanted if found[k] != wanted[k]}
    if mismatched:
        raise SystemExit(f"--reference {path} was drawn otherwise (its value, this run's): {mismatched}")
    arrays = np.load(Path(path).with_suffix(".npz"))
    return {name: arrays[f"bf16_{name}"] for name in ("flips", "steps", "entropy")}, run["samplers"]["bf16"]


def recompare(npz: str, batch: int, out: str | None) -> None:
    """The ``<arm>_vs_bf16`` entries of a run recomputed from its ``--npz`` arrays (arms other than
    the null arm paired by seed), written into the run's JSON ``out`` (marked ``recomputed_from``)
    or printed."""
    arrays = np.load(npz)
    arms: dict[str, dict[str, np.ndarray]] = {}
    for key in arrays.files:
        arm, name = key.rsplit("_", 1)
        arms.setdefault(arm, {})[name] = arrays[key]
    comparisons = {f"{arm}_vs_bf16": compare(arms[arm], arms["bf16"], batch, paired=arm != NULL_ARM)
                   for arm in arms if arm != "bf16"}
    if out is None:
        print(json.dumps(comparisons, indent=2))
        return
    run = json.loads(Path(out).read_text())
    if run.get("batch", batch) != batch:
        raise SystemExit(f"--batch {batch} differs from the run's batch {run['batch']}")
    run.update(comparisons, recomputed_from=Path(npz).name)
    Path(out).write_text(json.dumps(run, indent=2))


def report(lm, args, settings, arms: dict, samplers: dict, seconds: dict, plan: list, started: float) -> dict:
    """The JSON object over the arms drawn so far (each FP8 arm and the null arm against bf16)."""
    return {
        "model": lm.model_id, "gpu": torch.cuda.get_device_name() if lm.device.type == "cuda" else None, "torch": torch.__version__,
        "seeds": args.seeds, "batch": args.batch, "samples_per_arm": int(len(arms["bf16"]["flips"])),
        "settings": {k: getattr(settings, k)
                     for k in ("max_denoising_steps", "stability_threshold", "confidence_threshold", "entropy_bound")},
        "compiled": args.compile, "samplers": samplers, "arm_seconds": seconds,
        **({"bf16_arm_from": Path(args.reference).name} if args.reference else {}),
        **{f"{arm}_vs_bf16": compare(arms[arm], arms["bf16"], args.batch, paired=offset == 0)
           for arm, _, offset in plan if arm != "bf16" and arm in arms},
        "total_s": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    main()
