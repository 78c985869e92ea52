"""Dense products of few rows with their reduction split over programs (issue 25's split-reduction
lever, opt-in and not yet measured: ``compile_for_sampling(lm, split_products=True)`` gives the
decoder's dense linears counters (:func:`use_split_products`): in bf16 their forward, in the FP8 tier
:func:`petri.engine.fp8.scaled_matmul`, sends the products :func:`splits` names here;
``experiments/split_products.py`` measures the kernel alone).

Why: at one canvas (256 rows) most of the decoder's dense products have fewer output tiles than
the GPU has multiprocessors. An o projection (N 2,816, K 4,096) is 2 × 22 tiles of 128 × 128 on an
H200's 132 multiprocessors, so cuBLAS runs 44 programs, each walking all of K: 16.2 µs in FP8 where
its weight reads in 2.8 µs and its matrix work takes about 4 (``experiments/results/blas_workspace_h200.json``;
a larger cuBLASLt workspace, which a split needs, did not make cuBLASLt split it). Here the reduction
is cut into ``split`` slices: tiles × split programs, each walking its slice of K, so the chip is
filled and each program's serial chain of matrix steps is ``split`` times shorter.

How the slices meet, in one launch and with the same bits every time: each program writes its
float32 partial tile to a scratch buffer, then counts itself in at its tile's counter (an atomic
add, acquire-release at GPU scope, after a barrier of the whole program so that every thread's
stores come before it: CUTLASS's semaphore pattern). The program that arrives last adds the
``split`` partial tiles in slice order 0, 1, ... (never in arrival order, so which program arrives
last changes no bit), scales the sum and writes it, and puts its tile's counter back to zero for
the next call. The counters are the caller's (zeros at first; :func:`counters_for`) and every call
leaves them at zero, so no launch clears them; two calls must not use the same counters at the same
time (one stream, or one counters tensor per product).

Arithmetic: float32 sums of the matrix units' products in Triton's order, so a product equals
cuBLAS's up to float32 rounding, not bit for bit. FP8 (``SCALED``): e4m3 rows and weight with their
row scales, ``y[m, n] = bf16(Σ_k q_x[m, k] · q_w[n, k] · s_x[m] · s_w[n])`` as
:mod:`petri.engine.fp8` defines it; each ``block_k`` step's products summed by the matrix units and
the steps added in float32, or everything in the units' accumulator with ``fast_accum`` (the tier's
``fp8-fast``), as :func:`petri.engine.batch1_experts.grouped_gemm` does.

Shapes: x (M, K) e4m3 or bf16, weight (N, K) of the same dtype (K contiguous: the linear's own
layout), x_scale (M,) and weight_scale (N,) float32 when e4m3; counters (≥ tiles,) int32 where it
splits; the result (M, N) bf16.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch

from petri.engine.dependent_launch import launch_options
from petri.engine.fused_logits import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.dependent_launch import wait_then_release

#: the fewest ``block_k`` steps a slice walks: below it the partial tiles' traffic outweighs the gain
MIN_STEPS = 4


@dataclass(frozen=True)
class SplitConfig:
    """One launch of :func:`split_product`: output tiles of ``block_m`` × ``block_n``, ``block_k`` of
    the reduction per step, the reduction cut into ``split`` slices (1: an ordinary tiled product,
    no scratch), Triton's ``num_warps`` and ``num_stages``."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 128
    split: int = 1
    num_warps: int = 8
    num_stages: int = 4

    def tiles(self, rows: int, columns: int) -> int:
        """Output tiles of a (rows, columns) result."""
        return math.ceil(rows / self.block_m) * math.ceil(columns / self.block_n)

    def steps_per_slice(self, depth: int) -> int:
        """``block_k`` steps each slice of a reduction of ``depth`` walks (the last slice may walk fewer)."""
        return math.ceil(math.ceil(depth / self.block_k) / self.split)


def choose_config(rows: int, columns: int, depth: int, fp8: bool, multiprocessors: int) -> SplitConfig:
    """The configuration a (rows, depth) · (columns, depth)ᵀ product takes: 128 × 128 tiles (``block_k``
    128 in FP8, 64 in bf16) and the most slices that keep tiles × split within one program per
    multiprocessor and every slice at least :data:`MIN_STEPS` steps long (1 where the tiles alone
    fill the chip: the library's product is as good there)."""
    base = SplitConfig(block_k=128 if fp8 else 64)
    tiles = base.tiles(rows, columns)
    steps = math.ceil(depth / base.block_k)
    split = max(1, min(multiprocessors // tiles, steps // MIN_STEPS))
    return SplitConfig(block_k=base.block_k, split=split)


def counters_for(rows: int, columns: int, device, config: SplitConfig | None = None) -> torch.Tensor:
    """Zeroed counters for products of up to ``rows`` rows and ``columns`` columns (one per output
    tile of ``config``, 128 × 128 unless given); every :func:`split_product` call leaves them at zero."""
    config = config or SplitConfig()
    return torch.zeros(config.tiles(rows, columns), dtype=torch.int32, device=device)


def splits(rows: int, columns: int, depth: int, counters: torch.Tensor, fp8: bool = True) -> bool:
    """Whether a product of (rows, depth) · (columns, depth)ᵀ (e4m3 operands, else bf16) is split for
    ``counters`` of one per multiprocessor (:func:`tier_counters`): :func:`choose_config` cuts its reduction."""
    return choose_config(rows, columns, depth, fp8, counters.numel()).split > 1


def tier_counters(device) -> torch.Tensor:
    """Counters for one linear's products in a tier: one per multiprocessor of a CUDA ``device`` (none
    elsewhere, so nothing is split there). Enough for every product :func:`choose_config` splits, as
    it splits only products of at most half as many tiles as multiprocessors."""
    device = torch.device(device)
    count = _multiprocessors(device) if device.type == "cuda" else 0
    return torch.zeros(count, dtype=torch.int32, device=device)


def split_reason(device, lever: str = "split products") -> str | None:
    """``None`` when ``device`` (a ``torch.device``) runs petri's split kernels (these products, the
    split-key attention), else why not, naming the ``lever``."""
    if device.type != "cuda" or not HAVE_TRITON:
        return f"{lever} need CUDA and Triton"
    return None


def split_product_reference(x, weight, x_scale=None, weight_scale=None) -> torch.Tensor:
    """What :func:`split_product` computes, in torch: the operands in float32 (e4m3 ones times their
    row scales), their product, rounded to bf16 once."""
    xf, wf = x.float(), weight.float()
    if x_scale is not None:
        xf, wf = xf * x_scale.unsqueeze(1), wf * weight_scale.unsqueeze(1)
    return (xf @ wf.T).to(torch.bfloat16)


def split_product(x, weight, counters, x_scale=None, weight_scale=None, *, fast_accum: bool = False,
                  config: SplitConfig | None = None) -> torch.Tensor:
    """``x · weightᵀ`` (shapes in the module docstring) in one Triton launch, the reduction cut into
    ``config.split`` slices (:func:`choose_config` for the device unless given); with ``x_scale`` and
    ``weight_scale`` the operands are e4m3 and the result is the FP8 tier's scaled product. Raises
    ``ValueError`` naming the operand that does not fit."""
    rows, depth = x.shape
    columns = weight.shape[0]
    scaled = x_scale is not None
    if weight.shape[1] != depth:
        raise ValueError(f"weight: {tuple(weight.shape)} does not take rows of {depth}")
    if scaled != (weight_scale is not None):
        raise ValueError("x_scale and weight_scale: give both (e4m3 operands) or neither (bf16)")
    if x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError("x and weight: the reduction axis must be contiguous")
    if config is None:
        config = choose_config(rows, columns, depth, scaled, _multiprocessors(x.device))
    tiles = config.tiles(rows, columns)
    if config.split > 1 and (counters.dtype != torch.int32 or counters.numel() < tiles):
        raise ValueError(f"counters: {counters.numel()} {counters.dtype} for {tiles} tiles (int32 needed)")
    out = torch.empty((rows, columns), dtype=torch.bfloat16, device=x.device)
    tile = config.block_m * config.block_n
    partials = torch.empty((tiles, config.split, tile) if config.split > 1 else (1,), dtype=torch.float32,
                           device=x.device)
    _split_product_kernel[(tiles, config.split)](
        x, x_scale if scaled else x, weight, weight_scale if scaled else weight, out, partials, counters,
        rows, columns, depth, x.stride(0), weight.stride(0), out.stride(0), config.steps_per_slice(depth),
        SPLIT=config.split, SCALED=scaled, FAST_ACCUM=fast_accum, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        BLOCK_K=config.block_k, num_warps=config.num_warps, num_stages=config.num_stages, **launch_options(),
    )
    return out


@torch.library.custom_op("petri::split_scaled_product", mutates_args=())
def split_scaled_product(xq: torch.Tensor, x_scale: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor,
                         counters: torch.Tensor, fast_accum: bool) -> torch.Tensor:
    """:func:`split_product` of e4m3 operands at :func:`choose_config`'s configuration for
    ``counters.numel()`` multiprocessors (CUDA with Triton; else :func:`split_product_reference`), as
    one op opaque to ``torch.compile``. The counters go up and back to zero within the launch, so to
    torch the op only reads them; one linear's products never run at the same time."""
    if not (xq.is_cuda and HAVE_TRITON):
        return split_product_reference(xq, wq, x_scale, w_scale)
    config = choose_config(xq.shape[0], wq.shape[0], xq.shape[1], True, counters.numel())
    return split_product(xq, wq, counters, x_scale, w_scale, fast_accum=fast_accum, config=config)


@split_scaled_product.register_fake
def _(xq, x_scale, wq, w_scale, counters, fast_accum):
    return xq.new_empty((xq.shape[0], wq.shape[0]), dtype=torch.bfloat16)


@torch.library.custom_op("petri::split_bf16_product", mutates_args=())
def split_bf16_product(x: torch.Tensor, weight: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """:func:`split_product` of bf16 operands at :func:`choose_config`'s configuration (CUDA with
    Triton; else :func:`split_product_reference`), as one op opaque to ``torch.compile``; the counters
    as in :func:`split_scaled_product`."""
    if not (x.is_cuda and HAVE_TRITON):
        return split_product_reference(x, weight)
    config = choose_config(x.shape[0], weight.shape[0], x.shape[1], False, counters.numel())
    return split_product(x, weight, counters, config=config)


@split_bf16_product.register_fake
def _(x, weight, counters):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.bfloat16)


def _split_linear_forward(self, x: torch.Tensor) -> torch.Tensor:
    """A bf16 linear's forward under the lever (:func:`use_split_products`): its product through
    :func:`split_bf16_product` where :func:`splits` cuts it, else ``F.linear``. x (..., K) → (..., N)."""
    rows = x.reshape(-1, x.shape[-1])
    if (x.dtype == torch.bfloat16 and self.bias is None and rows.stride(-1) == 1
            and splits(rows.shape[0], self.out_features, self.in_features, self._petri_split_counters, fp8=False)):
        return split_bf16_product(rows, self.weight, self._petri_split_counters).view(*x.shape[:-1], self.out_features)
    return torch.nn.functional.linear(x, self.weight, self.bias)


def use_split_products(linears, embedding) -> None:
    """Give each of ``linears`` (the decoder's dense ones, :func:`petri.engine.fp8.dense_targets`) its
    counters (:func:`tier_counters`) and :func:`_split_linear_forward`; the FP8 tier's forward, when on,
    takes the counters too (:func:`petri.engine.fp8.linear_product`) and gives this forward back when
    switched off. The decoder's ``embedding`` gets counters only, for the FP8 self-conditioning product
    of the fast sampler (probabilities × its columns, 44 tiles over 262,144 at one canvas). Undone by
    :func:`drop_split_products`."""
    for module in linears:
        module._petri_split_counters = tier_counters(module.weight.device)
        module.forward = types.MethodType(_split_linear_forward, module)
    embedding._petri_split_counters = tier_counters(embedding.weight.device)


def drop_split_products(linears, embedding) -> None:
    """Undo :func:`use_split_products` (with the FP8 tier off): the linears' class forward again."""
    for module in [*linears, embedding]:
        if getattr(vars(module).get("forward"), "__func__", None) is _split_linear_forward:
            del module.forward
        vars(module).pop("_petri_split_counters", None)


def _multiprocessors(device) -> int:
    """The streaming multiprocessors of a CUDA ``device`` (132 on an H200)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


if HAVE_TRITON:

    @triton.jit
    def _scaled_store(total, out_ptr, x_scale_ptr, w_scale_ptr, offs_m, offs_n, valid_m, valid_n, stride_om,
                      SCALED: tl.constexpr):
        """Write a float32 tile (BLOCK_M, BLOCK_N) to the bf16 result, times its row and column scales (SCALED)."""
        if SCALED:
            s_x = tl.load(x_scale_ptr + offs_m, mask=valid_m, other=0.0)
            s_w = tl.load(w_scale_ptr + offs_n, mask=valid_n, other=0.0)
            total = total * s_x[:, None] * s_w[None, :]
        out = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
        tl.store(out, total.to(out_ptr.dtype.element_ty), mask=valid_m[:, None] & valid_n[None, :])

    @triton.jit
    def _split_product_kernel(x_ptr, x_scale_ptr, w_ptr, w_scale_ptr, out_ptr, partial_ptr, counter_ptr, M, N, K,
                              stride_xm, stride_wn, stride_om, STEPS_PER_SLICE, SPLIT: tl.constexpr,
                              SCALED: tl.constexpr, FAST_ACCUM: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
        """Program (tile, part): the tile's product over slice ``part`` of K; with SPLIT > 1 its
        float32 partial to ``partial_ptr[tile, part]``, and the last of the tile's programs to arrive
        (``counter_ptr[tile]``) adds the partials in slice order, writes the tile, zeroes the counter."""
        wait_then_release(PDL)
        tile = tl.program_id(0)
        part = tl.program_id(1)
        tiles_n = tl.cdiv(N, BLOCK_N)
        offs_m = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        valid_m = offs_m < M
        valid_n = offs_n < N
        x_rows = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm
        w_rows = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        k_start = part * STEPS_PER_SLICE * BLOCK_K
        k_end = tl.minimum(k_start + STEPS_PER_SLICE * BLOCK_K, K)
        for k0 in range(k_start, k_end, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            valid_k = offs_k < K
            x = tl.load(x_rows + offs_k[None, :], mask=valid_m[:, None] & valid_k[None, :], other=0.0)
            w = tl.load(w_rows + offs_k[:, None], mask=valid_k[:, None] & valid_n[None, :], other=0.0)
            if SCALED and not FAST_ACCUM:
                acc += tl.dot(x, w)
            else:
                acc = tl.dot(x, w, acc)
        if SPLIT == 1:
            _scaled_store(acc, out_ptr, x_scale_ptr, w_scale_ptr, offs_m, offs_n, valid_m, valid_n, stride_om, SCALED)
        else:
            in_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            partials = partial_ptr + tile.to(tl.int64) * (SPLIT * BLOCK_M * BLOCK_N) + in_tile
            tl.store(partials + part * (BLOCK_M * BLOCK_N), acc)
            tl.debug_barrier()  # every thread's partial stored before the count says so
            arrived = tl.atomic_add(counter_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT - 1:
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for j in tl.static_range(SPLIT):
                    total += tl.load(partials + j * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
                tl.store(counter_ptr + tile, 0)
                _scaled_store(total, out_ptr, x_scale_ptr, w_scale_ptr, offs_m, offs_n, valid_m, valid_n, stride_om,
                              SCALED)
