"""Issue 25's batch-1 experts on the GPU: launch configurations of the small-batch grouped GEMM
(``petri.engine.cuda.fused.batch1_experts.grouped_gemm``) at the full-size architecture's one-sample shapes,
against the memory floor and the library GEMMs the tiers run today. One JSON object on stdout.

One decoder layer's experts: 128 experts, top-8 of width 704, hidden 2,816, T = 256 tokens (one
canvas), uniform random routing (what random weights give). For the gate/up GEMM (gathers the
hidden rows, N = 1,408, K = 2,816) and the down GEMM (N = 2,816, K = 704), in bf16 and in FP8
(e4m3 with the FP8 tier's row scales), every configuration of ``CONFIGS``: median time
(``triton.testing.do_bench``), the bytes it must read (the weights of the experts in use and the
rows) over that time, and its relative error against the float32 reference (bf16:
``grouped_gemm_reference``; FP8: the dequantized reference). Beside them: the read ceiling (a
``torch.sum`` over a 1.5 GB buffer), ``torch._grouped_mm`` / ``torch._scaled_grouped_mm`` on the same
rows (the tiers' GEMMs), and the whole experts block with the best configurations against the
fused experts op and the FP8 tier's op.

``--dense``: the decoder's linears at one canvas instead (``DENSE_SHAPES``: attention q / k / o,
the dense MLP, the lm head), each as a grouped GEMM of one expert, in bf16 and FP8, against
``torch.mm`` / ``torch._scaled_mm``: whether the small-batch kernel can take them too (its first,
unswept try lost to ``torch._scaled_mm``: docs/performance-log.md, "Levers not taken").

The configurations are compiled first by ``--jobs`` processes in parallel (Triton's disk cache),
then timed one by one in this process.

    python experiments/moe_sweep.py --jobs 8 > experiments/results/moe_sweep_h200.json
    python experiments/moe_sweep.py --jobs 8 --dense > experiments/results/moe_sweep_dense_h200.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from petri.engine.cuda.fp8_tier.fp8 import FP8, dequantize, experts_fp8, experts_fp8_small_batch, quantize_rows, scaled_matmul  # noqa: E402
from petri.engine.cuda.fused.batch1_experts import GemmConfig, align_blocks, experts_small_batch, grouped_gemm, grouped_gemm_reference  # noqa: E402
from petri.engine.cuda.fused.fused_experts import experts_triton, route  # noqa: E402

EXPERTS, TOP_K, HIDDEN, WIDTH, TOKENS = 128, 8, 2816, 704, 256


def configs() -> list[tuple[int, GemmConfig]]:
    """(BLOCK_M, configuration) pairs swept, for each GEMM and precision."""
    found = [(32, GemmConfig(False, bn, bk, 4, st)) for bn, bk, st in itertools.product((32, 64, 128), (64, 128, 256), (3, 5))]
    found += [(bm, GemmConfig(True, bn, bk, 4, st)) for bm, bn, bk, st in itertools.product((16, 32), (64, 128), (128, 256), (3, 5))]
    found += [(32, GemmConfig(True, 128, bk, 8, st)) for bk, st in itertools.product((128, 256), (3, 5))]
    return found


def problem(seed: int = 0) -> dict:
    """Routing, rows and weights of one layer (bf16 and FP8), on the GPU."""
    torch.manual_seed(seed)
    index = torch.rand(TOKENS, EXPERTS, device="cuda").argsort(-1)[:, :TOP_K]
    weights = torch.rand(TOKENS, TOP_K, device="cuda")
    hidden = torch.randn(TOKENS, HIDDEN, device="cuda").bfloat16()
    gate_up = (torch.randn(EXPERTS, 2 * WIDTH, HIDDEN, device="cuda") / HIDDEN**0.5).bfloat16()
    down = (torch.randn(EXPERTS, HIDDEN, WIDTH, device="cuda") / WIDTH**0.5).bfloat16()
    return {"index": index, "weights": weights / weights.sum(-1, keepdim=True), "hidden": hidden, "gate_up": gate_up,
            "down": down, "gate_up_q": quantize_rows(gate_up), "down_q": quantize_rows(down), "hidden_q": quantize_rows(hidden)}


def operands(p: dict, gemm: str, precision: str, block_m: int) -> dict:
    """The keyword arguments of one ``grouped_gemm`` call (and the reference's), for ``gemm`` in
    gate_up / down and ``precision`` in bf16 / fp8."""
    rows, block_expert, _ = align_blocks(p["index"], EXPERTS, block_m)
    gather = gemm == "gate_up"
    if gather:
        a = p["hidden_q"] if precision == "fp8" else (p["hidden"], None)
    else:
        torch.manual_seed(1)
        x = (torch.randn(rows.shape[0], WIDTH, device="cuda")).bfloat16()
        a = quantize_rows(x) if precision == "fp8" else (x, None)
    w = p[f"{gemm}_q"] if precision == "fp8" else (p[gemm], None)
    return {"a": a[0], "weight": w[0], "a_scale": a[1], "weight_scale": w[1], "rows": rows,
            "block_expert": block_expert, "gather": gather, "block_m": block_m, "top_k": TOP_K}


def call(ops: dict, config: GemmConfig | None):
    return grouped_gemm(ops["a"], ops["weight"], ops["rows"], ops["block_expert"], ops["top_k"], ops["gather"], ops["block_m"],
                        a_scale=ops["a_scale"], weight_scale=ops["weight_scale"], config=config)


def reference(ops: dict) -> torch.Tensor:
    a, w = ops["a"], ops["weight"]
    if ops["a_scale"] is not None:
        a, w = dequantize(a, ops["a_scale"]), dequantize(w, ops["weight_scale"])
    return grouped_gemm_reference(a.float(), w.float(), ops["rows"], ops["block_expert"], ops["top_k"], ops["gather"],
                                  ops["block_m"]).float()


def bytes_read(ops: dict) -> int:
    """The weights of the experts that have rows, and each used row of ``a`` once."""
    used_experts = torch.unique(ops["block_expert"][ops["block_expert"] >= 0]).numel()
    w = ops["weight"]
    rows = TOKENS if ops["gather"] else int((ops["rows"] >= 0).sum())
    return used_experts * w[0].numel() * w.element_size() + rows * ops["a"].shape[1] * ops["a"].element_size()


#: ``--dense``: the decoder's linears at one canvas (N, K): attention q / k (sliding layers) / o, the
#: dense MLP's gate (= up) and down, the lm head
DENSE_SHAPES = {"q": (4096, 2816), "k": (2048, 2816), "o": (2816, 4096), "mlp_gate": (2112, 2816),
                "mlp_down": (2816, 2112), "lm_head": (262144, 2816)}


def dense_configs() -> list[tuple[int, GemmConfig]]:
    """(BLOCK_M, configuration) pairs swept for ``--dense`` (one weight: each block of rows re-reads it)."""
    found = [(bm, GemmConfig(True, bn, bk, 4, st)) for bm, bn, bk, st in itertools.product((32, 64, 128), (64, 128), (128, 256), (3, 4))]
    return found + [(bm, GemmConfig(False, bn, 128, 4, st)) for bm, bn, st in itertools.product((64, 128), (64, 128), (3, 4))]


def dense_operands(name: str, precision: str, block_m: int) -> dict:
    """One linear as a grouped GEMM of one expert (every row routed to it), for ``call``."""
    n, k = DENSE_SHAPES[name]
    torch.manual_seed(2)
    x = torch.randn(TOKENS, k, device="cuda").bfloat16()
    w = (torch.randn(1, n, k, device="cuda") / k**0.5).bfloat16()
    rows, block_expert, _ = align_blocks(torch.zeros(TOKENS, 1, dtype=torch.long, device="cuda"), 1, block_m)
    (a, a_scale), (wq, w_scale) = (quantize_rows(x), quantize_rows(w)) if precision == "fp8" else ((x, None), (w, None))
    return {"a": a, "weight": wq, "a_scale": a_scale, "weight_scale": w_scale, "rows": rows, "block_expert": block_expert,
            "gather": True, "block_m": block_m, "top_k": 1}


def dense_library(ops: dict):
    """What the tiers run for the same linear: ``torch.mm`` in bf16, ``torch._scaled_mm`` in FP8."""
    x, w = ops["a"], ops["weight"][0]
    if ops["a_scale"] is None:
        return lambda: x @ w.T
    return lambda: scaled_matmul(x, ops["a_scale"], w, ops["weight_scale"][0])


def compile_shard(shard: int, jobs: int, dense: bool = False) -> None:
    p = None if dense else problem()
    if dense:
        cases = [("q", pr, bm, c) for pr in ("bf16", "fp8") for bm, c in dense_configs()]
    else:
        cases = [(g, pr, bm, c) for g in ("gate_up", "down") for pr in ("bf16", "fp8") for bm, c in configs()]
    for g, pr, bm, c in cases[shard::jobs]:
        try:
            call(dense_operands(g, pr, bm) if dense else operands(p, g, pr, bm), c)
        except Exception as error:  # noqa: BLE001 - the timing pass records it
            print(f"{g}/{pr} {bm} {c}: {type(error).__name__}: {str(error)[:200]}", file=sys.stderr)
    torch.cuda.synchronize()


def sweep() -> dict:
    from triton.testing import do_bench

    p = problem()
    out: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": {
        "experts": EXPERTS, "top_k": TOP_K, "hidden": HIDDEN, "width": WIDTH, "tokens": TOKENS}}
    buffer = torch.randn(760 * 2**20, device="cuda").bfloat16()  # 1.59 GB, about one layer's experts
    ms = do_bench(lambda: buffer.sum(), warmup=25, rep=200, return_mode="median")  # noqa: F821 - timed before the del below
    out["read_ceiling_tb_s"] = round(buffer.numel() * 2 / ms / 1e9, 3)
    del buffer
    best: dict = {}
    rows_out = []
    for gemm, precision in itertools.product(("gate_up", "down"), ("bf16", "fp8")):
        for block_m, config in configs():
            ops = operands(p, gemm, precision, block_m)
            used = (ops["rows"] >= 0).nonzero().squeeze(1)
            try:
                got = call(ops, config).float()
            except Exception as error:  # noqa: BLE001 - a configuration the compiler refuses
                rows_out.append({"gemm": gemm, "precision": precision, "block_m": block_m, **vars(config),
                                 "error": f"{type(error).__name__}: {str(error)[:300]}"})
                continue
            ref = reference(ops)
            error = float((got[used] - ref[used]).norm() / ref[used].norm())
            ms = do_bench(lambda: call(ops, config), warmup=10, rep=60, return_mode="median")
            row = {"gemm": gemm, "precision": precision, "block_m": block_m, **vars(config), "ms": round(ms, 4),
                   "tb_s": round(bytes_read(ops) / ms / 1e9, 3), "relative_error": round(error, 5)}
            rows_out.append(row)
            key = (gemm, precision)
            if error < 2e-2 and (key not in best or ms < best[key][2]):
                best[key] = (block_m, config, ms)
    out["configs"] = rows_out
    out["best"] = {f"{g}/{pr}": {"block_m": bm, **vars(c), "ms": round(ms, 4)} for (g, pr), (bm, c, ms) in best.items()}
    out["library"] = library_gemms(p)
    out["block"] = whole_block(p, best)
    return out


def dense_sweep() -> dict:
    """``--dense``: every shape of :data:`DENSE_SHAPES` × precision × :func:`dense_configs`, and the library GEMM."""
    from triton.testing import do_bench

    out: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "tokens": TOKENS,
                 "shapes": DENSE_SHAPES, "configs": [], "library_ms": {}, "best": {}}
    for name, precision in itertools.product(DENSE_SHAPES, ("bf16", "fp8")):
        ops = dense_operands(name, precision, 64)
        out["library_ms"][f"{name}/{precision}"] = round(do_bench(dense_library(ops), warmup=10, rep=60, return_mode="median"), 4)
        for block_m, config in dense_configs():
            ops = dense_operands(name, precision, block_m)
            row = {"linear": name, "precision": precision, "block_m": block_m, **vars(config)}
            try:
                got = call(ops, config).float()
            except Exception as error:  # noqa: BLE001 - a configuration the compiler refuses
                out["configs"].append({**row, "error": f"{type(error).__name__}: {str(error)[:300]}"})
                continue
            used = (ops["rows"] >= 0).nonzero().squeeze(1)
            ref = reference(ops)
            ms = do_bench(lambda: call(ops, config), warmup=10, rep=60, return_mode="median")  # noqa: F821 - before the del
            error = float((got[used] - ref[used]).norm() / ref[used].norm())
            out["configs"].append({**row, "ms": round(ms, 4), "tb_s": round(bytes_read(ops) / ms / 1e9, 3),
                                   "relative_error": round(error, 5)})
            key = f"{name}/{precision}"
            if error < 2e-2 and (key not in out["best"] or ms < out["best"][key]["ms"]):
                out["best"][key] = {"block_m": block_m, **vars(config), "ms": round(ms, 4)}
        del ops
        torch.cuda.empty_cache()
    return out


def library_gemms(p: dict) -> dict:
    """``torch._grouped_mm`` and ``torch._scaled_grouped_mm`` on the rows sorted by expert (no padding)."""
    from triton.testing import do_bench

    order, _, offsets = route(p["index"], EXPERTS)
    source = torch.div(order, TOP_K, rounding_mode="floor")
    rows = p["hidden"].index_select(0, source)
    mid = torch.randn(rows.shape[0], WIDTH, device="cuda").bfloat16()
    hq, hs = p["hidden_q"]
    rq, rs = hq.view(torch.uint8).index_select(0, source).view(FP8), hs.index_select(0, source)
    mq, ms_ = quantize_rows(mid)
    cases = {
        "gate_up/bf16": lambda: torch._grouped_mm(rows, p["gate_up"].transpose(-2, -1), offs=offsets),
        "down/bf16": lambda: torch._grouped_mm(mid, p["down"].transpose(-2, -1), offs=offsets),
        "gate_up/fp8": lambda: torch._scaled_grouped_mm(rq, p["gate_up_q"][0].transpose(-2, -1), rs, p["gate_up_q"][1],
                                                        offs=offsets, out_dtype=torch.bfloat16),
        "down/fp8": lambda: torch._scaled_grouped_mm(mq, p["down_q"][0].transpose(-2, -1), ms_, p["down_q"][1],
                                                     offs=offsets, out_dtype=torch.bfloat16),
    }
    return {name: round(do_bench(fn, warmup=10, rep=60, return_mode="median"), 4) for name, fn in cases.items()}


def whole_block(p: dict, best: dict) -> dict:
    """The experts block: the fused op and the FP8 tier's op (what the tiers run), the small-batch
    block with the default configurations and with the best ones found here (its BLOCK_M is the
    module's, so a best found at another BLOCK_M is left out)."""
    from triton.testing import do_bench

    from petri.engine.cuda.fused.batch1_experts import BLOCK_M

    args = (p["hidden"], p["index"], p["weights"])
    fp8_args = (*args, *p["gate_up_q"], *p["down_q"], "gelu_pytorch_tanh")

    def chosen(precision):
        picked = [best.get((g, precision), (None, None, None)) for g in ("gate_up", "down")]
        return tuple(c if bm == BLOCK_M else None for bm, c, _ in picked)

    cases = {
        "fused_op_bf16": lambda: experts_triton(*args, p["gate_up"], p["down"], "gelu_pytorch_tanh"),
        "small_batch_bf16_default": lambda: experts_small_batch(*args, p["gate_up"], p["down"], "gelu_pytorch_tanh"),
        "small_batch_bf16_best": lambda: experts_small_batch(*args, p["gate_up"], p["down"], "gelu_pytorch_tanh",
                                                             configs=chosen("bf16")),
        "fp8_op": lambda: experts_fp8(*fp8_args),
        "fp8_op_fast_accum": lambda: experts_fp8(*fp8_args, fast_accum=True),
        "small_batch_fp8_default": lambda: experts_fp8_small_batch(*fp8_args),
        "small_batch_fp8_best": lambda: experts_fp8_small_batch(*fp8_args, configs=chosen("fp8")),
        "small_batch_fp8_fast_best": lambda: experts_fp8_small_batch(*fp8_args, fast_accum=True, configs=chosen("fp8")),
    }
    reference = experts_triton(*args, p["gate_up"], p["down"], "gelu_pytorch_tanh").float()
    result = {}
    for name, fn in cases.items():
        got = fn().float()
        result[name] = {"ms": round(do_bench(fn, warmup=10, rep=100, return_mode="median"), 4),
                        "relative_error_vs_bf16_op": round(float((got - reference).norm() / reference.norm()), 5)}
    weight_bytes = (p["gate_up"].numel() + p["down"].numel()) * 2
    result["floor_ms_bf16_weights"] = round(weight_bytes / 4.17e12 * 1e3, 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8, help="processes that compile the configurations first")
    parser.add_argument("--dense", action="store_true",
                        help="the decoder's linears (one weight each) instead of one layer's experts")
    parser.add_argument("--compile-shard", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile_shard is not None:
        compile_shard(args.compile_shard, args.jobs, args.dense)
        return
    began = time.perf_counter()
    if args.jobs > 1:
        workers = [subprocess.Popen([sys.executable, __file__, "--jobs", str(args.jobs), "--compile-shard", str(i)]
                                    + (["--dense"] if args.dense else [])) for i in range(args.jobs)]
        codes = [w.wait() for w in workers]
        print(f"compiled in {time.perf_counter() - began:.1f} s, exit codes {codes}", file=sys.stderr)
    result = dense_sweep() if args.dense else sweep()
    result["seconds"] = round(time.perf_counter() - began, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
