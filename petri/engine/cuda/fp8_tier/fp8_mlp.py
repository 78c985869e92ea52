"""The FP8 tier's dense MLP (:mod:`petri.engine.cuda.fp8_tier.fp8`) with its input rows already quantized: the
fused norms (:mod:`petri.engine.cuda.fused.fused_norms`) quantize the feed-forward input once for the MLP and
the experts, and the overlapped MLP (:mod:`petri.engine.cuda.fused.overlapped_mlp`) runs this beside the
experts. With the MLP's gate and up stacked (:mod:`petri.engine.cuda.fused.stacked_projections`) and the tanh
GELU, the activation and the down product's row quantization are one op
(``petri::gelu_gate_quantized``).

Shapes: rows xq (M, H) e4m3 with x_scale (M,) float32; the MLP's output (M, H) bf16.
"""

from __future__ import annotations

from typing import cast

import torch

from petri.engine.cuda.fp8_tier.fp8 import FP8, activation_quantized, linear_product
from petri.engine.cuda.fused.stacked_projections import GROUP


def _gate_up_linears(mlp) -> tuple[list[torch.nn.Linear], list[int] | None]:
    """The linears that compute ``mlp``'s gate and up products: its stacked group's linear and the
    widths to split its output by (:mod:`petri.engine.cuda.fused.stacked_projections`), or its own two."""
    entry = getattr(mlp.gate_proj, GROUP, None)
    if entry is not None and list(entry[0].members) == [mlp.gate_proj, mlp.up_proj]:
        return [entry[0].stacked], entry[0].widths
    return [mlp.gate_proj, mlp.up_proj], None


def takes_quantized(mlp, experts) -> bool:
    """Whether the FP8 tier is on for a layer's dense MLP (its gate and up linears) and experts, so
    that both can take their inputs quantized: :func:`gate_up_quantized`, and the experts' forward's
    ``hidden_scale``."""
    linears, _ = _gate_up_linears(mlp)
    return all(hasattr(m, "_petri_fp8_weight") for m in linears) and hasattr(experts, "_petri_fp8_gate_up")


def gate_up_quantized(mlp, xq: torch.Tensor, x_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``mlp``'s gate and up products of rows already quantized: xq (M, H) e4m3, x_scale (M,) →
    gate, up (M, I) bf16 each, what its FP8 linears compute from the bf16 rows (:func:`takes_quantized`)."""
    linears, widths = _gate_up_linears(mlp)
    products = [linear_product(m, xq, x_scale) for m in linears]
    found = tuple(products[0].split(widths, dim=-1)) if widths is not None else tuple(products)
    return cast(tuple[torch.Tensor, torch.Tensor], found)  # the gate's and the up's


@torch.library.custom_op("petri::gelu_gate_quantized", mutates_args=())
def gelu_gate_quantized_op(projected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`activation_quantized` of the tanh GELU as one op, opaque to ``torch.compile``: projected
    (R, 2·I) → q (R, I) e4m3, scale (R,) float32. Compiled, the torch ops of the activation and the
    quantization would be traced and fused by Inductor; through the op they are one launch of
    :func:`petri.engine.cuda.fp8_tier.fp8_kernels.gelu_gate_quantized` on CUDA (the eager ops' roundings)."""
    return activation_quantized(projected, "gelu_pytorch_tanh")


@gelu_gate_quantized_op.register_fake
def _(projected):
    rows, double_width = projected.shape
    return (projected.new_empty((rows, double_width // 2), dtype=FP8),
            projected.new_empty((rows,), dtype=torch.float32))


def mlp_quantized(mlp, xq: torch.Tensor, x_scale: torch.Tensor) -> torch.Tensor:
    """``mlp``'s output of rows already quantized: xq (M, H) e4m3, x_scale (M,) → (M, H) bf16, what
    its FP8 linears compute from the bf16 rows (:func:`takes_quantized`). With its gate and up as one
    stacked product of equal halves (:mod:`petri.engine.cuda.fused.stacked_projections`), the tanh GELU and an
    FP8 down linear, the activation and the down product's row quantization are one op
    (``petri::gelu_gate_quantized``); otherwise :func:`gate_up_quantized`, the MLP's activation and
    its down linear."""
    linears, widths = _gate_up_linears(mlp)
    down = mlp.down_proj
    fused = (len(linears) == 1 and widths is not None and len(widths) == 2 and widths[0] == widths[1]
             and getattr(getattr(mlp, "config", None), "hidden_activation", None) == "gelu_pytorch_tanh"
             and hasattr(down, "_petri_fp8_weight"))
    if not fused:
        gate, up = gate_up_quantized(mlp, xq, x_scale)
        return down(mlp.act_fn(gate) * up)
    aq, a_scale = gelu_gate_quantized_op(linear_product(linears[0], xq, x_scale))
    return linear_product(down, aq, a_scale)
