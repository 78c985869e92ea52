"""Issue 25: what the prompt encoder's pieces cost at the bench's prompt lengths, and what two levers
would change, each piece alone in a CUDA graph (full-size shapes, random bf16 inputs, one H200):

- attention of the sliding layers (16 query heads over 8 key/value heads, head dim 256, window
  1,024, causal): SDPA with the band mask transformers builds (what the encoder runs today) against
  PyTorch's flash kernel told the window (``aten._flash_attention_forward``'s ``window_size_left``);
- attention of the global layers (2 key/value heads, head dim 512, causal): SDPA with the causal
  flag, with a causal mask, with the mask and the key/value heads repeated for their query heads
  (what transformers does before SDPA), and as two products around a float32 softmax;
- one layer's experts (128 experts, top 8, one row per prompt token): petri's bf16 op against the
  FP8 tier's (per-row e4m3, fast accumulation), and both through petri's small-batch grouped GEMM
  (:mod:`petri.engine.cuda.fused.batch1_experts`) with blocks of 32, 64 and 128 rows and five launch
  configurations each;
- the dense products (q/k/v stacked, o, the MLP's gate/up and down) at one row per prompt token in
  bf16 against the FP8 tier's scaled products.

One JSON object on stdout; each case's median per call in µs and, for the attention, the largest
difference from float32 attention with the band mask.

    python experiments/encoder_levers.py --lengths 200,1600 > experiments/results/encoder_levers_h200.json
    bash experiments/issue25_device.sh enclevers        # the same on the device machine
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from blas_workspace import graphed_ms  # noqa: E402

from petri.engine.cuda.fp8_tier.fp8 import activation_quantized, experts_fp8, quantize_rows, scaled_matmul  # noqa: E402
from petri.engine.cuda.fused.batch1_experts import GemmConfig, align_blocks_torch, grouped_gemm  # noqa: E402
from petri.engine.cuda.fused.fused_experts import combine_rows, gated_activation, moe_experts  # noqa: E402

HIDDEN, HEADS, WINDOW = 2816, 16, 1024
EXPERTS, TOP_K, EXPERT_WIDTH, MLP_WIDTH = 128, 8, 704, 2112
#: name → (key/value heads, head dim)
ATTENTION = {"sliding": (8, 256), "global": (2, 512)}
#: name → (out, in) of the encoder's dense products
DENSE = {"qkv_sliding": (HEADS * 256 + 2 * 8 * 256, HIDDEN), "o_sliding": (HIDDEN, HEADS * 256),
         "mlp_gate_up": (2 * MLP_WIDTH, HIDDEN), "mlp_down": (HIDDEN, MLP_WIDTH)}


def band_mask(length: int, window: int | None, device) -> torch.Tensor:
    """(1, 1, P, P) bool, True where query i sees key j: j ≤ i, and i - j < window when given
    (transformers' sliding-window causal mask)."""
    i = torch.arange(length, device=device)[:, None]
    j = torch.arange(length, device=device)[None, :]
    seen = j <= i
    if window is not None:
        seen &= i - j < window
    return seen[None, None]


def reference(q, k, v, mask) -> torch.Tensor:
    """Float32 attention with ``mask`` (scale 1, as the model's), (B, H, P, D)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    scores = (q.float() @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def flash_window(q, k, v, window: int) -> torch.Tensor:
    """Causal attention over the last ``window`` keys by the flash kernel, GQA native: (B, H, P, D)."""
    length = q.shape[2]
    out = torch.ops.aten._flash_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None, length, length, 0.0, True, False,
        scale=1.0, window_size_left=window - 1, window_size_right=0)[0]
    return out.transpose(1, 2)


def products_masked(q, k, v, mask) -> torch.Tensor:
    """Attention as two batched products around a float32 softmax of the masked scores, the query
    heads folded per key/value head: (B, H, P, D)."""
    batch, heads, length, dim = q.shape
    kv_heads = k.shape[1]
    folded = q.reshape(batch, kv_heads, heads // kv_heads * length, dim)
    scores = (folded @ k.transpose(-1, -2)).float().view(batch, kv_heads, heads // kv_heads, length, -1)
    weights = torch.softmax(scores.masked_fill(~mask[:, :, None], float("-inf")), dim=-1).to(q.dtype)
    return (weights.view(batch, kv_heads, -1, k.shape[2]) @ v).view(batch, heads, length, dim)


def attention_cases(length: int) -> list[dict]:
    cases = []
    for name, (kv_heads, dim) in ATTENTION.items():
        q = torch.randn(1, HEADS, length, dim, device="cuda").bfloat16()
        k = torch.randn(1, kv_heads, length, dim, device="cuda").bfloat16() / dim ** 0.5
        v = torch.randn(1, kv_heads, length, dim, device="cuda").bfloat16()
        window = WINDOW if name == "sliding" else None
        mask = band_mask(length, window, "cuda")
        want = reference(q, k, v, mask)
        calls = {"sdpa_mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0, enable_gqa=True)}
        if name == "sliding":
            calls["flash_window"] = lambda: flash_window(q, k, v, WINDOW)
        else:
            calls["sdpa_causal"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0, enable_gqa=True)
            group = HEADS // kv_heads
            k_heads, v_heads = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            calls["sdpa_mask_repeated"] = lambda: F.scaled_dot_product_attention(q, k_heads, v_heads, attn_mask=mask, scale=1.0)
            calls["products_mask"] = lambda: products_masked(q, k, v, mask)
        for variant, call in calls.items():
            case = {"part": "attention", "layer": name, "length": length, "variant": variant}
            try:
                case["difference"] = float((call().float() - want).abs().max())
                case["us"] = round(1000 * graphed_ms(lambda _i: call(), 8), 1)
            except Exception as error:  # a kernel that refuses the shape: recorded
                case["error"] = f"{type(error).__name__}: {error}"[:300]
            cases.append(case)
    return cases


def expert_cases(length: int) -> list[dict]:
    gate_up = torch.randn(EXPERTS, 2 * EXPERT_WIDTH, HIDDEN, device="cuda").bfloat16() / HIDDEN ** 0.5
    down = torch.randn(EXPERTS, HIDDEN, EXPERT_WIDTH, device="cuda").bfloat16() / EXPERT_WIDTH ** 0.5
    hidden = torch.randn(length, HIDDEN, device="cuda").bfloat16()
    index = torch.rand(length, EXPERTS, device="cuda").topk(TOP_K, dim=-1).indices
    weights = torch.rand(length, TOP_K, device="cuda").softmax(-1)
    gate_up_q, gate_up_scale = quantize_rows(gate_up)
    down_q, down_scale = quantize_rows(down)
    calls = {
        "bf16": lambda: moe_experts(hidden, index, weights, gate_up, down, "gelu_pytorch_tanh"),
        "fp8_fast": lambda: experts_fp8(hidden, index, weights, gate_up_q, gate_up_scale, down_q, down_scale,
                                        "gelu_pytorch_tanh", True),
    }
    for block_m in (32, 64, 128):
        for config in SMALL_BATCH_CONFIGS:
            name = (f"small_batch_m{block_m}_{'swap' if config.swap else 'rows'}_n{config.block_n}_k{config.block_k}"
                    f"_w{config.num_warps}_s{config.num_stages}")
            calls["bf16_" + name] = functools.partial(small_batch, hidden, index, weights, gate_up, down, None, None,
                                                      block_m, config)
            calls["fp8_fast_" + name] = functools.partial(small_batch, hidden, index, weights, gate_up_q, down_q,
                                                          gate_up_scale, down_scale, block_m, config)
    want = calls["bf16"]().float()
    cases = []
    for variant, call in calls.items():
        case = {"part": "experts", "length": length, "variant": variant}
        try:
            got = call().float()
            case["relative_difference"] = float((got - want).norm() / want.norm())
            case["us"] = round(1000 * graphed_ms(lambda _i: call(), 4), 1)
        except Exception as error:  # a configuration Triton refuses: recorded
            case["error"] = f"{type(error).__name__}: {error}"[:300]
        cases.append(case)
    return cases


#: launch configurations of petri's small-batch grouped GEMM tried at the prompt's row counts
SMALL_BATCH_CONFIGS = [GemmConfig(swap=True, block_n=64, block_k=128, num_warps=4, num_stages=3),
                       GemmConfig(swap=False, block_n=64, block_k=64, num_warps=4, num_stages=4),
                       GemmConfig(swap=False, block_n=128, block_k=64, num_warps=4, num_stages=4),
                       GemmConfig(swap=False, block_n=128, block_k=64, num_warps=8, num_stages=4),
                       GemmConfig(swap=False, block_n=128, block_k=128, num_warps=8, num_stages=3)]


def small_batch(hidden, index, weights, gate_up, down, gate_up_scale, down_scale, block_m: int, config):
    """The experts block through petri's small-batch grouped GEMM with blocks of ``block_m`` rows and
    ``config`` for both products; in FP8 (scales given) with fast accumulation."""
    top_k = index.shape[1]
    rows, block_expert, position = align_blocks_torch(index, gate_up.shape[0], block_m)
    if gate_up_scale is None:
        projected = grouped_gemm(hidden, gate_up, rows, block_expert, top_k, True, block_m, config=config)
        activated = gated_activation(projected, "gelu_pytorch_tanh", pairs=rows)
        out = grouped_gemm(activated, down, rows, block_expert, top_k, False, block_m, config=config)
    else:
        hq, h_scale = quantize_rows(hidden)
        projected = grouped_gemm(hq, gate_up, rows, block_expert, top_k, True, block_m, a_scale=h_scale,
                                 weight_scale=gate_up_scale, fast_accum=True, config=config)
        aq, a_scale = activation_quantized(projected, "gelu_pytorch_tanh", pairs=rows)
        out = grouped_gemm(aq, down, rows, block_expert, top_k, False, block_m, a_scale=a_scale,
                           weight_scale=down_scale, fast_accum=True, config=config)
    return combine_rows(out, position, weights, torch.bfloat16)


def dense_cases(length: int) -> list[dict]:
    cases = []
    x = torch.randn(length, HIDDEN, device="cuda").bfloat16()
    for name, (out, inner) in DENSE.items():
        rows = x if inner == HIDDEN else torch.randn(length, inner, device="cuda").bfloat16()
        weight = torch.randn(out, inner, device="cuda").bfloat16() / inner ** 0.5
        wq, w_scale = quantize_rows(weight)

        def fp8(rows=rows, wq=wq, w_scale=w_scale):
            xq, x_scale = quantize_rows(rows)
            return scaled_matmul(xq, x_scale, wq, w_scale, torch.bfloat16, True)

        for variant, call in {"bf16": lambda rows=rows, weight=weight: rows @ weight.T, "fp8_fast": fp8}.items():
            cases.append({"part": "dense", "product": name, "length": length, "variant": variant,
                          "us": round(1000 * graphed_ms(lambda _i: call(), 8), 1)})
    return cases


PARTS = {"all": (attention_cases, expert_cases, dense_cases), "attention": (attention_cases,),
         "experts": (expert_cases,), "dense": (dense_cases,)}


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="200,1600")
    parser.add_argument("--parts", choices=sorted(PARTS), default="all")
    args = parser.parse_args()
    torch.manual_seed(0)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
    for length in (int(n) for n in args.lengths.split(",")):
        for part in PARTS[args.parts]:
            for case in part(length):
                result["cases"].append(case)
                print(json.dumps(case), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
