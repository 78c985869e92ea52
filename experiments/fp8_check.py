"""GPU check of the FP8 tier's pieces at the full-size architecture's shapes (issue 25), one JSON
object on stdout: for one decoder layer's experts block (128 experts top-8 of width 704, hidden
2,816; uniform random routing) at T = 256 tokens (one sample's canvas) and T = 3,072 (12 samples),
the bf16 fused experts op (``petri.engine.cuda.fused.fused_experts``) and the FP8 one (``petri.engine.cuda.fp8_tier.fp8``):
median time (``triton.testing.do_bench``), the weight bytes over that time, and the FP8 output's
relative error against bf16; the two grouped GEMMs alone; and the lm head (262,144 × 2,816) as a
bf16 ``mm`` and as FP8 ``_scaled_mm`` with the activation quantization; each FP8 GEMM also with
``use_fast_accum`` (not what the tier runs), and the row quantization by Triton and by torch ops; at
T = 256 also the small-batch experts (``petri.engine.cuda.fused.batch1_experts``, bf16).

    python experiments/fp8_check.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from petri.engine.cuda.fp8_tier.fp8 import experts_fp8, quantize_rows, quantize_rows_torch, scaled_grouped, scaled_matmul
from petri.engine.cuda.fused.batch1_experts import MAX_PAIRS, experts_small_batch  # noqa: E402
from petri.engine.cuda.fused.fused_experts import experts_triton, route  # noqa: E402


def _routing(tokens: int, experts: int, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    index = torch.rand(tokens, experts, device="cuda").argsort(-1)[:, :top_k]
    weights = torch.rand(tokens, top_k, device="cuda")
    return index, weights / weights.sum(-1, keepdim=True)


def experts_case(tokens: int, experts: int = 128, top_k: int = 8, hidden: int = 2816, width: int = 704) -> dict:
    from triton.testing import do_bench

    x = torch.randn(tokens, hidden, device="cuda").bfloat16()
    gate_up = (torch.randn(experts, 2 * width, hidden, device="cuda") / hidden**0.5).bfloat16()
    down = (torch.randn(experts, hidden, width, device="cuda") / width**0.5).bfloat16()
    index, weights = _routing(tokens, experts, top_k)
    gq, gs = quantize_rows(gate_up)
    dq, ds = quantize_rows(down)
    act = "gelu_pytorch_tanh"
    bf16 = experts_triton(x, index, weights, gate_up, down, act)
    fp8 = experts_fp8(x, index, weights, gq, gs, dq, ds, act)
    weight_bytes = {"bf16": 2 * (gate_up.numel() + down.numel()), "fp8": gq.numel() + dq.numel()}
    times = {
        "bf16_op_ms": do_bench(lambda: experts_triton(x, index, weights, gate_up, down, act), return_mode="median"),
        "fp8_op_ms": do_bench(lambda: experts_fp8(x, index, weights, gq, gs, dq, ds, act), return_mode="median"),
    }
    # the grouped GEMMs alone, on rows already sorted by expert
    order, _, offsets = route(index, experts)
    rows = x.index_select(0, torch.div(order, top_k, rounding_mode="floor"))
    mid = torch.randn(rows.shape[0], width, device="cuda").bfloat16()
    rq, rs = quantize_rows(rows)
    mq, ms = quantize_rows(mid)
    times["bf16_gemms_ms"] = do_bench(lambda: (torch._grouped_mm(rows, gate_up.transpose(-2, -1), offs=offsets),
                                               torch._grouped_mm(mid, down.transpose(-2, -1), offs=offsets)), return_mode="median")
    times["fp8_gemms_ms"] = do_bench(lambda: (scaled_grouped(rq, rs, gq, gs, offsets), scaled_grouped(mq, ms, dq, ds, offsets)),
                                     return_mode="median")
    times["fp8_gemms_fast_accum_ms"] = do_bench(lambda: (scaled_grouped(rq, rs, gq, gs, offsets, fast_accum=True),
                                                         scaled_grouped(mq, ms, dq, ds, offsets, fast_accum=True)), return_mode="median")
    if tokens * top_k <= MAX_PAIRS:  # issue 25's batch-1 lever, bf16
        small = experts_small_batch(x, index, weights, gate_up, down, act)
        times["small_batch_op_ms"] = do_bench(lambda: experts_small_batch(x, index, weights, gate_up, down, act),
                                              return_mode="median")
        small_error = float((small.float() - bf16.float()).norm() / bf16.float().norm())
    times["quantize_rows_triton_ms"] = do_bench(lambda: quantize_rows(x), return_mode="median")
    times["quantize_rows_torch_ms"] = do_bench(lambda: quantize_rows_torch(x), return_mode="median")
    out = {"tokens": tokens, **{k: round(v, 4) for k, v in times.items()}}
    out["bf16_gemms_tb_s"] = round(weight_bytes["bf16"] / times["bf16_gemms_ms"] / 1e9, 2)
    out["fp8_gemms_tb_s"] = round(weight_bytes["fp8"] / times["fp8_gemms_ms"] / 1e9, 2)
    out["fp8_relative_error_vs_bf16"] = round(float((fp8.float() - bf16.float()).norm() / bf16.float().norm()), 5)
    out["fp8_finite"] = bool(torch.isfinite(fp8).all())
    if "small_batch_op_ms" in times:
        out["small_batch_relative_error_vs_bf16_op"] = round(small_error, 6)
        out["small_batch_gemms_and_glue_tb_s"] = round(weight_bytes["bf16"] / times["small_batch_op_ms"] / 1e9, 2)
    return out


def lm_head_case(tokens: int, vocab: int = 262_144, hidden: int = 2816) -> dict:
    from triton.testing import do_bench

    x = torch.randn(tokens, hidden, device="cuda").bfloat16()
    w = (torch.randn(vocab, hidden, device="cuda") / hidden**0.5).bfloat16()
    wq, ws = quantize_rows(w)
    ref = x @ w.T
    got = scaled_matmul(*quantize_rows(x), wq, ws)  # the tier's linear: the rows quantized, then the product
    bf16_ms = do_bench(lambda: x @ w.T, return_mode="median")
    fp8_ms = do_bench(lambda: scaled_matmul(*quantize_rows(x), wq, ws), return_mode="median")
    xq, xs = quantize_rows(x)
    fast_ms = do_bench(lambda: scaled_matmul(xq, xs, wq, ws, fast_accum=True), return_mode="median")
    plain_ms = do_bench(lambda: scaled_matmul(xq, xs, wq, ws), return_mode="median")
    return {"tokens": tokens, "bf16_ms": round(bf16_ms, 4), "fp8_ms": round(fp8_ms, 4),
            "fp8_gemm_only_ms": round(plain_ms, 4), "fp8_gemm_fast_accum_ms": round(fast_ms, 4),
            "bf16_tb_s": round(2 * w.numel() / bf16_ms / 1e9, 2), "fp8_tb_s": round(w.numel() / fp8_ms / 1e9, 2),
            "fp8_relative_error_vs_bf16": round(float((got.float() - ref.float()).norm() / ref.float().norm()), 5)}


def main() -> None:
    torch.manual_seed(0)
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "experts": [experts_case(t) for t in (256, 3072)], "lm_head": [lm_head_case(t) for t in (256, 3072)]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
