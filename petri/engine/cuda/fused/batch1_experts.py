"""Experts for few tokens per expert (issue 25's batch-1 lever): one Triton grouped GEMM that
gathers its own rows, instead of the gather kernel plus ``torch._grouped_mm``.

Why: with one sample (256 canvas tokens × top-8 of 128 experts, about 16 rows per expert) a
decoder layer's experts read all their weights (1.52 GB in bf16) to multiply a handful of rows, so
the block is bound by memory; ``torch._grouped_mm`` reached about 2.8 TB/s there on an H200
(``experiments/fp8_check.py``), against a 4.15 TB/s read ceiling. This kernel reaches 4.0 TB/s on
the gate/up GEMM and 3.6 on the down GEMM (``experiments/moe_sweep.py``,
``experiments/results/moe_sweep_h200.json``).

Layout (vLLM's fused-MoE idea): the (token, k) pairs grouped by expert, each expert's run padded
to a multiple of ``BLOCK_M`` rows, so every block of ``BLOCK_M`` rows belongs to one expert
(:func:`align_blocks`: one Triton program on CUDA). Each program multiplies one block of rows by
one ``BLOCK_N`` slice of its expert's weight (read straight from the (E, N, K) weight, K
contiguous), loading the rows of the first GEMM from the hidden states by token id; padded rows are
zeros and are never combined. Two forms (:class:`GemmConfig`): the rows as the matrix units' left
operand, or the weight slice ("swap": with few rows the weight's N axis fills the units' M side).
The FP8 tier's scaled form takes e4m3 rows and weights with their row scales
(:func:`petri.engine.cuda.fp8_tier.fp8.experts_fp8_small_batch`).

The products are float32 sums of bf16 products in Triton's order, not cuBLAS/CUTLASS's, so the
block equals :func:`petri.engine.cuda.fused.fused_experts.experts_reference` up to float rounding (checked on
the GPU in ``tests/engine/cuda/test_batch1_experts.py``). The compiled tier installs it by default
(:func:`petri.engine.cuda.compiled_tier.compile_regions`), for calls with T·K ≤ :data:`MAX_PAIRS`
(:func:`use_small_batch_experts`); sampler names say ``+small-batch`` where it ran.

Shapes: hidden (T, H), top_k_index (T, K), top_k_weights (T, K); gate_up (E, 2·I, H), down (E, H, I).
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import torch

from petri.engine.cuda.fused.fused_experts import _fused_forward, combine_rows, experts_op, gated_activation
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

#: the most (token, k) pairs a call sends here (more: the grouped GEMMs fill the chip better)
MAX_PAIRS = 4096
BLOCK_M = 32


def align_blocks(top_k_index: torch.Tensor, num_experts: int, block_m: int = BLOCK_M):
    """Pad each expert's run of sorted pairs to a multiple of ``block_m`` rows, without a host sync:
    one Triton launch on CUDA (:func:`align_blocks_triton`), else :func:`align_blocks_torch`."""
    if top_k_index.is_cuda and HAVE_TRITON and top_k_index.numel() <= MAX_PAIRS and num_experts <= 256:
        return align_blocks_triton(top_k_index, num_experts, block_m)
    return align_blocks_torch(top_k_index, num_experts, block_m)


def align_blocks_torch(top_k_index: torch.Tensor, num_experts: int, block_m: int = BLOCK_M):
    """:func:`align_blocks` by torch ops (any device), each expert's pairs in pair order.

    Returns ``rows`` (R,) int32: for each padded row the pair id (token·K + k) or -1 for padding;
    ``block_expert`` (R / block_m,) int32: each block's expert, -1 past the last used block;
    ``position`` (T·K,) int64: each pair's padded row. R = T·K + E·(block_m − 1) rounded up to
    ``block_m``, a bound on the padded length whatever the routing."""
    pairs = top_k_index.numel()
    expert_of_pair = top_k_index.reshape(-1).long()
    order = torch.sort(expert_of_pair.to(torch.uint8) if num_experts <= 256 else expert_of_pair, stable=True)[1]
    sorted_experts = expert_of_pair[order]
    counts = torch.zeros(num_experts, dtype=torch.long, device=top_k_index.device).scatter_add_(
        0, expert_of_pair, torch.ones_like(expert_of_pair))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_ends = torch.cumsum(padded, 0)
    starts = torch.cumsum(counts, 0) - counts
    total = padded_rows(pairs, num_experts, block_m)
    dest = (padded_ends - padded)[sorted_experts] + torch.arange(pairs, device=order.device) - starts[sorted_experts]
    rows = torch.full((total,), -1, dtype=torch.int32, device=order.device)
    rows[dest] = order.to(torch.int32)
    position = torch.empty(pairs, dtype=torch.long, device=order.device)
    position[order] = dest
    block_starts = torch.arange(0, total, block_m, device=order.device)
    block_expert = torch.searchsorted(padded_ends, block_starts, right=True).to(torch.int32)
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return rows, block_expert, position


def padded_rows(pairs: int, num_experts: int, block_m: int) -> int:
    """R: T·K + E·(block_m − 1) rounded up to ``block_m``, a bound on the padded length whatever the routing."""
    total = pairs + num_experts * (block_m - 1)
    return (total + block_m - 1) // block_m * block_m


def align_blocks_triton(top_k_index: torch.Tensor, num_experts: int, block_m: int = BLOCK_M, num_warps: int = 16):
    """:func:`align_blocks` in one Triton program (CUDA; T·K ≤ :data:`MAX_PAIRS`, E ≤ 256) instead of
    about fifteen torch launches: each pair's rank within its expert comes from an atomic counter, so
    the pairs of one expert land in its rows in no fixed order. That changes no number: the grouped
    GEMM computes each row on its own and the combine finds each pair by ``position``
    (``tests/engine/cuda/test_batch1_experts.py`` checks the experts block bit-equal to the torch alignment's)."""
    pairs = top_k_index.numel()
    total = padded_rows(pairs, num_experts, block_m)
    device = top_k_index.device
    rows = torch.empty(total, dtype=torch.int32, device=device)
    block_expert = torch.empty(total // block_m, dtype=torch.int32, device=device)
    position = torch.empty(pairs, dtype=torch.long, device=device)
    scratch = torch.empty(2, num_experts, dtype=torch.int32, device=device)  # counters, starts
    _align_kernel[(1,)](
        top_k_index.reshape(-1), scratch[0], scratch[1], rows, block_expert, position, pairs, total, total // block_m,
        num_experts, E=triton.next_power_of_2(num_experts), P=triton.next_power_of_2(pairs),
        R=triton.next_power_of_2(total), NB=triton.next_power_of_2(total // block_m), BLOCK_M=block_m,
        num_warps=num_warps,
    )
    return rows, block_expert, position


def grouped_gemm_reference(a, weight, rows, block_expert, top_k: int, gather: bool, block_m: int = BLOCK_M):
    """What the kernel computes, in torch: (R, N) with padded row r = a[rows[r] // top_k] (gather) or
    a[r] times ``weight[block_expert[r // block_m]]``ᵀ, zeros for padding and unused blocks."""
    total = rows.shape[0]
    out = torch.zeros((total, weight.shape[1]), dtype=a.dtype, device=a.device)
    experts = block_expert.repeat_interleave(block_m)
    valid = (rows >= 0) & (experts >= 0)
    index = torch.nonzero(valid).squeeze(1)
    source = torch.div(rows[index].long(), top_k, rounding_mode="floor") if gather else index
    for expert in torch.unique(experts[index]).tolist():
        mine = experts[index] == expert
        out[index[mine]] = (a[source[mine]].float() @ weight[expert].float().T).to(a.dtype)
    return out


@dataclass(frozen=True)
class GemmConfig:
    """One launch configuration of :func:`grouped_gemm`. ``swap``: the weight slice is the matrix
    units' left operand (``BLOCK_N`` rows of the weight × ``BLOCK_M`` token rows, the small-batch
    "swap AB" form), else the rows are (``BLOCK_M`` × ``BLOCK_N``); ``block_n`` output columns and
    ``block_k`` of the reduction per program and step; Triton's ``num_warps`` and ``num_stages``."""

    swap: bool
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4


#: the configuration a call takes unless it names one, by (precision, whether it gathers its rows):
#: the fastest of ``experiments/moe_sweep.py`` on an H200 at the full-size architecture's batch-1
#: shapes (``experiments/results/moe_sweep_h200.json``: gate/up 0.251 ms at 4.0 TB/s in bf16, 0.136 ms
#: in FP8; down 0.140 / 0.086 ms; the read ceiling 4.15 TB/s)
DEFAULT_CONFIG = {
    ("bf16", True): GemmConfig(swap=True, block_n=64, block_k=128, num_warps=4, num_stages=3),
    ("bf16", False): GemmConfig(swap=False, block_n=64, block_k=64, num_warps=4, num_stages=5),
    ("fp8", True): GemmConfig(swap=True, block_n=64, block_k=128, num_warps=4, num_stages=3),
    ("fp8", False): GemmConfig(swap=True, block_n=64, block_k=128, num_warps=4, num_stages=3),
}


def grouped_gemm(a, weight, rows, block_expert, top_k: int, gather: bool, block_m: int = BLOCK_M, *,
                 a_scale=None, weight_scale=None, fast_accum: bool = False, config: GemmConfig | None = None):
    """As :func:`grouped_gemm_reference`, one Triton launch (CUDA). With ``a_scale`` (rows of ``a``,)
    and ``weight_scale`` (E, N) float32, ``a`` and ``weight`` are e4m3 and the result is
    ``Σ_k a·w · a_scale[row] · weight_scale[e, n]`` in bf16 (the FP8 tier's row-wise scaling,
    :mod:`petri.engine.cuda.fp8_tier.fp8`): the products of each ``block_k`` slice summed by the matrix units, the
    slices added in float32 (``fast_accum``: all of it in the matrix units' accumulator)."""
    total = rows.shape[0]
    experts, n, k = weight.shape
    scaled = a_scale is not None
    config = config or DEFAULT_CONFIG["fp8" if scaled else "bf16", gather]
    out = torch.empty((total, n), dtype=torch.bfloat16 if scaled else a.dtype, device=a.device)
    grid = (total // block_m, triton.cdiv(n, config.block_n))
    _grouped_gemm_kernel[grid](
        a, a_scale if scaled else a, weight, weight_scale if scaled else weight, out, rows, block_expert, n, k,
        a.stride(0), weight.stride(0), weight.stride(1), out.stride(0), weight_scale.stride(0) if scaled else 0,
        TOP_K=top_k, GATHER=gather, SCALED=scaled, FAST_ACCUM=fast_accum, SWAP=config.swap, BLOCK_M=block_m,
        BLOCK_N=config.block_n, BLOCK_K=config.block_k, num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out


def experts_small_batch(hidden, top_k_index, top_k_weights, gate_up, down, activation: str,
                        configs: tuple[GemmConfig | None, GemmConfig | None] = (None, None)) -> torch.Tensor:
    """The experts block (shapes in the module docstring) through :func:`grouped_gemm` (CUDA);
    ``configs``: the gate/up and the down GEMM's launch configurations (``None``: the default)."""
    top_k = top_k_index.shape[1]
    hidden = hidden.contiguous()
    rows, block_expert, position = align_blocks(top_k_index, gate_up.shape[0])
    projected = grouped_gemm(hidden, gate_up, rows, block_expert, top_k, gather=True, config=configs[0])
    activated = gated_activation(projected, activation, pairs=rows)  # padding rows: never read below
    out = grouped_gemm(activated, down, rows, block_expert, top_k, gather=False,
                       config=configs[1])
    return combine_rows(out, position, top_k_weights, hidden.dtype)


if HAVE_TRITON:

    @triton.jit
    def _larger(a, b):
        return tl.maximum(a, b)

    @triton.jit
    def _align_kernel(index_ptr, counter_ptr, start_ptr, rows_ptr, block_expert_ptr, position_ptr, PAIRS, TOTAL,
                      NUM_BLOCKS, NUM_EXPERTS, E: tl.constexpr, P: tl.constexpr, R: tl.constexpr, NB: tl.constexpr,
                      BLOCK_M: tl.constexpr):
        """:func:`align_blocks_triton`'s one program: zero the counters, fill the rows and the blocks'
        experts with -1; rank each pair within its expert by an atomic add; pad the counts, their
        running sum gives each expert's first row; place the pairs; each expert that has pairs marks
        its first block with its number, and a running maximum over the blocks carries the mark to the
        expert's other blocks (-1 past the last used block): no (blocks × experts) table is formed."""
        experts = tl.arange(0, E)
        real = experts < NUM_EXPERTS
        tl.store(counter_ptr + experts, tl.zeros([E], dtype=tl.int32), mask=real)
        r = tl.arange(0, R)
        tl.store(rows_ptr + r, tl.full([R], -1, dtype=tl.int32), mask=r < TOTAL)
        b = tl.arange(0, NB)
        in_range = b < NUM_BLOCKS
        tl.store(block_expert_ptr + b, tl.full([NB], -1, dtype=tl.int32), mask=in_range)
        tl.debug_barrier()
        p = tl.arange(0, P)
        valid = p < PAIRS
        expert = tl.load(index_ptr + p, mask=valid, other=0).to(tl.int32)
        rank = tl.atomic_add(counter_ptr + expert, tl.full([P], 1, dtype=tl.int32), mask=valid)
        tl.debug_barrier()
        counts = tl.load(counter_ptr + experts, mask=real, other=0)
        padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        ends = tl.cumsum(padded, 0)
        starts = ends - padded
        tl.store(start_ptr + experts, starts, mask=real)
        tl.store(block_expert_ptr + starts // BLOCK_M, experts, mask=real & (counts > 0))
        tl.debug_barrier()
        dest = tl.load(start_ptr + expert, mask=valid, other=0) + rank
        tl.store(rows_ptr + dest, p, mask=valid)
        tl.store(position_ptr + p, dest.to(tl.int64), mask=valid)
        marks = tl.load(block_expert_ptr + b, mask=in_range, other=-1)
        owner = tl.associative_scan(marks, 0, _larger)
        used_blocks = tl.sum(padded, 0) // BLOCK_M
        tl.store(block_expert_ptr + b, tl.where(b < used_blocks, owner, -1), mask=in_range)

    @triton.jit
    def _grouped_gemm_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, rows_ptr, block_expert_ptr, N, K,
                             stride_am, stride_be, stride_bn, stride_cm, stride_se, TOP_K: tl.constexpr,
                             GATHER: tl.constexpr, SCALED: tl.constexpr, FAST_ACCUM: tl.constexpr,
                             SWAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """c[r, n] = Σ_k a[row(r), k] · b[e, n, k] (· a_scale[row(r)] · b_scale[e, n] when SCALED) for
        the block's expert e; b's K axis contiguous. SWAP accumulates the transpose, (n, r)."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        if expert >= 0:
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            pair = tl.load(rows_ptr + offs_m)
            valid_m = pair >= 0
            if GATHER:
                a_rows = tl.where(valid_m, pair // TOP_K, 0).to(tl.int64)
            else:
                a_rows = offs_m.to(tl.int64)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            valid_n = offs_n < N
            b_rows = b_ptr + expert * stride_be + offs_n.to(tl.int64) * stride_bn
            if SWAP:
                acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            else:
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                offs_k = k0 + tl.arange(0, BLOCK_K)
                valid_k = offs_k < K
                if SWAP:
                    w = tl.load(b_rows[:, None] + offs_k[None, :], mask=valid_n[:, None] & valid_k[None, :], other=0.0)
                    x = tl.load(a_ptr + a_rows[None, :] * stride_am + offs_k[:, None],
                                mask=valid_m[None, :] & valid_k[:, None], other=0.0)
                    if SCALED and not FAST_ACCUM:
                        acc += tl.dot(w, x)
                    else:
                        acc = tl.dot(w, x, acc)
                else:
                    x = tl.load(a_ptr + a_rows[:, None] * stride_am + offs_k[None, :],
                                mask=valid_m[:, None] & valid_k[None, :], other=0.0)
                    w = tl.load(b_rows[None, :] + offs_k[:, None], mask=valid_k[:, None] & valid_n[None, :], other=0.0)
                    if SCALED and not FAST_ACCUM:
                        acc += tl.dot(x, w)
                    else:
                        acc = tl.dot(x, w, acc)
            if SCALED:
                s_w = tl.load(b_scale_ptr + expert * stride_se + offs_n, mask=valid_n, other=0.0)
                s_a = tl.load(a_scale_ptr + a_rows, mask=valid_m, other=0.0)
                if SWAP:
                    acc = acc * s_a[None, :] * s_w[:, None]
                else:
                    acc = acc * s_a[:, None] * s_w[None, :]
            if SWAP:
                c = c_ptr + offs_m[None, :].to(tl.int64) * stride_cm + offs_n[:, None]
                tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=valid_n[:, None])
            else:
                c = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
                tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=valid_n[None, :])


moe_experts_small_batch = experts_op("moe_experts_small_batch", experts_small_batch,
                                     ":func:`experts_small_batch` on CUDA with Triton, else ``experts_reference``.")


def _small_batch_forward(self, hidden_states, top_k_index, top_k_weights):
    """The fused experts op's forward, with calls of at most :data:`MAX_PAIRS` pairs sent here."""
    if top_k_index.numel() <= MAX_PAIRS:
        return moe_experts_small_batch(hidden_states, top_k_index, top_k_weights, self.gate_up_proj, self.down_proj,
                                       self._petri_activation)
    return _fused_forward(self, hidden_states, top_k_index, top_k_weights)


def use_small_batch_experts(model, layers=None) -> None:
    """Give the experts of ``layers`` (the decoder's unless given) that run the fused experts op
    (:func:`petri.engine.cuda.fused.fused_experts.fuse_experts`) :func:`_small_batch_forward` instead; undone by
    ``unfuse_experts`` with the rest. The caller records it in the model's tier
    (:attr:`petri.engine.torch.fast_tier.FastTier.small_batch_experts`)."""
    for layer in model.model.decoder.layers if layers is None else layers:
        experts = getattr(layer, "experts", None)
        if experts is not None and getattr(vars(experts).get("forward"), "__func__", None) is _fused_forward:
            experts.forward = types.MethodType(_small_batch_forward, experts)


def small_batch_fits(model, batch: int) -> bool:
    """Whether a call of ``batch`` canvases on ``model`` (a ``DiffusionGemmaForBlockDiffusion``) has
    T·K ≤ :data:`MAX_PAIRS` (token, k) pairs, so that :func:`_small_batch_forward` takes the
    grouped GEMM (whether that forward is installed the model's tier says:
    :meth:`petri.engine.torch.fast_tier.FastTier.small_batch_experts_used`)."""
    top_k = int(model.config.get_text_config().top_k_experts)
    return batch * int(model.config.canvas_length) * top_k <= MAX_PAIRS
