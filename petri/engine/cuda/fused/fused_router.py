"""A layer's router with its softmax, top-k, renormalisation and per-expert scale as one op
(issue 25: the compiled tier's routing).

transformers' ``DiffusionGemmaTextRouter`` scores the experts with a linear layer, then takes a
float32 softmax over the E experts, ``torch.topk`` of the probabilities, divides the K chosen ones
by their sum and multiplies each by its expert's ``per_expert_scale``. Compiled, the softmax is an
Inductor kernel but ``torch.topk`` stays two library kernels (a radix select and a bitonic sort):
about 13 µs a layer at one sample on an H200, 0.4 ms of a 20 ms step over 30 layers
(``experiments/results/bench_h200_shapes_b1_b12_small_batch.json``'s profile). Here everything
after the scores is one Triton program per block of tokens, and the op is opaque to
``torch.compile`` (like the experts op, :mod:`petri.engine.cuda.fused.fused_experts`).

The kernel computes the same function: exp and division as correctly rounded float32 (``expf``,
``div_rn``), the K largest probabilities by repeated arg-max (the lowest index first among equal
ones; ``torch.topk`` leaves that order unspecified), their sum added k = 0 … K-1 in order. Sums
are taken in another order than torch's, so weights can differ by float rounding, and the choice
between two experts whose probabilities tie after rounding can differ (checked on the GPU in
``tests/engine/cuda/test_fused_router.py``). :func:`route_top_k_reference` is transformers' ops (the CPU path,
bit-equal to the library's router there).

Shapes: scores (T, E) in the model dtype, per_expert_scale (E,) → probabilities (T, E) float32,
weights (T, K) float32, index (T, K) int64.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from petri.engine.cuda.fused.fused_logits import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from petri.engine.cuda.fused.fused_logits import libdevice

#: tokens per program of the Triton kernel
BLOCK_T = 16


def route_top_k_reference(scores: torch.Tensor, top_k: int, per_expert_scale: torch.Tensor):
    """transformers' router after the scores, in its own ops (shapes in the module docstring)."""
    probabilities = torch.softmax(scores, dim=-1, dtype=torch.float32)
    weights, index = torch.topk(probabilities, k=top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return probabilities, weights * per_expert_scale[index], index


def route_top_k_triton(scores: torch.Tensor, top_k: int, per_expert_scale: torch.Tensor):
    """:func:`route_top_k_reference` in one Triton launch (CUDA)."""
    tokens, experts = scores.shape
    scores = scores.contiguous()
    probabilities = torch.empty((tokens, experts), dtype=torch.float32, device=scores.device)
    weights = torch.empty((tokens, top_k), dtype=torch.float32, device=scores.device)
    index = torch.empty((tokens, top_k), dtype=torch.int64, device=scores.device)
    if tokens:
        _router_top_k_kernel[(triton.cdiv(tokens, BLOCK_T),)](
            scores, per_expert_scale, probabilities, weights, index, tokens, experts,
            TOP_K=top_k, E=triton.next_power_of_2(experts), K=triton.next_power_of_2(top_k), BLOCK_T=BLOCK_T,
            enable_fp_fusion=False,
        )
    return probabilities, weights, index


if HAVE_TRITON:

    @triton.jit
    def _router_top_k_kernel(scores_ptr, scale_ptr, probabilities_ptr, weights_ptr, index_ptr, TOKENS, EXPERTS,
                             TOP_K: tl.constexpr, E: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr):
        """BLOCK_T tokens: softmax over the experts, then TOP_K rounds of (largest, its first index),
        each chosen expert masked out for the next round; then the chosen weights over their sum
        (added in order) times their experts' scales."""
        rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        live = rows < TOKENS
        cols = tl.arange(0, E)
        real = cols < EXPERTS
        where = rows[:, None].to(tl.int64) * EXPERTS + cols[None, :]
        x = tl.load(scores_ptr + where, mask=live[:, None] & real[None, :], other=float("-inf")).to(tl.float32)
        x = tl.where(real[None, :], x, float("-inf"))
        shifted = x - tl.max(x, axis=1)[:, None]
        e = tl.where(real[None, :], libdevice.exp(shifted), 0.0)
        p = tl.math.div_rn(e, tl.sum(e, axis=1)[:, None])
        tl.store(probabilities_ptr + where, p, mask=live[:, None] & real[None, :])
        k_cols = tl.arange(0, K)
        chosen = tl.zeros((BLOCK_T, K), dtype=tl.float32)
        chosen_index = tl.zeros((BLOCK_T, K), dtype=tl.int32)
        total = tl.zeros((BLOCK_T,), dtype=tl.float32)
        candidates = tl.where(real[None, :], p, -1.0)
        for k in tl.static_range(TOP_K):
            best = tl.max(candidates, axis=1)
            best_index = tl.argmax(candidates, axis=1, tie_break_left=True).to(tl.int32)
            chosen = tl.where(k_cols[None, :] == k, best[:, None], chosen)
            chosen_index = tl.where(k_cols[None, :] == k, best_index[:, None], chosen_index)
            total = total + best
            candidates = tl.where(cols[None, :] == best_index[:, None], -1.0, candidates)
        keep = live[:, None] & (k_cols[None, :] < TOP_K)
        scale = tl.load(scale_ptr + chosen_index, mask=keep, other=0.0).to(tl.float32)
        out = rows[:, None].to(tl.int64) * TOP_K + k_cols[None, :]
        tl.store(weights_ptr + out, tl.math.div_rn(chosen, total[:, None]) * scale, mask=keep)
        tl.store(index_ptr + out, chosen_index.to(tl.int64), mask=keep)


@torch.library.custom_op("petri::router_top_k", mutates_args=())
def router_top_k(scores: torch.Tensor, top_k: int, per_expert_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`route_top_k_triton` on CUDA with Triton, else :func:`route_top_k_reference`."""
    if scores.is_cuda and HAVE_TRITON and scores.dim() == 2:
        return route_top_k_triton(scores, top_k, per_expert_scale)
    return route_top_k_reference(scores, top_k, per_expert_scale)


@router_top_k.register_fake
def _(scores, top_k, per_expert_scale):
    tokens, experts = scores.shape
    return (scores.new_empty((tokens, experts), dtype=torch.float32), scores.new_empty((tokens, top_k), dtype=torch.float32),
            scores.new_empty((tokens, top_k), dtype=torch.int64))


def route_scaled(router: Any, scaled: torch.Tensor):  # a transformers router: its children untyped
    """``router``'s projection of its scaled input (its norm times its scale and root, (T, H)), then
    :func:`router_top_k`: what a router returns (shapes in the module docstring)."""
    return router_top_k(router.proj(scaled), int(router.config.top_k_experts), router.per_expert_scale)


def _fused_router_forward(self, hidden_states: torch.Tensor):
    """transformers' ``DiffusionGemmaTextRouter.forward`` up to the scores (its norm, scale and
    projection, unchanged), then :func:`router_top_k`."""
    hidden_states = self.norm(hidden_states)
    return route_scaled(self, hidden_states * self.scale * self.scalar_root_size)


def fusable_router_reason(router: torch.nn.Module) -> str | None:
    """``None`` when ``router`` has the parts :func:`_fused_router_forward` reads, else what is missing."""
    for name in ("norm", "scale", "scalar_root_size", "proj", "per_expert_scale", "config"):
        if not hasattr(router, name):
            return f"the router has no {name}"
    if not hasattr(router.config, "top_k_experts"):
        return "the router's config has no top_k_experts"
    return None


def fuse_routers(layers) -> str | None:
    """Give the router of every layer of ``layers`` (a ``ModuleList`` of decoder or encoder layers)
    :func:`_fused_router_forward`, in place. Returns ``None``, or why nothing was changed."""
    routers: list[Any] = [getattr(layer, "router", None) for layer in layers]
    if any(router is None for router in routers):
        return "a layer has no router"
    for router in routers:
        if (reason := fusable_router_reason(router)) is not None:
            return reason
    for router in routers:
        router.forward = types.MethodType(_fused_router_forward, router)
    return None


def unfuse_routers(layers) -> None:
    """Undo :func:`fuse_routers`: the routers' own forward again."""
    for layer in layers:
        router = getattr(layer, "router", None)
        if router is not None and "forward" in vars(router):
            del router.forward
