"""Issue 25: what programmatic dependent launch (PDL, Hopper's ``griddepcontrol``) saves between the
kernels of a step, measured on chains of kernels in one CUDA graph (one H200):

- ``small``: a chain of row-norm kernels over one canvas, (256, 2816) bf16, each reading the one
  before's output (the size of the layer's norms, routers and combines, of which a one-sample step
  launches several hundred);
- ``stream``: a small kernel, then a kernel that streams a weight of one layer's FP8 down projection
  (128 × 2816 × 704 bytes, 254 MB) against one of its rows, alternately: the boundary before each of
  the experts' grouped GEMMs. ``prefetch`` loads the program's first weight tile before it waits for
  the kernel before (the weight does not depend on it);
- ``inductor``: a chain of small pointwise and reduction ops compiled by Inductor with and without
  its ``triton.enable_pdl`` (where this torch has it).

Each chain without PDL, with PDL (every kernel waits for the one before first thing, then lets its
dependents launch), and the stream chain with the prefetch; µs per kernel (median of the graph's
replays). Also the versions and whether this torch's Inductor has the option.

    python experiments/dependent_launch_chains.py > experiments/results/dependent_launch_chains_h200.json
    bash experiments/issue25_device.sh pdl      # the same on the device machine
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blas_workspace import graphed_ms  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

ROWS, HIDDEN = 256, 2816
DOWN_N, DOWN_K, EXPERTS = 2816, 704, 128


@triton.jit
def _norm_kernel(x_ptr, w_ptr, out_ptr, H: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """out[r] = x[r] / rms(x[r]) · w: one program a row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    valid = cols < H
    w = tl.load(w_ptr + cols, mask=valid, other=0.0).to(tl.float32)  # a weight: no wait needed
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    x = tl.load(x_ptr + row * H + cols, mask=valid, other=0.0).to(tl.float32)
    scale = tl.rsqrt(tl.sum(x * x, 0) / H + 1e-6)
    tl.store(out_ptr + row * H + cols, (x * scale * w).to(out_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _stream_kernel(w_ptr, x_ptr, out_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   PDL: tl.constexpr, PREFETCH: tl.constexpr):
    """out[n] = Σ_k w[n, k] · x[k] over an e4m3 weight (N, K), K contiguous: BLOCK_N rows a program."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    valid_n = rows < N
    cols = tl.arange(0, BLOCK_K)
    tile = w_ptr + rows[:, None].to(tl.int64) * K + cols[None, :]
    in_tile = valid_n[:, None] & (cols[None, :] < K)
    if PREFETCH:
        first = tl.load(tile, mask=in_tile, other=0.0)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if not PREFETCH:
        first = tl.load(tile, mask=in_tile, other=0.0)
    x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    acc = tl.sum(first.to(tl.float32) * x[None, :], 1)
    for k0 in range(BLOCK_K, K, BLOCK_K):
        offs = k0 + cols
        w = tl.load(w_ptr + rows[:, None].to(tl.int64) * K + offs[None, :], mask=valid_n[:, None] & (offs[None, :] < K),
                    other=0.0)
        x = tl.load(x_ptr + offs, mask=offs < K, other=0.0).to(tl.float32)
        acc += tl.sum(w.to(tl.float32) * x[None, :], 1)
    tl.store(out_ptr + rows, acc, mask=valid_n)


def norm(x, w, out, pdl: bool):
    _norm_kernel[(x.shape[0],)](x, w, out, H=x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), PDL=pdl,
                                launch_pdl=pdl, num_warps=8)
    return out


def stream(weight, x, out, pdl: bool, prefetch: bool):
    n = weight.shape[0]
    block_n = 64
    _stream_kernel[(triton.cdiv(n, block_n),)](weight, x, out, n, K=weight.shape[1], BLOCK_N=block_n, BLOCK_K=256,
                                               PDL=pdl, PREFETCH=prefetch, launch_pdl=pdl, num_warps=4)
    return out


def small_chain(pdl: bool, length: int = 64) -> float:
    x = torch.randn(ROWS, HIDDEN, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    w = torch.rand(HIDDEN, device="cuda", dtype=torch.bfloat16)

    def call(_i):
        for _ in range(length // 2):
            norm(x, w, y, pdl)
            norm(y, w, x, pdl)

    return round(1000 * graphed_ms(call, 1) / length, 2)


def stream_chain(pdl: bool, prefetch: bool, pairs: int = 8) -> dict:
    weights = [torch.randn(EXPERTS * DOWN_N, DOWN_K, device="cuda").to(torch.float8_e4m3fn) for _ in range(2)]
    x = torch.randn(ROWS, HIDDEN, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    w = torch.rand(HIDDEN, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(EXPERTS * DOWN_N, device="cuda", dtype=torch.float32)

    def call(_i):
        for index in range(pairs):
            norm(x, w, y, pdl)
            stream(weights[index % 2], y.view(-1), out, pdl, prefetch)

    pair_us = 1000 * graphed_ms(call, 1) / pairs
    alone = 1000 * graphed_ms(lambda _i: [stream(weights[i % 2], y.view(-1), out, False, False) for i in range(pairs)], 1) / pairs
    gigabytes = weights[0].numel() / 1e9
    return {"pair_us": round(pair_us, 2), "stream_alone_us": round(alone, 2),
            "stream_alone_tb_s": round(gigabytes / (alone * 1e-6) / 1e3, 3)}


def inductor_chain(pdl: bool, length: int = 24) -> float | None:
    import torch._inductor.config as config

    if not hasattr(config.triton, "enable_pdl"):
        return None
    import torch._dynamo

    torch._dynamo.reset()

    def body(x, w):
        for _ in range(length):
            x = (x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w).relu() + 0.5
            x = x.contiguous()
        return x

    compiled = torch.compile(body, options={"triton.enable_pdl": pdl, "max_autotune": False})
    x = torch.randn(ROWS, HIDDEN, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(HIDDEN, device="cuda", dtype=torch.bfloat16)
    compiled(x, w)
    return round(1000 * graphed_ms(lambda _i: compiled(x, w), 1), 2)


def main() -> None:
    import torch._inductor.config as config

    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "cuda": torch.version.cuda, "inductor_enable_pdl": hasattr(config.triton, "enable_pdl")}
    torch.manual_seed(0)
    result["small_us_per_kernel"] = {"off": small_chain(False), "pdl": small_chain(True)}
    result["stream_pair"] = {"off": stream_chain(False, False), "pdl": stream_chain(True, False),
                             "pdl_prefetch": stream_chain(True, True)}
    result["inductor_us_per_chain"] = {"off": inductor_chain(False), "pdl": inductor_chain(True)}
    x = torch.randn(ROWS, HIDDEN, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(HIDDEN, device="cuda", dtype=torch.bfloat16)
    reference = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    result["norm_max_error"] = float((norm(x, w, torch.empty_like(x), True).float() - reference).abs().max())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
