"""The FP8 self-conditioning product whole and with its reduction split (issue 25; a lever measured
and not taken), at the full-size model's shapes (probabilities (M, 262,144) × embedding columns
(2,816, 262,144), e4m3, fast accumulation as the fastest tier runs it): the median time of one call
(CUDA graphs, ``experiments/blas_workspace.py``'s timing) for M = 256 and 3,072 and G = 1 (the one
``torch._scaled_mm``) to 8 slices, the slices ``split_groups`` picks for it, and
each split's largest difference from the whole product relative to its largest value.

Why it was tried: at one canvas ``torch._scaled_mm`` tiles the (256, 2,816) output in 2 × 22 tiles
of 128 × 128, each walking the whole 262,144-long reduction: 44 of the H200's 132 multiprocessors
busy, 0.59 ms a call where the product's 378 GFLOP take about 0.25 ms at the FP8 units' rate (a
larger cuBLASLt workspace does not make its heuristic split it: ``blas_workspace.py``). The split
cuts the vocabulary in G slices of multiples of 128 and computes them in one launch of
``torch._scaled_grouped_mm``'s 2-D × 2-D form (offsets along K, each slice's row scales repeated;
one (M, N) product per slice, rounded to bf16), then adds the slices in float32. Measured
(``results/split_k_check_h200.json``): no G was faster (0.63 ms for 2, 4, 6 and 8 slices, 0.85 for
3), nor the fastest tier with it in the sampler (``results/bench_h200_shapes_b1_b12_split_sc_product.json``).

    python experiments/split_k_check.py > experiments/results/split_k_check_h200.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from blas_workspace import graphed_ms  # noqa: E402

from petri.engine.cuda.fp8_tier.fp8 import quantize_rows, scaled_matmul  # noqa: E402

HIDDEN, VOCAB = 2816, 262_144
#: the output tile counted for the slices chosen, and the slices' granularity along K
TILE, ALIGN, MIN_SLICE = 128, 128, 8192


def split_groups(rows: int, columns: int, depth: int, multiprocessors: int) -> int:
    """The slices that give every multiprocessor one tile (no slice under MIN_SLICE; 1 where the
    output has tiles enough or ``depth`` is not a multiple of ALIGN)."""
    if depth % ALIGN:
        return 1
    tiles = math.ceil(rows / TILE) * math.ceil(columns / TILE)
    return max(1, min(multiprocessors // tiles, depth // MIN_SLICE))


def slice_ends(depth: int, groups: int) -> list[int]:
    """The ends of ``groups`` near-equal slices of ``depth``, multiples of ALIGN."""
    if groups < 1 or depth % ALIGN or depth // ALIGN < groups:
        raise ValueError(f"cannot cut a reduction of {depth} into {groups} slices of multiples of {ALIGN}")
    units = depth // ALIGN
    return [(units * (g + 1) // groups) * ALIGN for g in range(groups)]


def split_scaled_matmul(xq, x_scale, wq, w_scale, offsets, fast_accum: bool, w_scale_repeated):
    """(M, K) e4m3 · (N, K) e4m3 → (M, N) bf16, the reduction cut at ``offsets`` (G,) int32: one
    grouped scaled product (G, M, N) in bf16, the slices added in float32 (CUDA, Hopper)."""
    groups = offsets.shape[0]
    parts = torch._scaled_grouped_mm(xq, wq.T, x_scale.repeat(groups), w_scale_repeated, offs=offsets,
                                     out_dtype=torch.bfloat16, use_fast_accum=fast_accum)
    return parts.sum(dim=0, dtype=torch.float32).to(torch.bfloat16)


def main() -> None:
    torch.manual_seed(0)
    wq, ws = quantize_rows(torch.randn(HIDDEN, VOCAB, device="cuda") / 8)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "multiprocessors": sms, "cases": []}
    for rows in (256, 3072):
        xq, xs = quantize_rows(torch.softmax(torch.randn(rows, VOCAB, device="cuda") * 3, dim=-1))
        whole = scaled_matmul(xq, xs, wq, ws, torch.bfloat16, True).float()
        chosen = split_groups(rows, HIDDEN, VOCAB, sms)
        for groups in (1, 2, 3, 4, 6, 8):
            case = {"rows": rows, "groups": groups, "chosen": groups == chosen}
            try:
                if groups == 1:
                    def call(_i):
                        return scaled_matmul(xq, xs, wq, ws, torch.bfloat16, True)
                else:
                    offsets = torch.tensor(slice_ends(VOCAB, groups), dtype=torch.int32, device="cuda")
                    repeated = ws.repeat(groups)

                    def call(_i, offsets=offsets, repeated=repeated):
                        return split_scaled_matmul(xq, xs, wq, ws, offsets, True, repeated)
                case["difference"] = float((call(0).float() - whole).abs().max() / whole.abs().max())
                case["ms"] = graphed_ms(call, 8)
            except Exception as error:  # record and go on
                case["error"] = f"{type(error).__name__}: {error}"[:500]
            result["cases"].append(case)
            print(json.dumps(case), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
