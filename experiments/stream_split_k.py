"""The FP8 tier's dense products at one canvas with their reduction cut in slices that run side by
side on CUDA streams (issue 25): a probe, before any lever is built on it.

Why: at one canvas (256 rows) cuBLASLt runs every row-scaled FP8 product on 128 × 128 tiles, so an o
projection (N = 2,816) is 2 × 22 = 44 programs on 132 multiprocessors, each walking all of K; the
product takes about 16 µs where its FP8 weight reads in 3 (``blas_workspace_h200.json``). Cutting K
in G slices, each one ``torch._scaled_mm`` of 44 programs on a stream of its own (parallel branches
of one CUDA graph), could fill the machine without a kernel of ours; the slices' outputs are then
added. The split products lever (a Triton split-reduction kernel, taken out on 2026-12-05) lost time
in the bench; this asks whether cuBLASLt's own kernels side by side do better.

Per product (the full-size architecture's shapes, 256 rows, ``fp8-fast``'s fast accumulation), the
median time of one call in a CUDA graph of calls cycling through copies of the weights (so that they
come from memory, not L2): whole; the G slices one after another on one stream (each slice's kernel
speed); the G slices on G streams. Each slice's output is float32 where ``torch._scaled_mm`` allows it
with row-wise scales, else bf16 (``slice_dtype`` says which), the sum rounded to bf16 once; the
relative error of each against float32 arithmetic on the dequantized operands. Then the sums over a
step's 30 layers (25 sliding, 5 global) for each way.

    python experiments/stream_split_k.py > experiments/results/stream_split_k_h200.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from blas_workspace import COLD_BYTES, SHAPES, graphed_ms  # noqa: E402

#: the products of a step at one canvas (blas_workspace's shapes) and how many a step runs
PER_STEP = {"qkv_sliding": 25, "qk_global": 5, "o_sliding": 25, "o_global": 5, "mlp_gate_up": 30, "mlp_down": 30}


def slice_bounds(k: int, parts: int, multiple: int = 16) -> list[tuple[int, int]]:
    """``parts`` contiguous slices of range(k), each a multiple of ``multiple`` long but maybe the last."""
    step = math.ceil(k / parts / multiple) * multiple
    return [(start, min(start + step, k)) for start in range(0, k, step)]


def added(outs):
    """The slices' outputs added in float32, rounded to bf16 once (G - 1 additions, then the rounding)."""
    total = outs[0].float()
    for out in outs[1:]:
        total = total + out
    return total.bfloat16()


def measure(name: str, n: int, k: int, rows: int, parts: tuple[int, ...], calls: int) -> dict:
    import torch

    from petri.engine.cuda.fp8_tier.fp8 import quantize_rows, scaled_matmul_reference

    torch.manual_seed(0)
    weight = (torch.randn(n, k, device="cuda") / k**0.5).bfloat16()
    wq, w_scale = quantize_rows(weight)
    x = torch.randn(rows, k, device="cuda").bfloat16()
    xq, x_scale = quantize_rows(x)
    reference = scaled_matmul_reference(xq, x_scale, wq, w_scale, torch.float32)
    copies = max(1, math.ceil(COLD_BYTES / wq.numel()))
    sa, sb = x_scale.unsqueeze(1), w_scale.unsqueeze(0)

    def product(a, w, dtype):
        return torch._scaled_mm(a, w.T, scale_a=sa, scale_b=sb, out_dtype=dtype, use_fast_accum=True)

    whole_weights = [wq.clone() for _ in range(copies)]
    case = {"shape": name, "n": n, "k": k, "rows": rows, "per_step": PER_STEP.get(name, 0)}

    def error(out) -> float:
        return round(float((out.float() - reference).norm() / reference.norm()), 6)

    case["whole_ms"] = graphed_ms(lambda i: product(xq, whole_weights[i % copies], torch.bfloat16), calls)
    case["whole_error"] = error(product(xq, wq, torch.bfloat16))
    for g in parts:
        bounds = slice_bounds(k, g)
        a_slices = [xq[:, lo:hi].contiguous() for lo, hi in bounds]
        w_slices = [[wq[:, lo:hi].contiguous() for lo, hi in bounds] for _ in range(copies)]
        dtype = torch.float32
        try:
            product(a_slices[0], w_slices[0][0], dtype)
        except RuntimeError:  # row-wise scales may take only a bf16 output
            dtype = torch.bfloat16
        streams = [torch.cuda.Stream() for _ in bounds[1:]]

        def sequential(i, w=w_slices, a=a_slices, dtype=dtype):
            return added([product(a_g, w_g, dtype) for a_g, w_g in zip(a, w[i % copies])])

        def side_by_side(i, add=True, w=w_slices, a=a_slices, dtype=dtype, streams=streams):
            current = torch.cuda.current_stream()
            ws = w[i % copies]
            outs = [product(a[0], ws[0], dtype)]
            for stream, a_g, w_g in zip(streams, a[1:], ws[1:]):
                stream.wait_stream(current)
                with torch.cuda.stream(stream):
                    outs.append(product(a_g, w_g, dtype))
            for stream in streams:
                current.wait_stream(stream)
            return added(outs) if add else outs

        def products_only(i, side_by_side=side_by_side):  # the slices and their join, the sum left out
            return side_by_side(i, add=False)

        entry = {"parts": len(bounds), "slice_dtype": str(dtype).removeprefix("torch.")}
        try:
            entry["sequential_ms"] = graphed_ms(sequential, calls)
            entry["streams_ms"] = graphed_ms(side_by_side, calls)
            entry["streams_without_sum_ms"] = graphed_ms(products_only, calls)
            entry["error"] = error(side_by_side(0))
        except Exception as failure:  # record and go on
            entry["failure"] = f"{type(failure).__name__}: {failure}"[:400]
        case[f"split_{g}"] = entry
        del w_slices
        torch.cuda.empty_cache()
    print(json.dumps(case), file=sys.stderr, flush=True)
    return case


def step_totals(cases: list[dict], parts: tuple[int, ...]) -> dict:
    """ms a step for each way: every product's time times how many a step runs (``streams_G`` only where
    every product was measured with G slices side by side), and ``best``: each product whole or split,
    whichever was faster."""
    totals = {"whole": 0.0, "best": 0.0}
    for case in cases:
        count = case["per_step"]
        totals["whole"] += count * case["whole_ms"]
        split = [case.get(f"split_{g}", {}).get("streams_ms") for g in parts]
        totals["best"] += count * min([case["whole_ms"]] + [ms for ms in split if ms is not None])
    for g in parts:
        split = [case.get(f"split_{g}", {}).get("streams_ms") for case in cases]
        if None not in split:
            totals[f"streams_{g}"] = sum(case["per_step"] * ms for case, ms in zip(cases, split))
    return {key: round(value, 4) for key, value in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--parts", default="2,3,4")
    parser.add_argument("--calls", type=int, default=24, help="calls per CUDA graph")
    args = parser.parse_args()
    import torch

    parts = tuple(int(p) for p in args.parts.split(","))
    cases = [measure(name, *SHAPES[name], args.rows, parts, args.calls) for name in PER_STEP]
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": args.rows,
                      "cases": cases, "ms_per_step": step_totals(cases, parts)}, indent=1))


if __name__ == "__main__":
    main()
