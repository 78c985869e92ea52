"""Triton kernels of the FP8 tier (:mod:`petri.engine.cuda.fp8_tier.fp8`), one launch where the torch ops take
about eight: the per-row e4m3 quantization, and the experts' ``gelu_tanh(gate)·up`` with that
quantization fused. Each computes what its torch counterpart does, step by step (IEEE divisions,
round-to-nearest-even into e4m3, the bf16 activation rounded as the unfused kernel rounds it), so
the results are meant to be bit-equal (checked on the GPU in ``tests/engine/cuda/test_fp8.py``).

Shapes: x (R, K) → q (R, K) e4m3, scale (R,) float32; projected (R, 2·I) bf16 → q (R, I), scale (R,).
"""

from __future__ import annotations

import torch

from petri.engine.cuda.fused.fused_logits import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.cuda.fused.fused_logits import libdevice

#: widest row one program quantizes (the row is held in registers)
MAX_WIDTH = 16384


def triton_quantizable(x: torch.Tensor) -> bool:
    """Whether :func:`quantize_rows_triton` takes ``x``: a 2-D CUDA tensor with unit column stride,
    rows of at most :data:`MAX_WIDTH`, outside ``torch.compile`` (there Inductor fuses the torch ops)."""
    return (HAVE_TRITON and x.is_cuda and x.dim() == 2 and x.stride(-1) == 1 and 0 < x.shape[1] <= MAX_WIDTH
            and not torch.compiler.is_compiling())


#: (rows per program, warps) by the row's block where the default is not the fastest:
#: ``experiments/kernel_levers.py --parts launch`` on an H200 (issue 25,
#: ``experiments/results/kernel_levers_h200_launch.json``): the experts' activation (block 1,024)
#: took 76 µs over 24,576 rows at 4 warps against 86 at 2; more rows per program was slower at
#: every width and warp count tried
LAUNCH_SHAPES: dict[int, tuple[int, int]] = {1024: (1, 4)}


def _launch_shape(width: int, rows_per_program: int | None = None, num_warps: int | None = None) -> tuple[int, int, int]:
    """(block, rows per program, warps) of a launch over rows of ``width``: the block is the row's
    width rounded up to a power of two; rows per program and warps as given, else from
    :data:`LAUNCH_SHAPES`, else one row and block/512 warps (1 to 16)."""
    block = triton.next_power_of_2(width)
    rows, warps = LAUNCH_SHAPES.get(block, (1, max(1, min(16, block // 512))))
    return block, rows_per_program or rows, num_warps or warps


def quantize_rows_triton(x: torch.Tensor, inv_max: float, fp8_max: float, min_scale: float, *,
                         rows_per_program: int | None = None, num_warps: int | None = None,
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """One launch of :func:`petri.engine.cuda.fp8_tier.fp8.quantize_rows` for a tensor :func:`triton_quantizable`
    takes. ``rows_per_program`` and ``num_warps`` override :func:`_launch_shape`'s (the results are
    the same bits whatever the launch: each row is computed alone)."""
    rows, width = x.shape
    q = torch.empty((rows, width), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows:
        block, per_program, warps = _launch_shape(width, rows_per_program, num_warps)
        _quantize_rows_kernel[(triton.cdiv(rows, per_program),)](
            x, q, scale, rows, width, x.stride(0), q.stride(0), inv_max, fp8_max, min_scale,
            BLOCK=block, ROWS=per_program, num_warps=warps, enable_fp_fusion=False,
        )
    return q, scale


def gelu_gate_quantized(projected: torch.Tensor, inv_max: float, fp8_max: float, min_scale: float,
                        pairs: torch.Tensor | None = None, *, rows_per_program: int | None = None,
                        num_warps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows(gated_activation(projected, "gelu_pytorch_tanh"))`` in one launch: projected
    (R, 2·I) bf16 CUDA → q (R, I) e4m3, scale (R,). ``pairs`` (R,) int32, optional: rows whose pair
    is -1 (padding of the small-batch layout) are left unwritten, as in
    :func:`petri.engine.cuda.fused.fused_experts.gated_activation`. ``rows_per_program`` and ``num_warps`` as
    in :func:`quantize_rows_triton`."""
    rows, double_width = projected.shape
    width = double_width // 2
    q = torch.empty((rows, width), dtype=torch.float8_e4m3fn, device=projected.device)
    scale = torch.empty(rows, dtype=torch.float32, device=projected.device)
    if rows:
        block, per_program, warps = _launch_shape(width, rows_per_program, num_warps)
        _gelu_gate_quant_kernel[(triton.cdiv(rows, per_program),)](
            projected, q, scale, pairs if pairs is not None else projected, rows, width, projected.stride(0),
            q.stride(0), inv_max, fp8_max, min_scale, BLOCK=block, ROWS=per_program, SKIP_PADDING=pairs is not None,
            num_warps=warps, enable_fp_fusion=False,  # the unfused kernel's roundings
        )
    return q, scale


if HAVE_TRITON:

    @triton.jit
    def _divided(values, divisor):
        """``values / divisor`` correctly rounded, the bits ``tl.math.div_rn`` gives, from the
        divisor's reciprocal (one ``div_rn`` per row, ``divisor`` broadcast over the row) and one
        fma correction per value (Markstein's): q = RN(v·r) with r = RN(1/divisor), e = v - q·divisor
        (exact, one fma), then RN(q + e·r), the correctly rounded quotient where nothing under- or
        overflows (the quotients here are at most 448, and one whose e underflows is far below
        e4m3's smallest value); an exact q (e = 0) is kept as it is, so a -0 stays -0. The e4m3
        results equal the ``div_rn`` ones on every finite bf16 value at several scales
        (``tests/engine/cuda/test_fp8.py``, GPU). On an H200 a ``div_rn`` per value took 17.6 µs to quantize
        3,072 rows of 2,816, a copy 6.1, the reciprocal alone 7.0 (one e4m3 value in 8.65 M off;
        ``experiments/kernel_levers.py --parts quantize``)."""
        reciprocal = tl.math.div_rn(1.0, divisor)
        quotient = values * reciprocal
        error = tl.fma(-quotient, divisor, values)
        return tl.where(error == 0.0, quotient, tl.fma(error, reciprocal, quotient))

    @triton.jit
    def quantize_store(values, valid, used, q_ptr, scale_ptr, rows, cols, q_stride, inv_max, fp8_max, min_scale):
        """Per row of the (ROWS, BLOCK) tile ``values``: scale = max(amax(|row|) · inv_max, min_scale);
        q = clamp(values / scale) in e4m3 (RNE; the division correctly rounded, :func:`_divided`).
        ``rows`` (ROWS, 1), ``cols`` (1, BLOCK); ``valid`` masks the tile, ``used`` (ROWS, 1) the
        rows written."""
        amax = tl.max(tl.where(valid, tl.abs(values), 0.0), axis=1)
        scale = tl.maximum(amax * inv_max, min_scale)[:, None]
        q = tl.minimum(tl.maximum(_divided(values, scale), -fp8_max), fp8_max)
        tl.store(q_ptr + rows * q_stride + cols, q.to(tl.float8e4nv), mask=valid)
        tl.store(scale_ptr + rows, scale, mask=used)

    @triton.jit
    def _quantize_rows_kernel(x_ptr, q_ptr, scale_ptr, n_rows, width, x_stride, q_stride, inv_max, fp8_max, min_scale,
                              BLOCK: tl.constexpr, ROWS: tl.constexpr):
        """ROWS rows per program, each held whole in registers (BLOCK ≥ width)."""
        rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
        cols = tl.arange(0, BLOCK)[None, :]
        used = rows < n_rows
        valid = used & (cols < width)
        x = tl.load(x_ptr + rows * x_stride + cols, mask=valid, other=0.0).to(tl.float32)
        quantize_store(x, valid, used, q_ptr, scale_ptr, rows, cols, q_stride, inv_max, fp8_max, min_scale)

    @triton.jit
    def _gelu_gate_quant_kernel(projected_ptr, q_ptr, scale_ptr, pairs_ptr, n_rows, width, projected_stride, q_stride,
                                inv_max, fp8_max, min_scale, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                                SKIP_PADDING: tl.constexpr):
        """The activation of ``petri.engine.cuda.fused.fused_experts._gelu_tanh_gate_kernel`` (CONTRACT: the fma
        nvcc makes), rounded to bf16, then quantized as :func:`_quantize_rows_kernel` does; ROWS rows
        per program. SKIP_PADDING: rows whose pair (``pairs_ptr``) is -1 are left unwritten (a
        program whose rows are all padding does nothing)."""
        rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
        used = rows < n_rows
        if SKIP_PADDING:
            used = used & (tl.load(pairs_ptr + rows, mask=used, other=-1) >= 0)
        if tl.max(used.to(tl.int32)) > 0:
            cols = tl.arange(0, BLOCK)[None, :]
            valid = used & (cols < width)
            start = projected_ptr + rows * projected_stride + cols
            x = tl.load(start, mask=valid, other=0.0).to(tl.float32)
            up = tl.load(start + width, mask=valid, other=0.0).to(tl.float32)
            cube = x * x * x
            inner = 0.7978845834732056 * tl.fma(0.044715, cube, x)
            gelu = (0.5 * x * (1.0 + libdevice.tanh(inner))).to(tl.bfloat16).to(tl.float32)
            activation = (gelu * up).to(tl.bfloat16).to(tl.float32)
            quantize_store(activation, valid, used, q_ptr, scale_ptr, rows, cols, q_stride, inv_max, fp8_max,
                            min_scale)
