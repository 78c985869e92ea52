"""A decoder layer's mixture-of-experts block as one custom op: the expert GEMMs of transformers'
``grouped_mm`` implementation, with the gather before them, the gated activation between them and
the weighted combine after them as Triton kernels.

Why: in the compiled 12 × 24 seed of the full-size model (one H200) the routing glue around
``torch._grouped_mm`` cost more than the expert GEMMs themselves: Inductor fused the gather of the
routed rows with the RMSNorm before it into a pointwise kernel that ran at about a fifth of the
memory bandwidth (225 ms per seed), and the combine (gather by the inverse permutation, float32
weights, sum over the top-k) took 156 ms (the profile in ``experiments/results/first_request_h200_cold.json``
as of commit 402c327). Here each is one bandwidth-bound pass, and the op is opaque to
``torch.compile``, so Inductor compiles the rest of the layer around it: the compiled seed went from
2.29 s to 1.95 s (``experiments/results/bench_h200_b12_p200_tiers.json``).

The algorithm is transformers' ``grouped_mm_experts_forward`` (``transformers.integrations.moe``)
step by step: sort the (token, k) pairs by expert (on one-byte keys when there are at most 256
experts: one radix pass instead of eight); gather the tokens' rows; one grouped GEMM for the
concatenated gate/up projection; ``act(gate) * up`` (one Triton kernel for the tanh GELU); one
grouped GEMM for the down projection; multiply each row by its routing weight in float32; sum each token's top-k rows in float32; cast to
the hidden dtype. Shapes, with T tokens, K experts per token, E experts, H hidden, I expert width:

    hidden (T, H)   top_k_index (T, K) int   top_k_weights (T, K) float32
    gate_up (E, 2·I, H)   down (E, H, I)   →   (T, H) in hidden's dtype

The gather and the GEMMs are the same operations on the same inputs, and the activation kernel
equals torch's on every bf16 input, so all three are bit-equal to transformers'; the combine adds
each token's K products in the order k = 0 … K-1, which need not be the order of ``torch.sum``: on
an H200, 0.005 % of the outputs differ from transformers' (``experiments/gpu_check.py experts``).
:func:`experts_reference` is the same op in plain torch (the CPU path, and what the Triton kernels
are checked against bit for bit on the GPU: ``tests/engine/cuda/test_fused_experts.py``). On the CPU it equals
transformers' experts up to float rounding, not always bit for bit: in float32, 8 experts top-3, the
outputs are equal at 5 and 64 tokens and up to 1.9e-9 apart at 25 (which shapes differ was not
traced further).
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

from petri.engine.cuda.fused.fused_logits import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.cuda.fused.fused_logits import libdevice


#: ``hidden_activation`` names the op supports, as the torch call transformers makes for each
ACTIVATIONS = {
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "silu": F.silu,
}


def route(top_k_index: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort the T·K (token, k) pairs by expert, as transformers does.

    Returns ``order`` (T·K,): pair ids (token·K + k) in expert order; ``position`` (T·K,): where
    each pair landed in that order (the inverse permutation); ``offsets`` (E,) int32: the end of
    each expert's group of rows."""
    expert_ids = top_k_index.reshape(-1)
    if num_experts <= 256:  # one-byte keys: one radix pass instead of eight (rows of an expert in any order)
        expert_ids = expert_ids.to(torch.uint8)
    sorted_ids, order = torch.sort(expert_ids, stable=True)
    # histc, not bincount: no host synchronisation (CUDA graphs); CUDA takes ints, the CPU floats
    counts = torch.histc(
        sorted_ids.int() if sorted_ids.is_cuda else sorted_ids.float(), bins=num_experts, min=0, max=num_experts - 1
    )
    offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel(), device=order.device)
    return order, position, offsets


def gated_activation(projected: torch.Tensor, activation: str, contract: bool = True,
                     pairs: torch.Tensor | None = None) -> torch.Tensor:
    """``act(gate) * up`` of the concatenated projection: (R, 2·I) → (R, I). One Triton kernel for
    the tanh GELU on CUDA (bit-equal to torch's, checked over every bf16 input on the GPU), else
    transformers' torch ops. ``pairs`` (R,) int32, optional: each row's (token, k) pair, -1 for a
    padding row of the small-batch layout (:func:`petri.engine.cuda.fused.batch1_experts.align_blocks`); the
    kernel leaves padding rows unwritten (nothing reads them: about two rows in three at one sample)."""
    if projected.is_cuda and HAVE_TRITON and activation == "gelu_pytorch_tanh" and projected.dtype == torch.bfloat16:
        rows, double_width = projected.shape
        width = double_width // 2
        out = torch.empty((rows, width), dtype=projected.dtype, device=projected.device)
        block = 1024
        _gelu_tanh_gate_kernel[(rows, triton.cdiv(width, block))](
            projected, out, pairs if pairs is not None else projected, width, projected.stride(0), out.stride(0),
            BLOCK=block, CONTRACT=contract, SKIP_PADDING=pairs is not None, enable_fp_fusion=False,
        )
        return out
    gate, up = projected.chunk(2, dim=-1)
    return ACTIVATIONS[activation](gate) * up


def expert_mlp(rows: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, offsets: torch.Tensor, activation: str) -> torch.Tensor:
    """The experts on rows grouped by expert: (R, H) → (R, H), transformers' ops and order."""
    projected = torch._grouped_mm(rows, gate_up.transpose(-2, -1), offs=offsets)
    return torch._grouped_mm(gated_activation(projected, activation), down.transpose(-2, -1), offs=offsets)


def experts_reference(
    hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
    gate_up: torch.Tensor, down: torch.Tensor, activation: str,
) -> torch.Tensor:
    """The op in plain torch (shapes in the module docstring)."""
    tokens, top_k = top_k_index.shape
    order, position, offsets = route(top_k_index, gate_up.shape[0])
    rows = hidden.index_select(0, torch.div(order, top_k, rounding_mode="floor"))
    out = expert_mlp(rows, gate_up, down, offsets, activation)
    return combine_rows(out, position, top_k_weights, hidden.dtype)


def combine_rows(out: torch.Tensor, position: torch.Tensor, top_k_weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """out[t] = Σ_k float(rows[position[t·K + k]]) · weight[t, k], k = 0 … K-1 in order, cast to
    ``dtype``: rows (T·K, H) in expert order, position (T·K,), top_k_weights (T, K) → (T, H). One
    Triton kernel on CUDA, plain torch elsewhere (the same order of additions)."""
    tokens, top_k = top_k_weights.shape
    width = out.shape[1]
    if out.is_cuda and HAVE_TRITON:
        combined = torch.empty((tokens, width), dtype=dtype, device=out.device)
        block = 512
        _combine_kernel[(tokens, triton.cdiv(width, block))](
            out, position, top_k_weights.contiguous().float(), combined, width, out.stride(0), combined.stride(0),
            TOP_K=top_k, BLOCK=block, enable_fp_fusion=False,  # multiply, then add: the eager rounding
        )
        return combined
    weighted = out.index_select(0, position).float() * top_k_weights.reshape(-1, 1).float()
    total = weighted.view(tokens, top_k, -1)[:, 0].clone()
    for k in range(1, top_k):  # k = 0 … K-1 in order, as the Triton combine adds them
        total += weighted.view(tokens, top_k, -1)[:, k]
    return total.to(dtype)


if HAVE_TRITON:

    @triton.jit
    def _gather_kernel(src_ptr, order_ptr, out_ptr, width, src_stride, out_stride, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
        """Row j of out = row order[j] // TOP_K of src."""
        j = tl.program_id(0).to(tl.int64)
        token = tl.load(order_ptr + j) // TOP_K
        for start in range(0, width, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            valid = cols < width
            tl.store(out_ptr + j * out_stride + cols, tl.load(src_ptr + token * src_stride + cols, mask=valid), mask=valid)

    @triton.jit
    def _gelu_tanh_gate_kernel(projected_ptr, out_ptr, pairs_ptr, width, projected_stride, out_stride,
                               BLOCK: tl.constexpr, CONTRACT: tl.constexpr, SKIP_PADDING: tl.constexpr):
        """out[r, c] = bf16(bf16(gelu_tanh(gate)) · up) with gate = projected[r, c], up = projected[r, I + c],
        gelu_tanh as PyTorch's CUDA kernel evaluates it in float32:
        0.5·x·(1 + tanh(β·fma(κ, x³, x))), β = float32(√2·(2/√π)·0.5), κ = 0.044715, tanhf (the fma is
        nvcc's contraction of ``x + κ·x³``; ``CONTRACT=False`` rounds the product first). SKIP_PADDING:
        rows whose pair (``pairs_ptr``) is -1 are left unwritten."""
        row = tl.program_id(0).to(tl.int64)
        if SKIP_PADDING:
            used = tl.load(pairs_ptr + row) >= 0
        else:
            used = True
        if used:
            cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
            valid = cols < width
            x = tl.load(projected_ptr + row * projected_stride + cols, mask=valid, other=0.0).to(tl.float32)
            up = tl.load(projected_ptr + row * projected_stride + width + cols, mask=valid, other=0.0).to(tl.float32)
            cube = x * x * x
            if CONTRACT:
                inner = 0.7978845834732056 * tl.fma(0.044715, cube, x)
            else:
                inner = 0.7978845834732056 * (x + 0.044715 * cube)
            gelu = (0.5 * x * (1.0 + libdevice.tanh(inner))).to(tl.bfloat16).to(tl.float32)
            tl.store(out_ptr + row * out_stride + cols, (gelu * up).to(tl.bfloat16), mask=valid)

    @triton.jit
    def _combine_kernel(rows_ptr, position_ptr, weight_ptr, out_ptr, width, rows_stride, out_stride,
                        TOP_K: tl.constexpr, BLOCK: tl.constexpr):
        """out[t] = Σ_k float(rows[position[t·K + k]]) · weight[t, k], k in order, cast to out's dtype."""
        token = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        valid = cols < width
        total = tl.zeros((BLOCK,), tl.float32)
        for k in tl.static_range(TOP_K):
            row = tl.load(position_ptr + token * TOP_K + k)
            weight = tl.load(weight_ptr + token * TOP_K + k).to(tl.float32)
            values = tl.load(rows_ptr + row * rows_stride + cols, mask=valid, other=0.0).to(tl.float32)
            total = total + values * weight
        tl.store(out_ptr + token * out_stride + cols, total.to(out_ptr.dtype.element_ty), mask=valid)


def experts_triton(
    hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
    gate_up: torch.Tensor, down: torch.Tensor, activation: str,
) -> torch.Tensor:
    """The op with the gather and the combine as Triton kernels (CUDA; shapes in the module docstring)."""
    tokens, top_k = top_k_index.shape
    width = hidden.shape[1]
    hidden = hidden.contiguous()
    order, position, offsets = route(top_k_index, gate_up.shape[0])
    rows = torch.empty((tokens * top_k, width), dtype=hidden.dtype, device=hidden.device)
    _gather_kernel[(tokens * top_k,)](hidden, order, rows, width, hidden.stride(0), rows.stride(0), TOP_K=top_k, BLOCK=1024)
    out = expert_mlp(rows, gate_up, down, offsets, activation)
    return combine_rows(out, position, top_k_weights, hidden.dtype)


def experts_op(name: str, fast, doc: str):
    """The custom op ``petri::<name>`` (opaque to ``torch.compile``) over the experts' arguments
    (``hidden``, ``top_k_index``, ``top_k_weights``, ``gate_up``, ``down``, ``activation``; shapes in
    the module docstring): ``fast`` (the same arguments) on CUDA with Triton, else
    :func:`experts_reference`. Its fake (what ``torch.compile`` traces) is an empty tensor like
    ``hidden``; ``doc`` is the op's docstring."""

    def experts(
        hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
        gate_up: torch.Tensor, down: torch.Tensor, activation: str,
    ) -> torch.Tensor:
        run = fast if hidden.is_cuda and HAVE_TRITON else experts_reference
        return run(hidden, top_k_index, top_k_weights, gate_up, down, activation)

    experts.__name__ = experts.__qualname__ = name
    experts.__doc__ = doc
    op = torch.library.custom_op(f"petri::{name}", experts, mutates_args=())
    op.register_fake(lambda hidden, *rest: torch.empty_like(hidden))
    return op


moe_experts = experts_op("moe_experts", experts_triton,
                         ":func:`experts_triton` on CUDA with Triton, else :func:`experts_reference`.")


def _fused_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    return moe_experts(hidden_states, top_k_index, top_k_weights, self.gate_up_proj, self.down_proj, self._petri_activation)


def fusable_reason(experts: torch.nn.Module) -> str | None:
    """``None`` when ``experts`` has the layout the op computes, else why not."""
    flags = {"has_gate": True, "has_bias": False, "is_transposed": False, "has_post_expert_norm": False}
    for name, wanted in flags.items():
        if getattr(experts, name, wanted) != wanted:
            return f"experts.{name} is {getattr(experts, name)}"
    if not getattr(experts, "is_concatenated", True):
        return "the gate/up weights are interleaved"
    if getattr(experts, "_is_expert_parallel", False):
        return "expert parallelism"
    for name in ("gate_up_proj", "down_proj", "num_experts"):
        if not hasattr(experts, name):
            return f"experts have no {name}"
    activation = getattr(experts.config, "hidden_activation", None)
    if activation not in ACTIVATIONS:
        return f"activation {activation!r} is not one of {sorted(ACTIVATIONS)}"
    return None


def fuse_experts(model: Any, layers=None) -> str | None:
    """Route the experts of every layer of ``layers`` (the decoder layers of ``model``, a
    ``DiffusionGemmaForBlockDiffusion``, unless given: the compiled tier also passes the prompt
    encoder's) through :func:`moe_experts`, in place. Returns ``None``, or why nothing was changed
    (then the layers are untouched)."""
    layers = model.model.decoder.layers if layers is None else layers
    experts: list[Any] = [getattr(layer, "experts", None) for layer in layers]
    if any(module is None for module in experts):
        return "a layer has no experts"
    for module in experts:
        reason = fusable_reason(module)
        if reason is not None:
            return reason
    for module in experts:
        module._petri_activation = module.config.hidden_activation
        module.forward = types.MethodType(_fused_forward, module)
    return None


def unfuse_experts(model: Any, layers=None) -> None:
    """Undo :func:`fuse_experts` for ``layers`` (the decoder layers unless given): their own forward again."""
    for layer in model.model.decoder.layers if layers is None else layers:
        module = getattr(layer, "experts", None)
        if module is not None and "forward" in vars(module):
            del module.forward
