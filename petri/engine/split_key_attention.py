"""Attention of one canvas against its keys with the keys split over programs and the splits merged
in the same launch (issue 25's attention lever for the sliding layers at one sample; opt-in and not
yet measured: ``compile_for_sampling(lm, split_key_attention=True)``; the kernel alone in
``experiments/attention_check.py``, variant ``petri_split_keys``).

Why: at one sample a sliding layer attends 256 canvas queries per head (16 heads over 8 key/value
heads, head dim 256, folded into 512 queries per key/value head) to 1,279 keys. SDPA's cuDNN kernel
runs 64 programs there on an H200's 132 multiprocessors (35.5 µs a layer); PyTorch's FlashAttention-2
splits the keys (23.7 µs) but merges the splits in a second kernel (6.1 µs), and as an Ampere kernel
it does not use Hopper's asynchronous matrix units: 32.5 µs a layer in all, where the layer's 5.4
GFLOP take about 7 µs at the bf16 rate (``experiments/results/attention_check_h200.json``). Here one
Triton launch (whose products Triton compiles for Hopper's units) runs (query tile, key/value head)
× ``split`` programs; each keeps FlashAttention's running maximum, sum and weighted values over its
slice of the keys, writes them to a scratch buffer and counts itself in at its tile's counter (an
acquire-release atomic after a barrier of the whole program, as :mod:`petri.engine.split_products`
does); the last to arrive merges the slices in slice order (so the bits do not depend on arrival
order), writes the output and the log-sum-exp and puts the counter back to zero.

Arithmetic: FlashAttention's: float32 scores and running softmax (in base 2: the scores times
``scale · log2 e``), the weights rounded to the values' dtype for the second product, float32 sums;
within bf16 rounding of SDPA's result, not bit-equal to any library kernel.

Shapes: q (N, Hkv, M, D) (the query heads of a key/value head folded into M rows, as
:func:`petri.engine.split_attention.split_attention` folds them), k and v (N, Hkv, K, D), D a power of
two up to 256; out (N, Hkv, M, D) in q's dtype, lse (N, Hkv, M) float32 (natural log).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from petri.engine.dependent_launch import launch_options
from petri.engine.fused_logits import HAVE_TRITON
from petri.engine.split_attention import (
    WIDEST_FAST_HEAD,
    attend_or_sdpa,
    give_attention_function,
    split_attention,
    unmasked,
)
from petri.engine.split_products import tier_counters

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.dependent_launch import wait_then_release

#: the function's name in transformers' ``AttentionInterface``
NAME = "petri_split_keys"
#: calls of this many samples or more keep SDPA (as :mod:`petri.engine.sliding_attention` does)
BELOW_SAMPLES = 2
#: the fewest key blocks a split walks
MIN_BLOCKS = 4
LOG2_E = 1.4426950408889634


@dataclass(frozen=True)
class KeySplit:
    """One launch of :func:`attend_split_keys`: ``block_m`` queries and ``block_n`` keys per step, the
    keys cut into ``split`` slices, Triton's ``num_warps`` and ``num_stages``."""

    block_m: int = 64
    block_n: int = 64
    split: int = 1
    num_warps: int = 8
    num_stages: int = 2

    def tiles(self, samples: int, kv_heads: int, queries: int) -> int:
        """Query tiles of a call: (sample, key/value head, block of queries)."""
        return samples * kv_heads * math.ceil(queries / self.block_m)

    def keys_per_split(self, keys: int) -> int:
        """Keys each slice walks, a whole number of blocks (the last slice may walk fewer)."""
        return math.ceil(math.ceil(keys / self.block_n) / self.split) * self.block_n


def choose_split(samples: int, kv_heads: int, queries: int, keys: int, multiprocessors: int) -> KeySplit:
    """The most slices that keep tiles × split within one program per multiprocessor and every slice at
    least :data:`MIN_BLOCKS` blocks of keys (1 where the tiles alone fill the chip)."""
    base = KeySplit()
    tiles = base.tiles(samples, kv_heads, queries)
    split = max(1, min(multiprocessors // tiles, math.ceil(keys / base.block_n) // MIN_BLOCKS))
    return KeySplit(split=split)


def attention_reference(q, k, v, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`attend_split_keys` computes, in float32 torch: (out in q's dtype, lse float32)."""
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.softmax(scores, dim=-1) @ v.float()
    return out.to(q.dtype), lse


def attend_split_keys(q, k, v, scale: float, counters: torch.Tensor, config: KeySplit | None = None):
    """Attention (shapes in the module docstring) in one Triton launch, the keys cut into
    ``config.split`` slices (:func:`choose_split` for ``counters.numel()`` multiprocessors unless
    given); ``counters`` int32 zeros, at least one per query tile where it splits, left at zero.
    Returns (out, lse).
    Raises ``ValueError`` naming what does not fit."""
    samples, kv_heads, queries, dim = q.shape
    keys = k.shape[2]
    if k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != dim:
        raise ValueError(f"k and v: {tuple(k.shape)} and {tuple(v.shape)} do not match q {tuple(q.shape)}")
    if not head_fits(dim) or q.stride(3) != 1 or k.stride(3) != 1 or v.stride(3) != 1:
        raise ValueError(f"q, k, v: head dim {dim} must be a power of two from 16 to {WIDEST_FAST_HEAD}, contiguous")
    if config is None:
        config = choose_split(samples, kv_heads, queries, keys, counters.numel())
    tiles = config.tiles(samples, kv_heads, queries)
    if config.split > 1 and (counters.dtype != torch.int32 or counters.numel() < tiles):
        raise ValueError(f"counters: {counters.numel()} {counters.dtype} for {tiles} query tiles (int32 needed)")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    merged = config.split > 1
    partials = torch.empty((tiles, config.split, config.block_m * dim) if merged else (1,), dtype=torch.float32,
                           device=q.device)
    stats = torch.empty((tiles, config.split, 2, config.block_m) if merged else (1,), dtype=torch.float32,
                        device=q.device)
    _split_key_attention_kernel[(tiles, config.split)](
        q, k, v, out, lse, partials, stats, counters, kv_heads, queries, keys, config.keys_per_split(keys),
        scale * LOG2_E, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        SPLIT=config.split, BLOCK_M=config.block_m, BLOCK_N=config.block_n, D=dim, num_warps=config.num_warps,
        num_stages=config.num_stages, **launch_options(),
    )
    return out, lse


@torch.library.custom_op("petri::split_key_attention", mutates_args=())
def split_key_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, counters: torch.Tensor,
                           scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attend_split_keys` at :func:`choose_split`'s configuration (CUDA with Triton; else
    :func:`attention_reference`), as one op opaque to ``torch.compile``. The counters go up and back
    to zero within the launch, so to torch the op only reads them; one layer's calls never overlap."""
    if q.is_cuda and HAVE_TRITON:
        return attend_split_keys(q, k, v, scale, counters)
    return attention_reference(q, k, v, scale)


@split_key_attention_op.register_fake
def _(q, k, v, counters, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)


def head_fits(dim: int) -> bool:
    """Whether the kernel takes a head dim: a power of two from 16 to 256."""
    return 16 <= dim <= WIDEST_FAST_HEAD and not dim & (dim - 1)


def split_keys_take(query: torch.Tensor) -> bool:
    """Whether this lever takes a call's query (B, H, Lq, D): bf16 or fp16, a head dim the kernel takes
    (:func:`head_fits`), and B below :data:`BELOW_SAMPLES`."""
    return query.dtype in (torch.bfloat16, torch.float16) and head_fits(query.shape[-1]) and query.shape[0] < BELOW_SAMPLES


def petri_split_keys(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs):
    """transformers' attention-function signature: the folded attention through
    :func:`split_key_attention_op` with the layer's counters where it applies (as
    :func:`petri.engine.sliding_attention.petri_flash_sliding` decides, for one sample), else
    ``sdpa_attention_forward`` with the same arguments."""
    counters = module._petri_attention_counters

    def attend(q, k, v, scale):
        return split_key_attention_op(q, k, v, counters, scale)

    def compute(q, k, v, scale):
        return split_attention(q, k, v, scale, 1, attend=attend)

    return attend_or_sdpa(compute, unmasked(split_keys_take), module, query, key, value, attention_mask, dropout,
                          scaling, is_causal, kwargs)


def use_split_key_attention(layers, device) -> int:
    """Give the attention of every layer of ``layers`` whose head dim is at most 256 and that runs
    SDPA :func:`petri_split_keys` and its own counters on ``device`` (:func:`petri.engine.split_products.tier_counters`);
    returns how many (undone by :func:`petri.engine.split_attention.drop_split_attention`)."""
    given = give_attention_function(layers, NAME, petri_split_keys,
                                    lambda attention: 0 < getattr(attention, "head_dim", 0) <= WIDEST_FAST_HEAD)
    for layer in layers:
        attention = getattr(layer, "self_attn", None)
        if attention is not None and getattr(attention.config, "_attn_implementation", None) == NAME:
            attention._petri_attention_counters = tier_counters(device)
    return given


if HAVE_TRITON:

    @triton.jit
    def _split_key_attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, partial_ptr, stats_ptr, counter_ptr, HKV,
                                    M, KEYS, KEYS_PER_SPLIT, scale_log2, sq_n, sq_h, sq_m, sk_n, sk_h, sk_k, sv_n,
                                    sv_h, sv_k, so_n, so_h, so_m, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
                                    BLOCK_N: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr):
        """Program (tile, part): the tile's queries over slice ``part`` of the keys; with SPLIT > 1 its
        running state to the scratch and the last of the tile's programs to arrive merges the slices."""
        wait_then_release(PDL)
        tile = tl.program_id(0)
        part = tl.program_id(1)
        q_tiles = tl.cdiv(M, BLOCK_M)
        head = tile // q_tiles
        n = (head // HKV).to(tl.int64)
        h = (head % HKV).to(tl.int64)
        offs_m = (tile % q_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
        valid_m = offs_m < M
        offs_d = tl.arange(0, D)
        q = tl.load(q_ptr + n * sq_n + h * sq_h + offs_m[:, None].to(tl.int64) * sq_m + offs_d[None, :],
                    mask=valid_m[:, None], other=0.0)
        k_rows = k_ptr + n * sk_n + h * sk_h
        v_rows = v_ptr + n * sv_n + h * sv_h
        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
        k_start = part * KEYS_PER_SPLIT
        k_end = tl.minimum(k_start + KEYS_PER_SPLIT, KEYS)
        for start in range(k_start, k_end, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            valid_n = offs_n < k_end
            keys = tl.load(k_rows + offs_n[:, None].to(tl.int64) * sk_k + offs_d[None, :], mask=valid_n[:, None],
                           other=0.0)
            scores = tl.dot(q, tl.trans(keys)) * scale_log2
            scores = tl.where(valid_n[None, :], scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            weights = tl.exp2(scores - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(weights, 1)
            values = tl.load(v_rows + offs_n[:, None].to(tl.int64) * sv_k + offs_d[None, :], mask=valid_n[:, None],
                             other=0.0)
            acc = acc * alpha[:, None] + tl.dot(weights.to(values.dtype), values)
            m_i = m_new
        if SPLIT == 1:
            _write_attention(acc, m_i, l_i, out_ptr, lse_ptr, n, h, offs_m, offs_d, valid_m, so_n, so_h, so_m, M, HKV)
        else:
            in_tile = tl.arange(0, BLOCK_M)[:, None] * D + offs_d[None, :]
            partials = partial_ptr + tile.to(tl.int64) * (SPLIT * BLOCK_M * D) + in_tile
            stats = stats_ptr + tile.to(tl.int64) * (SPLIT * 2 * BLOCK_M) + tl.arange(0, BLOCK_M)
            tl.store(partials + part * (BLOCK_M * D), acc)
            tl.store(stats + part * (2 * BLOCK_M), m_i)
            tl.store(stats + part * (2 * BLOCK_M) + BLOCK_M, l_i)
            tl.debug_barrier()  # every thread's state stored before the count says so
            arrived = tl.atomic_add(counter_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT - 1:
                top = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
                for j in tl.static_range(SPLIT):
                    top = tl.maximum(top, tl.load(stats + j * (2 * BLOCK_M), cache_modifier=".cg"))
                total = tl.zeros((BLOCK_M,), dtype=tl.float32)
                merged = tl.zeros((BLOCK_M, D), dtype=tl.float32)
                for j in tl.static_range(SPLIT):
                    weight = tl.exp2(tl.load(stats + j * (2 * BLOCK_M), cache_modifier=".cg") - top)  # 0: no keys
                    total += weight * tl.load(stats + j * (2 * BLOCK_M) + BLOCK_M, cache_modifier=".cg")
                    merged += weight[:, None] * tl.load(partials + j * (BLOCK_M * D), cache_modifier=".cg")
                tl.store(counter_ptr + tile, 0)
                _write_attention(merged, top, total, out_ptr, lse_ptr, n, h, offs_m, offs_d, valid_m, so_n, so_h, so_m,
                                 M, HKV)

    @triton.jit
    def _write_attention(acc, m_i, l_i, out_ptr, lse_ptr, n, h, offs_m, offs_d, valid_m, so_n, so_h, so_m, M, HKV):
        """The output rows acc / l (BLOCK_M, D) in the output's dtype and their natural log-sum-exp
        (the running maximum m in base 2); lse is contiguous (N, Hkv, M)."""
        out = out_ptr + n * so_n + h * so_h + offs_m[:, None].to(tl.int64) * so_m + offs_d[None, :]
        tl.store(out, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=valid_m[:, None])
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
        tl.store(lse_ptr + (n * HKV + h) * M + offs_m, lse, mask=valid_m)
