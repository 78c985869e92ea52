"""Each tier's planned GPU memory for the full-size DiffusionGemma architecture, and what a card of the given
free/total memory runs for each ``--compile`` / ``--precision`` asked (issue 62; petri.engine.torch.tier_memory:
the parameters counted on the meta device, the workspace bounded by the peaks measured on an H200). No GPU needed.

    python experiments/tier_plan.py --free-gib 78.9 --total-gib 79.2 > experiments/results/tier_plan_h100_80gb.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from bench import full_size_config  # noqa: E402

from petri.engine.torch.tier_memory import GIB, Tier, TierMemoryError, choose_tier, estimate, weight_counts  # noqa: E402

ASKED = [(False, "bf16"), (True, "bf16"), (True, "fp8"), (True, "fp8-fast"), (True, "fp8-fast+sc-fp8")]
SHAPES = [(1, 1600), (12, 200), (12, 1600), (1, 4096)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--free-gib", type=float, required=True, help="the card's free memory after CUDA's context")
    parser.add_argument("--total-gib", type=float, required=True)
    args = parser.parse_args()
    from transformers import DiffusionGemmaForBlockDiffusion

    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        counts = weight_counts(DiffusionGemmaForBlockDiffusion(full_size_config()))
    free, total = int(args.free_gib * GIB), int(args.total_gib * GIB)
    tiers = [Tier(False), Tier(True), Tier(True, "fp8"), Tier(True, "fp8", released=True),
             Tier(True, "fp8-fast", sc_fp8=True), Tier(True, "fp8-fast", released=True, sc_fp8=True)]
    out = {"card_free_gib": args.free_gib, "card_total_gib": args.total_gib,
           "estimates_gib": {t.options + (" (bf16 copies released)" if t.released else ""):
                             {f"{b}x{p}": round(estimate(counts, t, b, p).total / GIB, 1) for b, p in SHAPES}
                             for t in tiers},
           "chosen": {}}
    for compile, precision in ASKED:
        try:
            out["chosen"][f"--{'' if compile else 'no-'}compile --precision {precision}"] = choose_tier(
                counts, free, total, compile=compile, precision=precision).options
        except TierMemoryError as error:
            out["chosen"][f"--{'' if compile else 'no-'}compile --precision {precision}"] = f"refused: {error}"
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
