"""cuBLASLt's workspace and the FP8 tier's dense products (issue 25): does a larger workspace let
cuBLASLt pick faster kernels for ``torch._scaled_mm`` at the full-size architecture's shapes?

Why: PyTorch gives cuBLASLt a 1 MiB workspace unless ``CUBLASLT_WORKSPACE_SIZE`` (KiB) says
otherwise (cuBLAS itself gets 32 MiB on Hopper), and the FP8 tier's row-scaled products go through
cuBLASLt. At one canvas (256 rows) a split of the reduction needs room for float32 partial sums
(256 × 2,816 × 4 bytes = 2.9 MB a split for the o projection), so with 1 MiB the heuristic can only
pick unsplit kernels: 2 × 22 tiles of 128 × 128 for the o projection, 44 programs on 132
multiprocessors, each streaming its whole K. The profile of a batch-1 step has the FP8 dense
products at about 14 µs each where their weights read in 3 to 6 µs.

PyTorch reads the variable when it first needs it, so each workspace size runs in a process of its
own (this script starts one per size). Per size and product: the median time of one call (a CUDA
graph of calls cycling through copies of the weight, so that it comes from memory as in the model,
not from L2), the kernels it launched, whether two calls give the same bits, and the relative error
against float32 arithmetic on the dequantized operands (one canvas only). The bf16 ``mm`` of the same
shapes beside them (cuBLAS, not cuBLASLt: the variable should not change it).

    python experiments/blas_workspace.py --sizes default,8192,32768 > experiments/results/blas_workspace_h200.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

#: (N, K) of the FP8 tier's dense products on the full-size architecture: the stacked q/k/v of a
#: sliding layer and q/k of a global one, the o projections, the dense MLP's stacked gate/up and its
#: down, the lm head, and the FP8 self-conditioning product (probabilities × embedding columns)
SHAPES = {
    "qkv_sliding": (8192, 2816), "qk_global": (9216, 2816), "o_sliding": (2816, 4096), "o_global": (2816, 8192),
    "mlp_gate_up": (4224, 2816), "mlp_down": (2816, 2112), "lm_head": (262144, 2816),
    "self_conditioning": (2816, 262144),
}
ROWS = (256, 3072)  # one canvas, twelve
COLD_BYTES = 256 * 2**20  # weight copies enough to exceed the 50 MB L2 several times


def child(size: str, rows: tuple[int, ...], calls: int) -> dict:
    """Every shape at every row count in this process (its ``CUBLASLT_WORKSPACE_SIZE`` already set)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from petri.engine.cuda.fp8_tier.fp8 import quantize_rows, scaled_matmul, scaled_matmul_reference

    torch.manual_seed(0)
    found = {"size_kib": size, "env": os.environ.get("CUBLASLT_WORKSPACE_SIZE"), "cases": []}
    for name, (n, k) in SHAPES.items():
        weight = (torch.randn(n, k, device="cuda") / k**0.5).bfloat16()
        wq, w_scale = quantize_rows(weight)
        copies = max(1, math.ceil(COLD_BYTES / wq.numel()))
        fp8_weights = [(wq.clone(), w_scale.clone()) for _ in range(copies)]
        bf16_weights = [weight.clone() for _ in range(max(1, math.ceil(COLD_BYTES / (2 * weight.numel()))))]
        for m in rows:
            x = torch.randn(m, k, device="cuda").bfloat16()
            xq, x_scale = quantize_rows(x)
            for kind in ("fp8_fast", "fp8", "bf16"):
                if kind == "bf16":
                    def call(i):
                        return x @ bf16_weights[i % len(bf16_weights)].T
                else:
                    fast = kind == "fp8_fast"

                    def call(i, fast=fast):
                        wq_i, ws_i = fp8_weights[i % len(fp8_weights)]
                        return scaled_matmul(xq, x_scale, wq_i, ws_i, torch.bfloat16, fast)
                case = {"shape": name, "n": n, "k": k, "rows": m, "kind": kind}
                try:
                    first, second = call(0), call(0)
                    case["same_bits"] = bool(torch.equal(first, second))
                    if m == rows[0] and kind != "bf16":
                        reference = scaled_matmul_reference(xq, x_scale, wq, w_scale, torch.float32)
                        case["relative_error"] = float((first.float() - reference).norm() / reference.norm())
                    case["ms"] = graphed_ms(call, calls if m * n * 2 <= 2**28 else 4)  # big outputs: a few calls
                    case["kernels"] = kernels_of(lambda: call(0))
                except Exception as error:  # record and go on
                    case["error"] = f"{type(error).__name__}: {error}"[:500]
                found["cases"].append(case)
                print(json.dumps(case), file=sys.stderr, flush=True)
        fp8_weights = bf16_weights = None  # freed before the next shape's
        torch.cuda.empty_cache()
    return found


def graphed_ms(call, calls: int, replays: int = 7) -> float:
    """Median over ``replays`` of one CUDA graph of ``calls`` calls (call i uses weight copy i), per call."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            call(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [call(i) for i in range(calls)]
    del outs
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return round(sorted(times)[len(times) // 2], 5)


def kernels_of(call) -> list[str]:
    """The CUDA kernels one call launches (names cut to 120 characters)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name[:120] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def compare(runs: list[dict]) -> list[dict]:
    """Per product, row count and kind: each size's time over the default's (the first size)."""
    base = {(c["shape"], c["rows"], c["kind"]): c.get("ms") for c in runs[0]["cases"]}
    table = []
    for run in runs[1:]:
        for c in run["cases"]:
            before = base.get((c["shape"], c["rows"], c["kind"]))
            if before and c.get("ms"):
                table.append({"size_kib": run["size_kib"], "shape": c["shape"], "rows": c["rows"], "kind": c["kind"],
                              "ms": c["ms"], "default_ms": before, "ratio": round(c["ms"] / before, 3)})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="default,8192,32768",
                        help="CUBLASLT_WORKSPACE_SIZE values in KiB, 'default' for unset; the first is the baseline")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)))
    parser.add_argument("--calls", type=int, default=24, help="calls per CUDA graph")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    rows = tuple(int(r) for r in args.rows.split(","))
    if args.child is not None:
        print(json.dumps(child(args.child, rows, args.calls)))
        return
    runs = []
    for size in args.sizes.split(","):
        env = {key: value for key, value in os.environ.items() if key != "CUBLASLT_WORKSPACE_SIZE"}
        if size != "default":
            env["CUBLASLT_WORKSPACE_SIZE"] = size
        done = subprocess.run([sys.executable, __file__, "--child", size, "--rows", args.rows, "--calls", str(args.calls)],
                              env=env, capture_output=True, text=True)
        sys.stderr.write(done.stderr[-4000:])
        if done.returncode:
            runs.append({"size_kib": size, "error": f"exit {done.returncode}"})
            continue
        runs.append(json.loads(done.stdout))
    import torch

    result = {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "torch": torch.__version__,
              "runs": runs, "against_default": compare([r for r in runs if "cases" in r])}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
