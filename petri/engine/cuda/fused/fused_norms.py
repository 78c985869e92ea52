"""A decoder layer's norms around its feed-forward blocks as two row kernels (issue 25: the compiled
tier's fused norms).

transformers' ``DiffusionGemmaDecoderTextLayer`` runs eight RMSNorms outside its attention, and
seven of them, with two residual adds and the layer scalar, sit between the attention's output
projection and the next layer: after the attention ``r = residual + post_attention_layernorm(attention)``, then three
norms of ``r`` (``pre_feedforward_layernorm`` for the dense MLP, ``pre_feedforward_layernorm_2``
for the experts, the router's unscaled norm times its ``scale`` and ``hidden_size ** -0.5``); after
the two feed-forward blocks ``out = (r + post_feedforward_layernorm(post_feedforward_layernorm_1(mlp)
+ post_feedforward_layernorm_2(experts))) · layer_scalar``. Compiled, Inductor fuses each stretch
into looped reductions that re-read their rows once per reduction: at 12 samples on an H200 about
40 and 54 µs a layer where one read of the inputs and one write of the outputs take about 25 and 20
(issue 25's notes). Here each stretch is one Triton program per row, the row held in registers
(alone on an H200 at 3,072 rows: 26 and 23 µs in bf16, 34 µs with the FP8 quantization, against 30,
36 and 54 for the library's ops compiled by Inductor, ``experiments/results/kernel_levers_h200_norms.json``;
a 12 × 24 seed of the full-size architecture 2 % faster in bf16, 2.6 % in fp8-fast, docs/performance-log.md's
run log):

- :func:`feedforward_inputs`: attention (R, H), residual (R, H) → ``r`` (R, H), the MLP's input,
  the experts' input, the router's scaled input (R, H) each; in the FP8 tier the MLP's and the
  experts' inputs come out quantized per row (e4m3 (R, H) and float32 (R,) scales, as
  :func:`petri.engine.cuda.fp8_tier.fp8.quantize_rows` computes them), which saves each a bf16 write and read;
- :func:`layer_output`: MLP output, experts output, ``r`` (R, H) → the layer's output (R, H).

Both compute the library's function with its roundings: each norm in float32 (sum of squares over
H, plus eps, to the power -1/2, times the weight) rounded to the model's dtype where the module
returns, each add and product of bf16 tensors rounded as torch rounds it. Sums are taken in another
order than torch's, so results can differ by float rounding (GPU tests bound it); the ops are opaque
to ``torch.compile`` and fall back to :func:`feedforward_inputs_reference` /
:func:`layer_output_reference` (the library's ops, bit-equal to its modules) off CUDA.

:func:`fuse_norms_forward` is the decoder layer's forward with the two ops, the library's attention,
MLP and experts modules in between; the compiled tier compiles it in place of the layer's own
(:func:`petri.engine.torch.decoder_hooks.compile_layers`' ``forward``). Its router is the fused router's
top-k (:func:`petri.engine.cuda.fused.fused_router.route_scaled`) on the op's scaled input.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from petri.engine.cuda.fp8_tier.fp8 import FP8, FP8_MAX, INV_FP8_MAX, MIN_SCALE, quantize_rows
from petri.engine.cuda.fp8_tier.fp8_mlp import takes_quantized
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.cuda.fused.fused_router import fusable_router_reason
from petri.engine.cuda.fused.overlapped_mlp import feedforward_blocks, overlapped_feedforward_blocks

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.cuda.fp8_tier.fp8_kernels import quantize_store
    from petri.engine.cuda.fused.fused_logits import libdevice

#: the norms of a decoder layer the two ops replace, by attribute (the router's is ``router.norm``)
NORMS = ("post_attention_layernorm", "pre_feedforward_layernorm", "pre_feedforward_layernorm_2",
         "post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "post_feedforward_layernorm")


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """transformers' ``DiffusionGemmaRMSNorm`` in its own ops: float32 ``x · (mean(x²) + eps)^-1/2``,
    times ``weight`` where it has one, in ``x``'s dtype. (..., H) → (..., H)."""
    normed = x.float()
    normed = normed * torch.pow(normed.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    if weight is not None:
        normed = normed * weight.float()
    return normed.type_as(x)


def feedforward_inputs_reference(attention, residual, post_attention_weight, pre_weight, pre_2_weight, router_scale,
                                 router_root: float, eps: float):
    """The library's ops from the attention's output to the feed-forward blocks' inputs: attention,
    residual (R, H) → ``r``, the MLP's input, the experts' input, the router's scaled input (R, H)."""
    r = residual + rms_norm(attention, post_attention_weight, eps)
    router_input = rms_norm(r, None, eps) * router_scale * router_root
    return r, rms_norm(r, pre_weight, eps), rms_norm(r, pre_2_weight, eps), router_input


def layer_output_reference(mlp, experts, residual, weight_1, weight_2, weight_3, layer_scalar, eps: float):
    """The library's ops from the feed-forward blocks' outputs to the layer's: (R, H) each → (R, H)."""
    combined = rms_norm(mlp, weight_1, eps) + rms_norm(experts, weight_2, eps)
    out = residual + rms_norm(combined, weight_3, eps)
    out *= layer_scalar
    return out


def _row_launch(width: int, num_warps: int | None) -> tuple[int, int]:
    """(block, warps) of a one-row-per-program launch over rows of ``width``: the block is the width
    rounded up to a power of two, the warps as given, else block / 1,024 (1 to 16; 4 at the
    full-size width: ``experiments/kernel_levers.py --parts norms`` on an H200 timed 4, 8 and 16
    warps at 256 and 3,072 rows, 4 fastest at 3,072; at 256 rows 8 or 16 were 0.2 to 0.8 µs faster,
    about 40 µs of a batch-1 step over the 30 layers, not taken)."""
    block = triton.next_power_of_2(width)
    return block, num_warps or max(1, min(16, block // 1024))


def feedforward_inputs_triton(attention, residual, post_attention_weight, pre_weight, pre_2_weight, router_scale,
                              router_root: float, eps: float, quantize: bool, num_warps: int | None = None):
    """:func:`feedforward_inputs` in one launch (CUDA, contiguous (R, H) bf16 rows)."""
    rows, width = attention.shape
    r = torch.empty_like(residual)
    router_input = torch.empty_like(residual)
    dtype = FP8 if quantize else residual.dtype
    inputs = [torch.empty(rows, width, dtype=dtype, device=residual.device) for _ in range(2)]
    scales = [torch.empty(rows if quantize else 0, dtype=torch.float32, device=residual.device) for _ in range(2)]
    if rows:
        block, warps = _row_launch(width, num_warps)
        _feedforward_inputs_kernel[(rows,)](
            attention, residual, post_attention_weight, pre_weight, pre_2_weight, router_scale,
            r, inputs[0], scales[0], inputs[1], scales[1], router_input,
            width, router_root, eps, INV_FP8_MAX, FP8_MAX, MIN_SCALE,
            BLOCK=block, QUANTIZE=quantize, num_warps=warps, enable_fp_fusion=False,  # torch's roundings: no fma
        )
    return r, inputs[0], scales[0], inputs[1], scales[1], router_input


def layer_output_triton(mlp, experts, residual, weight_1, weight_2, weight_3, layer_scalar, eps: float,
                        num_warps: int | None = None):
    """:func:`layer_output` in one launch (CUDA, contiguous (R, H) bf16 rows)."""
    rows, width = residual.shape
    out = torch.empty_like(residual)
    if rows:
        block, warps = _row_launch(width, num_warps)
        _layer_output_kernel[(rows,)](
            mlp, experts, residual, weight_1, weight_2, weight_3, layer_scalar, out, width, eps,
            BLOCK=block, num_warps=warps, enable_fp_fusion=False,
        )
    return out


if HAVE_TRITON:

    @triton.jit
    def _rms(x, valid, width, eps):
        """float32 ``x · (Σx² / width + eps)^-1/2`` of one row held as a (1, BLOCK) tile, lanes past
        ``width`` zero."""
        x = tl.where(valid, x, 0.0)
        return x * libdevice.rsqrt(tl.sum(x * x, axis=1) / width + eps)[:, None]

    @triton.jit
    def _load(ptr, offsets, valid):
        return tl.load(ptr + offsets, mask=valid, other=0.0).to(tl.float32)

    @triton.jit
    def _feedforward_inputs_kernel(attention_ptr, residual_ptr, post_attention_w, pre_w, pre_2_w, router_scale_ptr,
                                   r_ptr, pre_ptr, pre_scale_ptr, pre_2_ptr, pre_2_scale_ptr, router_ptr,
                                   width, router_root, eps, inv_max, fp8_max, min_scale,
                                   BLOCK: tl.constexpr, QUANTIZE: tl.constexpr):
        """One row as a (1, BLOCK) tile: ``r`` = bf16(residual + bf16(norm(attention) · w)); then
        norm(r) times each feed-forward norm's weight (bf16, or quantized as
        ``_quantize_rows_kernel`` quantizes the bf16 value), and the router's input
        bf16(bf16(bf16(norm(r)) · scale) · root), each computed from ``r`` and stored in turn so
        that one output at a time is held (fewer registers: more rows in flight)."""
        row = tl.program_id(0).to(tl.int64) + tl.zeros((1, 1), dtype=tl.int64)
        cols = tl.arange(0, BLOCK)[None, :]
        valid = cols < width
        at = row * width + cols
        attention = _rms(_load(attention_ptr, at, valid), valid, width, eps) * _load(post_attention_w, cols, valid)
        r = (_load(residual_ptr, at, valid) + attention.to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16)
        tl.store(r_ptr + at, r, mask=valid)
        r = r.to(tl.float32)
        inv = libdevice.rsqrt(tl.sum(r * r, axis=1) / width + eps)[:, None]
        scaled = ((r * inv).to(tl.bfloat16).to(tl.float32) * _load(router_scale_ptr, cols, valid)).to(tl.bfloat16)
        tl.store(router_ptr + at, (scaled.to(tl.float32) * router_root).to(tl.bfloat16), mask=valid)
        pre = ((r * inv) * _load(pre_w, cols, valid)).to(tl.bfloat16)
        if QUANTIZE:
            quantize_store(pre.to(tl.float32), valid, row >= 0, pre_ptr, pre_scale_ptr, row, cols, width, inv_max,
                            fp8_max, min_scale)
        else:
            tl.store(pre_ptr + at, pre, mask=valid)
        pre_2 = ((r * inv) * _load(pre_2_w, cols, valid)).to(tl.bfloat16)
        if QUANTIZE:
            quantize_store(pre_2.to(tl.float32), valid, row >= 0, pre_2_ptr, pre_2_scale_ptr, row, cols, width,
                            inv_max, fp8_max, min_scale)
        else:
            tl.store(pre_2_ptr + at, pre_2, mask=valid)

    @triton.jit
    def _layer_output_kernel(mlp_ptr, experts_ptr, residual_ptr, w_1, w_2, w_3, layer_scalar_ptr, out_ptr, width, eps,
                             BLOCK: tl.constexpr):
        """One row as a (1, BLOCK) tile: bf16(bf16(residual + bf16(norm(bf16(bf16(norm(mlp) · w₁) +
        bf16(norm(experts) · w₂))) · w₃)) · layer_scalar)."""
        row = tl.program_id(0).to(tl.int64) + tl.zeros((1, 1), dtype=tl.int64)
        cols = tl.arange(0, BLOCK)[None, :]
        valid = cols < width
        at = row * width + cols
        h_1 = (_rms(_load(mlp_ptr, at, valid), valid, width, eps) * _load(w_1, cols, valid)).to(tl.bfloat16)
        h_2 = (_rms(_load(experts_ptr, at, valid), valid, width, eps) * _load(w_2, cols, valid)).to(tl.bfloat16)
        combined = (h_1.to(tl.float32) + h_2.to(tl.float32)).to(tl.bfloat16).to(tl.float32)
        h_3 = (_rms(combined, valid, width, eps) * _load(w_3, cols, valid)).to(tl.bfloat16)
        out = (_load(residual_ptr, at, valid) + h_3.to(tl.float32)).to(tl.bfloat16)
        scalar = tl.load(layer_scalar_ptr + row * 0).to(tl.float32)
        tl.store(out_ptr + at, (out.to(tl.float32) * scalar).to(tl.bfloat16), mask=valid)


def _triton_rows(*tensors: torch.Tensor) -> bool:
    """Whether the Triton kernels take these (R, H) tensors: bf16 CUDA rows, contiguous."""
    return HAVE_TRITON and all(t.is_cuda and t.dtype == torch.bfloat16 and t.dim() == 2 and t.is_contiguous()
                               for t in tensors)


@torch.library.custom_op("petri::feedforward_inputs", mutates_args=())
def feedforward_inputs(
    attention: torch.Tensor, residual: torch.Tensor, post_attention_weight: torch.Tensor, pre_weight: torch.Tensor,
    pre_2_weight: torch.Tensor, router_scale: torch.Tensor, router_root: float, eps: float, quantize: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(``r``, MLP input, its scales, experts input, its scales, router input): the inputs bf16
    (R, H) with empty scales, or with ``quantize`` e4m3 (R, H) with float32 (R,) scales
    (:func:`petri.engine.cuda.fp8_tier.fp8.quantize_rows` of the bf16 values). Triton on CUDA, else the reference."""
    if _triton_rows(attention, residual):
        return feedforward_inputs_triton(attention, residual, post_attention_weight, pre_weight, pre_2_weight,
                                         router_scale, router_root, eps, quantize)
    r, pre, pre_2, router_input = feedforward_inputs_reference(
        attention, residual, post_attention_weight, pre_weight, pre_2_weight, router_scale, router_root, eps)
    if quantize:
        (pre, pre_scale), (pre_2, pre_2_scale) = quantize_rows(pre), quantize_rows(pre_2)
    else:
        pre_scale, pre_2_scale = (pre.new_empty(0, dtype=torch.float32) for _ in range(2))
    return r, pre, pre_scale, pre_2, pre_2_scale, router_input


@feedforward_inputs.register_fake
def _(attention, residual, post_attention_weight, pre_weight, pre_2_weight, router_scale, router_root, eps, quantize):
    rows, width = residual.shape
    dtype, scale_rows = (FP8, rows) if quantize else (residual.dtype, 0)
    inputs = [residual.new_empty((rows, width), dtype=dtype) for _ in range(2)]
    scales = [residual.new_empty(scale_rows, dtype=torch.float32) for _ in range(2)]
    return (torch.empty_like(residual), inputs[0], scales[0], inputs[1], scales[1], torch.empty_like(residual))


@torch.library.custom_op("petri::layer_output", mutates_args=())
def layer_output(
    mlp: torch.Tensor, experts: torch.Tensor, residual: torch.Tensor, weight_1: torch.Tensor, weight_2: torch.Tensor,
    weight_3: torch.Tensor, layer_scalar: torch.Tensor, eps: float,
) -> torch.Tensor:
    """The layer's output (R, H) from its feed-forward blocks' outputs and ``r`` (module docstring).
    Triton on CUDA, else the reference."""
    if _triton_rows(mlp, experts, residual):
        return layer_output_triton(mlp, experts, residual, weight_1, weight_2, weight_3, layer_scalar, eps)
    return layer_output_reference(mlp, experts, residual, weight_1, weight_2, weight_3, layer_scalar, eps)


@layer_output.register_fake
def _(mlp, experts, residual, weight_1, weight_2, weight_3, layer_scalar, eps):
    return torch.empty_like(residual)


def fuse_norms_forward(self, hidden_states: torch.Tensor, position_embeddings=None, attention_mask=None,
                       position_ids=None, *, mlp_beside=None, **kwargs) -> torch.Tensor:
    """transformers' ``DiffusionGemmaDecoderTextLayer.forward`` (both its keyword spellings of the
    cache pass through ``kwargs`` to the attention) with the norms between the attention and the
    next layer as :func:`feedforward_inputs` and :func:`layer_output`. In the FP8 tier (the MLP's
    gate and up FP8 linears) their inputs come quantized from the op: the MLP
    (:func:`petri.engine.cuda.fp8_tier.fp8_mlp.mlp_quantized`) and the experts take them as they are. ``mlp_beside``
    (the compiled tier's overlapped MLP): in the FP8 tier, a :class:`petri.engine.cuda.fused.overlapped_mlp.MLPBeside`
    whose MLP runs on a side stream beside the router and experts
    (:func:`petri.engine.cuda.fused.overlapped_mlp.overlapped_feedforward_blocks`); ``None``, or bf16
    layers (measured no faster there, :mod:`petri.engine.cuda.fused.overlapped_mlp`): the two blocks in
    sequence. hidden_states (S, L, H) → (S, L, H)."""
    shape = hidden_states.shape
    attention, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                                  position_embeddings=position_embeddings, attention_mask=attention_mask,
                                  position_ids=position_ids, **kwargs)
    quantize = takes_quantized(self.mlp, self.experts)
    r, pre, pre_scale, pre_2, pre_2_scale, router_input = feedforward_inputs(
        attention.reshape(-1, shape[-1]).contiguous(), hidden_states.reshape(-1, shape[-1]).contiguous(),
        self.post_attention_layernorm.weight, self.pre_feedforward_layernorm.weight,
        self.pre_feedforward_layernorm_2.weight, self.router.scale, float(self.router.scalar_root_size),
        float(self.input_layernorm.eps), quantize)
    if mlp_beside is None or not quantize:
        mlp, experts = feedforward_blocks(self, pre, pre_scale, pre_2, pre_2_scale, router_input, quantize)
    else:
        mlp, experts = overlapped_feedforward_blocks(mlp_beside, self, pre, pre_scale, pre_2, pre_2_scale,
                                                     router_input, quantize)
    out = layer_output(mlp.contiguous(), experts.contiguous(), r, self.post_feedforward_layernorm_1.weight,
                       self.post_feedforward_layernorm_2.weight, self.post_feedforward_layernorm.weight,
                       self.layer_scalar, float(self.input_layernorm.eps))
    return out.view(shape)


def fuse_norms_reason(layer: Any) -> str | None:
    """``None`` when :func:`fuse_norms_forward` computes ``layer``'s forward, else what it lacks: the
    library's norms, one eps for all of them, the router's parts, the MLP and experts modules."""
    eps = getattr(getattr(layer, "input_layernorm", None), "eps", None)
    if eps is None:
        return "the layer has no input_layernorm with an eps"
    for name in (*NORMS, "router.norm"):
        norm = _submodule(layer, name)
        if norm is None:
            return f"the layer has no {name}"
        if getattr(norm, "eps", None) != eps:
            return f"{name}'s eps differs from input_layernorm's"
        if (getattr(norm, "weight", None) is None) != (name == "router.norm"):
            return f"{name} {'has' if name == 'router.norm' else 'lacks'} a weight"
    for name in ("self_attn", "mlp", "experts", "layer_scalar"):
        if not hasattr(layer, name):
            return f"the layer has no {name}"
    return fusable_router_reason(layer.router)


def _submodule(module: torch.nn.Module, dotted: str) -> torch.nn.Module | None:
    """``module``'s submodule at the dotted path, or ``None`` where there is none."""
    try:
        return module.get_submodule(dotted)
    except AttributeError:
        return None


def fused_norms_forward(layer: torch.nn.Module, mlp_beside=None):
    """``layer``'s forward with the fused norms (a bound method, not installed): what the compiled
    tier hands :func:`petri.engine.torch.decoder_hooks.compile_layers` to compile; ``mlp_beside`` as
    :func:`fuse_norms_forward` takes it."""
    if mlp_beside is None:
        return types.MethodType(fuse_norms_forward, layer)

    # a Python function, not functools.partial: Dynamo in torch 2.11 (the device's) breaks the graph on a partial
    def forward_beside(self, *args, **kwargs):
        return fuse_norms_forward(self, *args, mlp_beside=mlp_beside, **kwargs)

    return types.MethodType(forward_beside, layer)
