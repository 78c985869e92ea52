"""One pass over a denoising step's full-vocabulary logits: entropy, argmax, sampled token and the
next step's self-conditioning input, without materialising float32 probabilities.

Per row (one canvas position) of ``raw`` (N, V) the pass computes, in float32:

    l = tanh(raw / cap) * cap             (the model's final-logit softcap; skipped when cap is None)
    x = l / temperature                   (temperature scaling)

each division evaluated as PyTorch's CUDA kernels evaluate division by a Python scalar:
multiplication by ``scalar_reciprocal(value)``, the reciprocal computed in double precision and
rounded to float32 (``div_true_kernel_cuda``).
    entropy = H(softmax(x))               (nats)
    argmax  = first index of max(x)
    sampled = first index of max(x - log_noise)   (exponential race ≡ Gumbel-max: a draw from softmax(x)
                                                   when log_noise = log(Exp(1) noise))
              or, given one uniform u per row instead of noise, the inverse-CDF draw: the first
              index whose cumulative weight exceeds u·Σw, w = exp(x - max x) (:func:`inverse_cdf_draw`)
    self_conditioning = bf16(x)           (what the next step's decoder reads), or, with
                        probabilities=True, bf16(softmax(bf16(x))) in float32: the probabilities
                        the decoder computes from it (see below)

The operations, constants and rounding are those of the eager code path: the model computes
``logits.float() / cap``, ``tanh``, ``* cap``, and the sampler ``logits / temperature``, and the
kernel does no fused multiply-adds. (Measured on an H200 with PyTorch 2.11: a correctly rounded
division instead differs from the eager ops in 62 % of the elements by an ulp, a float32-computed
reciprocal in up to 79 %, depending on T.) So x, argmax, sampled tokens and the bf16 copy are exact (first index on
ties, like ``torch.argmax``) provided ``tanh`` rounds alike (checked on the GPU by
``tests/engine/cuda/test_fused_logits.py`` and ``experiments/gpu_check.py``); the entropy is an online (single-pass) evaluation and agrees
with ``torch.distributions.Categorical`` within float32 rounding (stated tolerance: 2e-5 absolute +
1e-5 relative).

The inverse-CDF draw reads S·L uniforms per step instead of S·L·V exponentials (3.2 GB of float32
noise per step for 12 samples of the full-size model, and two passes over it to draw and take its
log); it needs the row's max and Σw, so it happens in a second kernel, the one that writes the
probabilities. Same distribution; the draw's rounding differs from any torch reference by the order
of the cumulative sum, so it is not bit-reproducible by eager ops (the exponential race is).

With ``probabilities=True`` the pass also keeps, per row, the running max M and the online sum Z of
exp(bf16(x) - M) (float32), and a second kernel writes bf16(exp(bf16(x) - M) / Z) (``expf`` and a
correctly rounded division, as torch's softmax kernel): the decoder's own
``softmax(dtype=float32).to(bf16)`` of the self-conditioning logits, done in the sampler so that the
decoder skips its float32 pass over (N, V) (:mod:`petri.engine.cuda.fast_sampler`). It equals torch's
output wherever Z rounds alike; where the summation order changes Z's last bits an element can be
one bf16 ulp off (the fraction is measured by ``experiments/gpu_check.py``).

With an e4m3 ``self_conditioning_out`` (the FP8 tier's opt-in FP8 self-conditioning, issue 25) the
second kernel writes the same probabilities quantized per row as :func:`petri.engine.cuda.fp8_tier.fp8.quantize_rows`
would, without a division: the row's largest probability is 1/Z, so q = e4m3(448·exp(bf16(x) - M))
and the row's scale, written to ``self_conditioning_scale``, is 1/(448·Z) (p ≈ q·scale).

:func:`reference_logit_pass` is the same function in plain torch, chunked over rows so that no more
than ``chunk_rows × V`` float32 values exist at once; it runs everywhere (the CPU fallback) and is
what the Triton kernel :func:`triton_logit_pass` is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

try:  # Triton is optional: present with CUDA builds of PyTorch, absent on CPU-only machines
    import triton
    import triton.language as tl

    try:
        from triton.language.extra import libdevice
    except ImportError:  # older layouts
        from triton.language.extra.cuda import libdevice
    HAVE_TRITON = True
except ImportError:  # pragma: no cover - depends on the installation
    HAVE_TRITON = False


def scalar_reciprocal(value: float) -> float:
    """float32(1 / value), the division in double precision: the multiplier PyTorch's CUDA kernels
    use for ``tensor / value`` with a Python float ``value``."""
    return float(np.float32(1.0 / value))


@dataclass
class LogitPassOutput:
    """Per row: entropy (N,) float32, argmax (N,) int64, sampled (N,) int64."""

    entropy: torch.Tensor
    argmax: torch.Tensor
    sampled: torch.Tensor


def inverse_cdf_draw(x: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """(n, V) float32 scaled logits, (n,) uniforms in [0, 1) → (n,) int64: per row the first index
    whose cumulative weight exceeds u·Σw, w = exp(x - max x) in float32; the last index of positive
    weight where rounding leaves u·Σw at or above the cumulative total."""
    weights = torch.exp(x - x.amax(dim=-1, keepdim=True))
    cumulative = torch.cumsum(weights, dim=-1)
    target = uniforms[:, None].to(torch.float32) * cumulative[:, -1:]
    index = torch.searchsorted(cumulative, target, right=True).squeeze(-1)
    vocab = x.shape[-1]
    last_positive = vocab - 1 - torch.argmax(torch.flip(weights > 0, dims=[-1]).to(torch.uint8), dim=-1)
    return torch.minimum(index, last_positive)


def reference_logit_pass(
    raw: torch.Tensor,
    log_noise: torch.Tensor | None,
    *,
    temperature: float | None = None,
    inv_temperature: torch.Tensor | None = None,
    softcap: float | None = None,
    self_conditioning_out: torch.Tensor | None = None,
    keep_rows: torch.Tensor | None = None,
    chunk_rows: int = 256,
    probabilities: bool = False,
    uniforms: torch.Tensor | None = None,
    self_conditioning_scale: torch.Tensor | None = None,
) -> LogitPassOutput:
    """The fused pass in plain torch ops (see the module docstring).

    Args:
        raw: (N, V) logits; bf16/fp32 lm-head output when ``softcap`` is given, else the model's
            (softcapped) float32 logits.
        log_noise: (N, V) float32, log of Exp(1) noise (sampling keys are ``x - log_noise``), or
            ``None`` with ``uniforms``.
        temperature: a Python float: ``x = l / temperature`` exactly as the eager sampler writes it.
        inv_temperature: alternatively a one-element float32 tensor holding
            ``scalar_reciprocal(T)``: ``x = l * inv_temperature``, what a CUDA graph replays with a
            new value each step (on CUDA bit-equal to ``l / T``, see the module docstring).
        softcap: the model's ``final_logit_softcapping``; ``None`` when ``raw`` is already softcapped.
        self_conditioning_out: optional (N, V) tensor that receives ``x`` cast to its dtype, except
            in rows where ``keep_rows`` is True (they keep their previous content).
        keep_rows: optional (N,) bool.
        chunk_rows: rows handled at a time (bounds the float32 temporaries to chunk_rows × V).
        probabilities: write ``softmax(bf16(x))`` (the decoder's ops) instead of ``x``.
        uniforms: (N,) float32 in [0, 1): draw by :func:`inverse_cdf_draw` instead of the race.
        self_conditioning_scale: (N,) float32, with ``probabilities`` and an e4m3
            ``self_conditioning_out``: receives each row's scale 1/(448·Z) while the output gets
            e4m3(448·exp(bf16(x) - M)) (module docstring); rows in ``keep_rows`` keep both.
    """
    if (temperature is None) == (inv_temperature is None):
        raise ValueError("give exactly one of temperature and inv_temperature")
    if (log_noise is None) == (uniforms is None):
        raise ValueError("give exactly one of log_noise and uniforms")
    fp8_out = _fp8_self_conditioning(self_conditioning_out, probabilities, self_conditioning_scale)
    rows = raw.shape[0]
    entropy = torch.empty(rows, dtype=torch.float32, device=raw.device)
    argmax = torch.empty(rows, dtype=torch.long, device=raw.device)
    sampled = torch.empty(rows, dtype=torch.long, device=raw.device)
    for start in range(0, rows, chunk_rows):
        part = slice(start, min(rows, start + chunk_rows))
        logits = raw[part].to(torch.float32)
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        x = logits / temperature if temperature is not None else logits * cast(torch.Tensor, inv_temperature)
        # validate_args=False: the argument check synchronises, which a CUDA graph cannot capture
        entropy[part] = torch.distributions.Categorical(logits=x, validate_args=False).entropy()
        argmax[part] = torch.argmax(x, dim=-1)
        if uniforms is not None:
            sampled[part] = inverse_cdf_draw(x, uniforms[part])
        else:
            sampled[part] = torch.argmax(x - cast(torch.Tensor, log_noise)[part], dim=-1)
        if fp8_out:  # both given (_fp8_self_conditioning)
            sc_out, sc_scale = cast(torch.Tensor, self_conditioning_out), cast(torch.Tensor, self_conditioning_scale)
            xb = x.to(torch.bfloat16).float()
            weights = torch.exp(xb - xb.amax(dim=-1, keepdim=True))
            new = (weights * FP8_SC_MAX).to(sc_out.dtype)
            scale = 1.0 / (FP8_SC_MAX * weights.sum(dim=-1))
            if keep_rows is not None:
                new = torch.where(keep_rows[part, None], sc_out[part].float(), new.float()).to(new.dtype)
                scale = torch.where(keep_rows[part], sc_scale[part], scale)
            sc_out[part] = new
            sc_scale[part] = scale
        elif self_conditioning_out is not None:
            new = x.to(self_conditioning_out.dtype)
            if probabilities:
                new = new.softmax(dim=-1, dtype=torch.float32).to(self_conditioning_out.dtype)
            if keep_rows is not None:
                new = torch.where(keep_rows[part, None], self_conditioning_out[part], new)
            self_conditioning_out[part] = new
    return LogitPassOutput(entropy=entropy, argmax=argmax, sampled=sampled)


#: the e4m3 value a row's largest probability maps to (its largest finite value)
FP8_SC_MAX = 448.0


def _fp8_self_conditioning(out: torch.Tensor | None, probabilities: bool, scale: torch.Tensor | None) -> bool:
    """Whether a pass writes e4m3 probabilities; ``ValueError`` naming what is missing when the
    arguments ask for half of it."""
    fp8 = out is not None and out.dtype == torch.float8_e4m3fn
    if fp8 and (not probabilities or scale is None):
        raise ValueError("an e4m3 self_conditioning_out needs probabilities=True and a self_conditioning_scale")
    if scale is not None and not fp8:
        raise ValueError("self_conditioning_scale is only for an e4m3 self_conditioning_out")
    return fp8


if HAVE_TRITON:

    @triton.jit
    def _scaled_tile(raw_ptr, row, raw_stride, start, offsets, inv_cap, cap, inv_t, VOCAB: tl.constexpr,
                     HAS_CAP: tl.constexpr):
        """One tile of a row: (indices, in-vocabulary mask, x = softcap(raw) · inv_t in float32)."""
        idx = start + offsets
        valid = idx < VOCAB
        logit = tl.load(raw_ptr + row * raw_stride + idx, mask=valid, other=0.0).to(tl.float32)
        if HAS_CAP:
            logit = libdevice.tanh(logit * inv_cap) * cap
        return idx, valid, logit * inv_t

    @triton.jit
    def _first_index_of(values, value, idx, VOCAB: tl.constexpr):
        """The first of ``idx`` (int64) where ``values`` equals ``value`` (which it holds)."""
        return tl.min(tl.where(values == value, idx, VOCAB), axis=0).to(tl.int64)

    @triton.jit
    def _logit_pass_kernel(
        raw_ptr, noise_ptr, sc_ptr, keep_ptr, inv_t_ptr,
        entropy_ptr, argmax_ptr, sampled_ptr, sc_max_ptr, sc_sum_ptr, x_max_ptr, x_sum_ptr,
        rows_per_keep, raw_stride, noise_stride, sc_stride,
        inv_cap, cap,
        VOCAB: tl.constexpr, HAS_CAP: tl.constexpr, WRITE_SC: tl.constexpr, HAS_KEEP: tl.constexpr,
        SC_STATS: tl.constexpr, RACE: tl.constexpr, BLOCK: tl.constexpr,
    ):
        """One program per row: stream the row once in BLOCK-wide tiles, keeping running
        (max, Σe, Σe·(x-max)) for the entropy and running (best value, first index) for the two
        argmaxes."""
        row = tl.program_id(0).to(tl.int64)
        inv_t = tl.load(inv_t_ptr)
        if HAS_KEEP:  # finished samples keep their previous self-conditioning input
            writable = tl.load(keep_ptr + row // rows_per_keep) == 0
        else:
            writable = True
        offsets = tl.arange(0, BLOCK)
        m = tl.full((), -3.0e38, tl.float32)  # finite, so (m - m_new) * z stays 0 at the start
        z = tl.zeros((), tl.float32)
        s = tl.zeros((), tl.float32)
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = tl.zeros((), tl.int64)
        key_best = tl.full((), float("-inf"), tl.float32)
        key_idx = tl.zeros((), tl.int64)
        sc_m = tl.full((), -3.0e38, tl.float32)  # SC_STATS: running max and sum of exp(bf16(x) - max)
        sc_z = tl.zeros((), tl.float32)
        for start in range(0, VOCAB, BLOCK):
            idx, valid, x = _scaled_tile(raw_ptr, row, raw_stride, start, offsets, inv_cap, cap, inv_t, VOCAB, HAS_CAP)
            x = tl.where(valid, x, float("-inf"))
            # argmax, first index on ties: a later tile wins only when strictly larger; the tile's
            # first index of its max is looked for only then (a few tiles of a row)
            tile_max = tl.max(x, axis=0)
            if tile_max > best:
                best_idx = _first_index_of(x, tile_max, idx, VOCAB)
                best = tile_max
            if RACE:  # sampling keys (else the second kernel draws by inverse CDF)
                noise = tl.load(noise_ptr + row * noise_stride + idx, mask=valid, other=0.0)
                key = tl.where(valid, x - noise, float("-inf"))
                key_max = tl.max(key, axis=0)
                if key_max > key_best:
                    key_idx = _first_index_of(key, key_max, idx, VOCAB)
                    key_best = key_max
            # online entropy: z = Σ e^(x-m), s = Σ e^(x-m)·(x-m), rescaled when m grows
            m_new = tl.maximum(m, tile_max)
            shift = m - m_new
            scale = tl.exp(shift)
            centred = x - m_new
            e = tl.where(valid, tl.exp(centred), 0.0)
            s = scale * (s + shift * z) + tl.sum(tl.where(valid, e * centred, 0.0), axis=0)
            z = z * scale + tl.sum(e, axis=0)
            m = m_new
            if SC_STATS:
                xb = tl.where(valid, x.to(tl.bfloat16).to(tl.float32), float("-inf"))
                # rounding to bf16 is monotonic, so the tile's largest bf16(x) is bf16 of its max
                sc_m_new = tl.maximum(sc_m, tile_max.to(tl.bfloat16).to(tl.float32))
                sc_z = sc_z * tl.exp(sc_m - sc_m_new) + tl.sum(tl.where(valid, tl.exp(xb - sc_m_new), 0.0), axis=0)
                sc_m = sc_m_new
            if WRITE_SC:
                tl.store(sc_ptr + row * sc_stride + idx, x.to(sc_ptr.dtype.element_ty), mask=valid & writable)
        tl.store(entropy_ptr + row, tl.log(z) - s / z)
        tl.store(argmax_ptr + row, best_idx)
        if RACE:
            tl.store(sampled_ptr + row, key_idx)
        else:
            tl.store(x_max_ptr + row, m)
            tl.store(x_sum_ptr + row, z)
        if SC_STATS:
            tl.store(sc_max_ptr + row, sc_m)
            tl.store(sc_sum_ptr + row, sc_z)

    @triton.jit
    def _second_pass_kernel(
        raw_ptr, sc_ptr, sc_scale_ptr, keep_ptr, inv_t_ptr, sc_max_ptr, sc_sum_ptr, uniform_ptr, x_max_ptr, x_sum_ptr,
        sampled_ptr, rows_per_keep, raw_stride, sc_stride, inv_cap, cap,
        VOCAB: tl.constexpr, HAS_CAP: tl.constexpr, HAS_KEEP: tl.constexpr, WRITE_SC: tl.constexpr,
        SC_FP8: tl.constexpr, DRAW: tl.constexpr, BLOCK: tl.constexpr,
    ):
        """Second pass, one program per row, x as in the first: WRITE_SC: sc = bf16(exp(bf16(x) - M) / Z),
        or with SC_FP8 sc = e4m3(448·exp(bf16(x) - M)) and the row's scale 1/(448·Z);
        DRAW: the inverse-CDF draw with the row's uniform u, max m and Σ exp(x - m) from the first."""
        row = tl.program_id(0).to(tl.int64)
        if HAS_KEEP:  # finished samples keep their previous self-conditioning input
            writable = tl.load(keep_ptr + row // rows_per_keep) == 0
        else:
            writable = True
        inv_t = tl.load(inv_t_ptr)
        if WRITE_SC:
            sc_m = tl.load(sc_max_ptr + row)
            sc_z = tl.load(sc_sum_ptr + row)
            if SC_FP8:
                if writable:
                    tl.store(sc_scale_ptr + row, tl.math.div_rn(1.0, 448.0 * sc_z))
        if DRAW:
            m = tl.load(x_max_ptr + row)
            target = tl.load(uniform_ptr + row) * tl.load(x_sum_ptr + row)
            below = tl.zeros((), tl.float32)  # Σ w over the tiles before this one
            first = tl.full((), VOCAB, tl.int64)  # first index whose cumulative weight exceeds the target
            last_positive_tile = tl.zeros((), tl.int64)  # the start of the last tile with a positive weight
        offsets = tl.arange(0, BLOCK)
        for start in range(0, VOCAB, BLOCK):
            idx, valid, x = _scaled_tile(raw_ptr, row, raw_stride, start, offsets, inv_cap, cap, inv_t, VOCAB, HAS_CAP)
            if WRITE_SC:
                xb = x.to(tl.bfloat16).to(tl.float32)
                if SC_FP8:
                    q = libdevice.exp(xb - sc_m) * 448.0
                    tl.store(sc_ptr + row * sc_stride + idx, q.to(tl.float8e4nv), mask=valid & writable)
                else:
                    p = tl.math.div_rn(libdevice.exp(xb - sc_m), sc_z)
                    tl.store(sc_ptr + row * sc_stride + idx, p.to(sc_ptr.dtype.element_ty), mask=valid & writable)
            if DRAW:
                w = tl.where(valid, tl.exp(x - m), 0.0)
                tile_sum = tl.sum(w, axis=0)
                # the running sum can cross the target in this tile only if below + Σw does, give or
                # take the rounding of Σw against the scan's last element (at most BLOCK·2⁻²³ relative
                # for BLOCK positive terms; the margin is 4 times that): tiles before the crossing and
                # after the first index skip the scan, and the index found is the one a scan of every
                # tile finds
                if (first == VOCAB) & (below + tile_sum * (1.0 + BLOCK * 4.76837158203125e-07) > target):
                    crossed = ((below + tl.cumsum(w, axis=0)) > target) & valid
                    first = tl.minimum(first, tl.min(tl.where(crossed, idx, VOCAB), axis=0).to(tl.int64))
                # a sum of weights ≥ 0 is positive exactly when one of them is
                last_positive_tile = tl.where(tile_sum > 0, start, last_positive_tile)
                below += tile_sum
        if DRAW:  # the last index of positive weight, from that tile's weights computed again
            idx, valid, x = _scaled_tile(raw_ptr, row, raw_stride, last_positive_tile, offsets, inv_cap, cap, inv_t,
                                         VOCAB, HAS_CAP)
            w = tl.where(valid, tl.exp(x - m), 0.0)
            last_positive = tl.max(tl.where(w > 0, idx, 0), axis=0).to(tl.int64)
            tl.store(sampled_ptr + row, tl.minimum(first, last_positive))


def pass_launch(rows: int, device: torch.device) -> tuple[int, int]:
    """(tile width, warps) of the passes over ``rows`` rows: with at least four rows per
    multiprocessor, 2,048-wide tiles and 4 warps (more programs resident at once); with fewer,
    4,096 and 16 (each row's program spread wider). On an H200, ``experiments/kernel_levers.py
    --parts launch`` measured at 3,072 rows 2.78 ms against 3.26 for the former 2,048 × 8 (FP8
    probabilities; 3.26 against 3.59 with bf16 ones) and at 256 rows 0.35 against 0.48 (0.38 against
    0.53): ``experiments/results/kernel_levers_h200_launch.json``. Rows between those two were not
    measured; the switch at four rows per multiprocessor is where 16-warp programs stop fitting in
    one wave. Another launch sums the tiles in another order: the entropies move by float32
    rounding and a draw whose uniform falls within rounding of a boundary may land one token over."""
    # (off CUDA, i.e. in Triton's CPU interpreter, an H200's 132 multiprocessors)
    multiprocessors = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132
    return (2048, 4) if rows >= 4 * multiprocessors else (4096, 16)


def triton_logit_pass(
    raw: torch.Tensor,
    log_noise: torch.Tensor | None,
    inv_temperature: torch.Tensor,
    *,
    softcap: float | None = None,
    self_conditioning_out: torch.Tensor | None = None,
    keep_rows_per_sample: torch.Tensor | None = None,
    rows_per_sample: int = 1,
    out: LogitPassOutput | None = None,
    block: int | None = None,
    num_warps: int | None = None,
    probabilities: bool = False,
    uniforms: torch.Tensor | None = None,
    self_conditioning_scale: torch.Tensor | None = None,
) -> LogitPassOutput:
    """The fused pass as one Triton launch (CUDA only); arguments as :func:`reference_logit_pass`,
    except ``inv_temperature`` (one-element float32 device tensor holding
    ``scalar_reciprocal(T)``, so a CUDA graph can replay it with a new value) and ``keep_rows_per_sample`` (S,) bool with
    ``rows_per_sample`` rows each (row r belongs to sample r // rows_per_sample). ``out`` lets a caller reuse its buffers.
    ``probabilities``: write the decoder's softmax of the bf16 self-conditioning logits instead of
    the logits (a second kernel; see the module docstring). ``uniforms`` (N,) float32: draw by
    inverse CDF in that second kernel, with ``log_noise`` ``None``. ``block`` (tile width) and
    ``num_warps``: :func:`pass_launch`'s unless given."""
    if not HAVE_TRITON:
        raise RuntimeError("Triton is not installed")
    fp8_out = _fp8_self_conditioning(self_conditioning_out, probabilities, self_conditioning_scale)
    rows, vocab = raw.shape
    default_block, default_warps = pass_launch(rows, raw.device)
    block, num_warps = block or default_block, num_warps or default_warps
    if (log_noise is None) == (uniforms is None):
        raise ValueError("give exactly one of log_noise and uniforms")
    if raw.stride(1) != 1 or (log_noise is not None and log_noise.stride(1) != 1):
        raise ValueError("raw and log_noise must be contiguous along the vocabulary")
    if out is None:
        out = LogitPassOutput(
            entropy=torch.empty(rows, dtype=torch.float32, device=raw.device),
            argmax=torch.empty(rows, dtype=torch.long, device=raw.device),
            sampled=torch.empty(rows, dtype=torch.long, device=raw.device),
        )
    sc = self_conditioning_out if self_conditioning_out is not None else raw
    keep = keep_rows_per_sample.view(torch.uint8) if keep_rows_per_sample is not None else out.argmax
    cap = float(np.float32(softcap)) if softcap is not None else 1.0
    inv_cap = scalar_reciprocal(softcap) if softcap is not None else 1.0
    stats = probabilities and self_conditioning_out is not None
    draw = uniforms is not None

    def per_row(wanted: bool) -> torch.Tensor:
        return torch.empty(rows if wanted else 1, dtype=torch.float32, device=raw.device)

    sc_max, sc_sum, x_max, x_sum = per_row(stats), per_row(stats), per_row(draw), per_row(draw)
    noise = log_noise if log_noise is not None else raw
    _logit_pass_kernel[(rows,)](
        raw, noise, sc, keep, inv_temperature,
        out.entropy, out.argmax, out.sampled, sc_max, sc_sum, x_max, x_sum,
        rows_per_sample, raw.stride(0), noise.stride(0), sc.stride(0),
        inv_cap, cap,
        VOCAB=vocab,
        HAS_CAP=softcap is not None,
        WRITE_SC=self_conditioning_out is not None and not probabilities,
        HAS_KEEP=keep_rows_per_sample is not None,
        SC_STATS=stats,
        RACE=not draw,
        BLOCK=block,
        num_warps=num_warps,
        enable_fp_fusion=False,  # no FMA contraction: x - noise rounds like the eager ops
    )
    if stats or draw:
        _second_pass_kernel[(rows,)](
            raw, sc, self_conditioning_scale if fp8_out else sc_max, keep, inv_temperature, sc_max, sc_sum,
            uniforms if draw else sc_max, x_max, x_sum, out.sampled,
            rows_per_sample, raw.stride(0), sc.stride(0), inv_cap, cap,
            VOCAB=vocab, HAS_CAP=softcap is not None, HAS_KEEP=keep_rows_per_sample is not None,
            WRITE_SC=stats, SC_FP8=fp8_out, DRAW=draw, BLOCK=block, num_warps=num_warps, enable_fp_fusion=False,
        )
    return out
