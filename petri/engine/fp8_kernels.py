"""Triton kernels of the FP8 tier (:mod:`petri.engine.fp8`), one launch where the torch ops take
about eight: the per-row e4m3 quantization, and the experts' ``gelu_tanh(gate)·up`` with that
quantization fused. Each computes what its torch counterpart does, step by step (IEEE divisions,
round-to-nearest-even into e4m3, the bf16 activation rounded as the unfused kernel rounds it), so
the results are meant to be bit-equal (checked on the GPU in ``tests/test_fp8.py``).

Shapes: x (R, K) → q (R, K) e4m3, scale (R,) float32; projected (R, 2·I) bf16 → q (R, I), scale (R,).
"""

from __future__ import annotations

import torch

from petri.engine.fused_logits import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.fused_logits import libdevice

#: widest row one program quantizes (the row is held in registers)
MAX_WIDTH = 16384


def triton_quantizable(x: torch.Tensor) -> bool:
    """Whether :func:`quantize_rows_triton` takes ``x``: a 2-D CUDA tensor with unit column stride,
    rows of at most :data:`MAX_WIDTH`, outside ``torch.compile`` (there Inductor fuses the torch ops)."""
    return (HAVE_TRITON and x.is_cuda and x.dim() == 2 and x.stride(-1) == 1 and 0 < x.shape[1] <= MAX_WIDTH
            and not torch.compiler.is_compiling())


def _launch_shape(width: int) -> tuple[int, int]:
    block = triton.next_power_of_2(width)
    return block, max(1, min(16, block // 512))


def quantize_rows_triton(x: torch.Tensor, inv_max: float, fp8_max: float, min_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One launch of :func:`petri.engine.fp8.quantize_rows` for a tensor :func:`triton_quantizable` takes."""
    rows, width = x.shape
    q = torch.empty((rows, width), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows:
        block, warps = _launch_shape(width)
        _quantize_rows_kernel[(rows,)](x, q, scale, width, x.stride(0), q.stride(0), inv_max, fp8_max, min_scale,
                                       BLOCK=block, num_warps=warps, enable_fp_fusion=False)
    return q, scale


def gelu_gate_quantized(projected: torch.Tensor, inv_max: float, fp8_max: float, min_scale: float,
                        pairs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows(gated_activation(projected, "gelu_pytorch_tanh"))`` in one launch: projected
    (R, 2·I) bf16 CUDA → q (R, I) e4m3, scale (R,). ``pairs`` (R,) int32, optional: rows whose pair
    is -1 (padding of the small-batch layout) are left unwritten, as in
    :func:`petri.engine.fused_experts.gated_activation`."""
    rows, double_width = projected.shape
    width = double_width // 2
    q = torch.empty((rows, width), dtype=torch.float8_e4m3fn, device=projected.device)
    scale = torch.empty(rows, dtype=torch.float32, device=projected.device)
    if rows:
        block, warps = _launch_shape(width)
        _gelu_gate_quant_kernel[(rows,)](
            projected, q, scale, pairs if pairs is not None else projected, width, projected.stride(0), q.stride(0),
            inv_max, fp8_max, min_scale, BLOCK=block, SKIP_PADDING=pairs is not None, num_warps=warps,
            enable_fp_fusion=False,  # the unfused kernel's roundings
        )
    return q, scale


if HAVE_TRITON:

    @triton.jit
    def _quantize_store(values, valid, q_row_ptr, scale_ptr, row, inv_max, fp8_max, min_scale, BLOCK: tl.constexpr):
        """scale = max(amax(|values|) · inv_max, min_scale); q = clamp(values / scale) in e4m3 (RNE)."""
        amax = tl.max(tl.where(valid, tl.abs(values), 0.0), axis=0)
        scale = tl.maximum(amax * inv_max, min_scale)
        q = tl.minimum(tl.maximum(tl.math.div_rn(values, scale), -fp8_max), fp8_max)
        cols = tl.arange(0, BLOCK)
        tl.store(q_row_ptr + cols, q.to(tl.float8e4nv), mask=valid)
        tl.store(scale_ptr + row, scale)

    @triton.jit
    def _quantize_rows_kernel(x_ptr, q_ptr, scale_ptr, width, x_stride, q_stride, inv_max, fp8_max, min_scale,
                              BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        valid = cols < width
        x = tl.load(x_ptr + row * x_stride + cols, mask=valid, other=0.0).to(tl.float32)
        _quantize_store(x, valid, q_ptr + row * q_stride, scale_ptr, row, inv_max, fp8_max, min_scale, BLOCK)

    @triton.jit
    def _gelu_gate_quant_kernel(projected_ptr, q_ptr, scale_ptr, pairs_ptr, width, projected_stride, q_stride, inv_max,
                                fp8_max, min_scale, BLOCK: tl.constexpr, SKIP_PADDING: tl.constexpr):
        """The activation of ``petri.engine.fused_experts._gelu_tanh_gate_kernel`` (CONTRACT: the fma
        nvcc makes), rounded to bf16, then quantized as :func:`_quantize_rows_kernel` does.
        SKIP_PADDING: rows whose pair (``pairs_ptr``) is -1 are left unwritten."""
        row = tl.program_id(0).to(tl.int64)
        if SKIP_PADDING:
            used = tl.load(pairs_ptr + row) >= 0
        else:
            used = True
        if used:
            cols = tl.arange(0, BLOCK)
            valid = cols < width
            x = tl.load(projected_ptr + row * projected_stride + cols, mask=valid, other=0.0).to(tl.float32)
            up = tl.load(projected_ptr + row * projected_stride + width + cols, mask=valid, other=0.0).to(tl.float32)
            cube = x * x * x
            inner = 0.7978845834732056 * tl.fma(0.044715, cube, x)
            gelu = (0.5 * x * (1.0 + libdevice.tanh(inner))).to(tl.bfloat16).to(tl.float32)
            activation = (gelu * up).to(tl.bfloat16).to(tl.float32)
            _quantize_store(activation, valid, q_ptr + row * q_stride, scale_ptr, row, inv_max, fp8_max, min_scale,
                            BLOCK)
