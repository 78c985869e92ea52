"""Issue 25: the decoder's dense products at one canvas with their reduction split over programs
(``petri/engine/split_products.py``) against the library's (cuBLAS ``mm`` in bf16, cuBLASLt
``torch._scaled_mm`` in FP8), on one H200.

Why: at 256 rows the o projections, the dense MLP's gate/up and down have 44 to 66 output tiles of
128 × 128 for 132 multiprocessors, and cuBLAS runs one program a tile walking all of K (the FP8
products take 10.6 to 24 µs where their weights read in 1.4 to 5.5 µs: ``blas_workspace_h200.json``).

Per product (the full-size architecture's shapes, ``blas_workspace.SHAPES`` but the lm head, whose
4,096 tiles fill the chip; the FP8 self-conditioning product, 44 tiles over a reduction of 262,144,
is one a step),
row count (one canvas; twelve as a check that the split is left at 1 where the tiles fill the chip)
and kind (``fp8_fast``, ``fp8``, ``bf16``): the library's time, then the split kernel's at the
configuration :func:`petri.engine.split_products.choose_config` picks and at other splits and tile
shapes. Times are the median of one CUDA graph of calls cycling through copies of the weight
(weights from memory, as in the model; ``blas_workspace.graphed_ms``). Each configuration's result:
whether 20 calls (captured in a graph and replayed) give the same bits, whether its counters are back
to zero, and the relative error against the float32 product of the (dequantized) operands, beside the
library's. Then per kind, ms per step at one canvas over the decoder's layers (25 sliding, 5 global;
the self-conditioning product apart): each product at the library's, at the chosen configuration and
at the best one (the library's where it is faster). "chosen" is what the tier runs: the split
kernel where the chosen configuration splits, the library's elsewhere.

    python experiments/split_products.py > experiments/results/split_products_h200.json
    bash experiments/issue25_device.sh splitproducts      # the same on the device machine
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from blas_workspace import COLD_BYTES, SHAPES, graphed_ms  # noqa: E402
from petri.engine.fp8 import quantize_rows, scaled_matmul  # noqa: E402
from petri.engine.split_products import SplitConfig, choose_config, counters_for, split_product  # noqa: E402

PRODUCTS = {name: shape for name, shape in SHAPES.items() if name != "lm_head"}  # lm head: 4,096 tiles
ROWS = (256, 3072)
#: the layers a step's sum counts: 25 sliding, 5 global (the full-size architecture)
LAYER_PRODUCTS = {"sliding": ("qkv_sliding", "o_sliding", "mlp_gate_up", "mlp_down"),
                  "global": ("qk_global", "o_global", "mlp_gate_up", "mlp_down")}
LAYERS = {"sliding": 25, "global": 5}


def candidates(chosen: SplitConfig, depth: int) -> list[SplitConfig]:
    """The chosen configuration, then other splits and tile shapes of it (each slice at least one step)."""
    out = [chosen]
    steps = math.ceil(depth / chosen.block_k)
    for split in (1, 2, 3, 4, 6, 8):
        out.append(replace(chosen, split=split))
    for block_m, block_n, warps in ((64, 128, 4), (128, 64, 4), (64, 64, 4), (128, 128, 4)):
        for split in (chosen.split, 2 * chosen.split):
            out.append(replace(chosen, block_m=block_m, block_n=block_n, num_warps=warps, split=split))
    out += [replace(chosen, num_stages=stages) for stages in (3, 5)]
    seen, unique = set(), []
    for c in out:
        if c not in seen and c.split <= steps:
            seen.add(c)
            unique.append(c)
    return unique


def operands(kind: str, rows: int, columns: int, depth: int):
    """(x, x_scale, weight copies [(w, w_scale)], reference float32 product) for one case."""
    x = torch.randn(rows, depth, device="cuda").bfloat16()
    weight = (torch.randn(columns, depth, device="cuda") / depth**0.5).bfloat16()
    if kind == "bf16":
        copies = max(1, math.ceil(COLD_BYTES / (2 * weight.numel())))
        return x, None, [(weight.clone(), None) for _ in range(copies)], x.float() @ weight.float().T
    xq, x_scale = quantize_rows(x)
    wq, w_scale = quantize_rows(weight)
    copies = max(1, math.ceil(COLD_BYTES / wq.numel()))
    reference = (xq.float() * x_scale[:, None]) @ (wq.float() * w_scale[:, None]).T
    return xq, x_scale, [(wq.clone(), w_scale.clone()) for _ in range(copies)], reference


def repeatable(call, counters) -> dict:
    """Twenty calls replayed from one captured graph: the same bits each time, the counters at zero after."""
    first = call(0).clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call(0)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [call(0) for _ in range(20)]
    graph.replay()
    torch.cuda.synchronize()
    return {"same_bits": all(torch.equal(first, o) for o in outs),
            "counters_zero": counters is None or int(counters.count_nonzero()) == 0}


def case(name: str, columns: int, depth: int, rows: int, kind: str, sms: int) -> dict:
    """One product at one row count and kind: the library's figures, then each configuration's."""
    x, x_scale, weights, reference = operands(kind, rows, columns, depth)
    fast = kind == "fp8_fast"
    scaled = x_scale is not None

    def library(i):
        w, w_scale = weights[i % len(weights)]
        return x @ w.T if not scaled else scaled_matmul(x, x_scale, w, w_scale, torch.bfloat16, fast)

    def error(out):
        return round(float((out.float() - reference).norm() / reference.norm()), 6)

    chosen = choose_config(rows, columns, depth, scaled, sms)
    found = {"shape": name, "n": columns, "k": depth, "rows": rows, "kind": kind, "library_ms": graphed_ms(library, 64),
             "library_error": error(library(0)), "chosen": asdict(chosen), "configs": []}
    for config in candidates(chosen, depth) if rows <= 256 else [chosen]:
        counters = counters_for(rows, columns, x.device, replace(config, block_m=64, block_n=64))

        def call(i, config=config, counters=counters):
            w, w_scale = weights[i % len(weights)]
            return split_product(x, w, counters, x_scale, w_scale, fast_accum=fast, config=config)

        entry = asdict(config)
        try:
            entry.update(ms=graphed_ms(call, 64), error=error(call(0)), **repeatable(call, counters))
        except Exception as exc:  # a configuration that does not fit (shared memory): recorded, the sweep goes on
            entry["failed"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        found["configs"].append(entry)
    timed = [c for c in found["configs"] if "ms" in c]
    if timed:
        best = min(timed, key=lambda c: c["ms"])
        found["best"] = best
        found["chosen_ms"] = next((c["ms"] for c in timed if all(c[k] == v for k, v in asdict(chosen).items())), None)
    return found


def step_sums(cases: list[dict]) -> dict:
    """Per kind, ms per step over the decoder's layers at one canvas: the library, the tier's choice and the best."""
    table = {}
    for kind in ("fp8_fast", "fp8", "bf16"):
        by_shape = {c["shape"]: c for c in cases if c["kind"] == kind and c["rows"] == 256 and "best" in c}
        sums = {"library": 0.0, "chosen": 0.0, "best": 0.0}
        for layer, names in LAYER_PRODUCTS.items():
            for name in names:
                c = by_shape.get(name)
                if c is None:
                    return table
                sums["library"] += LAYERS[layer] * c["library_ms"]
                split = c["chosen"]["split"] > 1 and c["chosen_ms"] is not None  # what the tier runs
                sums["chosen"] += LAYERS[layer] * (c["chosen_ms"] if split else c["library_ms"])
                sums["best"] += LAYERS[layer] * min(c["best"]["ms"], c["library_ms"])
        table[kind] = {k: round(v, 4) for k, v in sums.items()}
    return table


def main() -> None:
    import triton

    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "multiprocessors": sms, "cases": []}
    for name, (columns, depth) in PRODUCTS.items():
        for rows in ROWS:
            for kind in ("fp8_fast", "fp8", "bf16"):
                result["cases"].append(case(name, columns, depth, rows, kind, sms))
                print(json.dumps({k: v for k, v in result["cases"][-1].items() if k != "configs"}), file=sys.stderr)
            torch.cuda.empty_cache()
    result["ms_per_step"] = step_sums(result["cases"])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
