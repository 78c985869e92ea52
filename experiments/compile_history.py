"""Issue 25: does the compiled tier's arithmetic depend on what the process compiled before? Dynamo
compiles a layer for the first shape it meets and, once a second shape arrives, again with dynamic
shapes; Inductor's kernels for the two can round differently. This script compiles the tiny model's
compiled tier twice from a reset Dynamo: once meeting only the measured batch (3 canvases), once
after a forward of another batch (2 canvases) first, and compares the measured batch's logits
(and, on CUDA, seeds sampled through the fast path's captured graphs) bit for bit. ``--overlapped``
does the same with the overlapped MLP (petri.engine.cuda.fused.overlapped_mlp; the FP8 tier's default since 2026-12-03:
without the flag this script runs the blocks in sequence). One JSON object on stdout.

``--autotuned`` compiles as the tier did before 2026-12-03 (Inductor picking kernel configurations
by timing them); by default the tier compiles in Inductor's deterministic mode
(``petri.engine.torch.decoder_hooks.compile_function``). ``--shapes`` sets how Dynamo treats a new shape.

Measured (2026-12-03; ``bash experiments/issue25_device.sh history`` and the variants below,
``experiments/results/compile_history_h200.json``):
- CPU (torch 2.13, Inductor's C++ kernels, autotuned): no dependence in bf16, fp8, fp8 overlapped.
- One H200 (torch 2.11), autotuned: bf16 none; fp8-fast: the batch-3 logits after a batch-2
  forward differ from those of a reset Dynamo that met only batch 3 (max 0.198; 100 of 576
  argmax values of the seeds);
  fp8-fast overlapped: logits equal, 67 of 576 argmax values differ. fp8-fast with ``--shapes
  static`` (every shape its own static graph), with ``--shapes dynamic``, and in Inductor's
  deterministic mode (with automatic or dynamic shapes): no dependence. So the kernels that
  Inductor tuned by timing, compiled anew for the dynamic graph, rounded differently; the tier
  now compiles in the deterministic mode.

    python experiments/compile_history.py --device cuda --precision fp8-fast
    python experiments/compile_history.py --device cuda --precision fp8-fast --autotuned   # the tier before
    python experiments/compile_history.py --device cpu --precision bf16      # Inductor's C++ kernels
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from petri.core.trajectory import AnchorSpan, SamplerSettings  # noqa: E402
from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions  # noqa: E402
from petri.engine.cuda.fp8_tier.fp8 import set_precision  # noqa: E402
from petri.engine.torch.decoder_hooks import deterministic_mode_used  # noqa: E402
from petri.engine.torch.tiny import tiny_random_model  # noqa: E402

PROMPT = [5, 9, 17, 33]


def tiny(device: str, precision: str):
    """The tiny model of these probes (3 layers, canvas 16, bf16) on ``device`` in ``precision``."""
    lm = tiny_random_model(canvas_length=16, num_layers=3, seed=3, dtype=torch.bfloat16)
    if device != "cpu":
        lm.model.to(device)
        lm = replace(lm, device=torch.device(device))
    set_precision(lm, precision)
    return lm


@torch.no_grad()
def _logits(lm, batch: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(batch)
    canvas = torch.randint(4, lm.vocab_size, (batch, lm.canvas_length), generator=generator).to(lm.device)
    prompt = torch.tensor([PROMPT] * batch, device=lm.device)
    return lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()


def sample_seeds(lm) -> list:
    """Seeds 1 and 2 through the GPU fast path (the model's tier as it is): 3 samples each, one anchor,
    6 steps after the prompt ``PROMPT`` + [40, 41]; their trajectories."""
    from petri.engine.cuda.fast_sampler import run_sampler_fast

    settings = SamplerSettings(max_denoising_steps=6, entropy_bound=2.0)
    layouts = [[AnchorSpan("a", 3, (40, 41))] for _ in range(3)]
    return [run_sampler_fast(lm, PROMPT + [40, 41], layouts, settings, seed=seed) for seed in (1, 2)]


#: ``--shapes``: Dynamo's treatment of a shape it has not met (what the compiled tier does is "automatic")
SHAPES = {
    "automatic": "a static graph for the first shape, a dynamic one once another arrives (torch's default)",
    "static": "a static graph for every shape (automatic_dynamic_shapes off)",
    "dynamic": "a dynamic graph from the first shape on (assume_static_by_default off)",
}


def set_shapes(shapes: str) -> None:
    """Set Dynamo's treatment of new shapes (:data:`SHAPES`)."""
    import torch._dynamo

    torch._dynamo.config.automatic_dynamic_shapes = shapes != "static"
    torch._dynamo.config.assume_static_by_default = shapes != "dynamic"


def one_history(lm, overlapped: bool, other_shape_first: bool, deterministic: bool = True) -> dict:
    """From a reset Dynamo: the compiled tier (``deterministic``: its ``deterministic_kernels``), a
    batch-2 forward first if asked, then the batch-3 logits and (CUDA) two seeds of 3 samples
    through the fast path."""
    import torch._dynamo

    uncompile_regions(lm)
    torch._dynamo.reset()
    compile_regions(lm, overlapped_mlp=overlapped, deterministic_kernels=deterministic)
    lm.fast_tier.prompts.set_max_bytes(0)
    if other_shape_first:
        _logits(lm, 2)
    out = {"logits": _logits(lm, 3).cpu()}
    if lm.device.type == "cuda":
        out["argmax"] = [trajectory.argmax for trajectory in sample_seeds(lm)]
    uncompile_regions(lm)
    return out


def compare(fresh: dict, after: dict) -> dict:
    result = {"logits_equal": bool(torch.equal(fresh["logits"], after["logits"])),
              "logits_max_difference": float((fresh["logits"] - after["logits"]).abs().max())}
    if "argmax" in fresh:
        result["argmax_differing"] = int(sum((a != b).sum() for a, b in zip(fresh["argmax"], after["argmax"])))
        result["argmax_values"] = int(sum(a.size for a in fresh["argmax"]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp8", "fp8-fast"])
    parser.add_argument("--overlapped", action="store_true", help="with the overlapped MLP (without: the blocks in sequence)")
    parser.add_argument("--shapes", default="automatic", choices=list(SHAPES),
                        help="how Dynamo treats a new shape: " + "; ".join(f"{k}: {v}" for k, v in SHAPES.items()))
    parser.add_argument("--autotuned", action="store_true",
                        help="compile without Inductor's deterministic mode (the compiled tier before 2026-12-03)")
    args = parser.parse_args()
    set_shapes(args.shapes)
    lm = tiny(args.device, args.precision)
    deterministic = not args.autotuned
    runs = {other: one_history(lm, args.overlapped, other, deterministic) for other in (False, True)}
    repeat = one_history(lm, args.overlapped, False, deterministic)
    print(json.dumps({
        "device": args.device, "precision": args.precision, "overlapped": args.overlapped,
        "shapes": args.shapes, "inductor_deterministic": deterministic_mode_used("inductor", deterministic),
        "torch": torch.__version__,
        "fresh_against_fresh_again": compare(runs[False], repeat),
        "fresh_against_another_shape_first": compare(runs[False], runs[True]),
    }, indent=1, default=lambda x: x.tolist() if isinstance(x, np.ndarray) else str(x)))


if __name__ == "__main__":
    main()
