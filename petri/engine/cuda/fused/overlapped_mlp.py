"""A decoder layer's dense MLP on a second CUDA stream, beside its router and experts (issue 25: the
compiled tier's overlapped MLP).

Why: a DiffusionGemma decoder layer has two feed-forward blocks that read the same residual ``r``
and meet only at the layer's output norms: the dense MLP (gate and up 2 × 2,112 × 2,816, down
2,816 × 2,112) and the router with its 128 experts. At one sample (256 canvas rows) the experts'
grouped GEMMs read all their weights (about 0.37 ms a layer, bound by memory) while the MLP's
launches are bound by latency (its stacked gate and up product 10.8 µs at 256 rows in bf16,
``experiments/results/kernel_levers_h200_dense_self_conditioning.json``); run one after the other
they add up, run side by side the MLP's time hides under the experts' read. Under CUDA-graph
capture the side stream's work becomes a parallel branch of the graph (the side stream waits on the
capturing stream, which waits on it again before the layer's output), so a replayed step keeps the
overlap with no host work.

Measured (one H200, full-size architecture, ``experiments/bench.py``, side by side in one run, two
runs): in fp8-fast with the FP8 self-conditioning, one sample × 24 steps (prompt 1,600) 12.48 →
12.03 and 12.44 → 11.95 ms of forward graph a step (13.08 → 12.60 and 13.08 → 12.71 ms a step with
the prompt kept; ``experiments/results/bench_h200_shapes_b1_b12_overlapped_mlp.json`` and
``..._overlapped_mlp_2.json``); in bf16 no gain (17.97 against 18.06 ms: the experts read at the
memory's ceiling and the MLP's reads only add to theirs); at 12 samples even (1.687 / 1.684 s bf16,
1.209 / 1.207 and 1.164 / 1.159 s fp8-fast). So the fused norms' forward overlaps FP8 layers only
(:func:`petri.engine.cuda.fused.fused_norms.fuse_norms_forward`); the compiled tier's ``overlapped_mlp`` is on
by default since 2026-12-03 (opt-in before), ``overlapped_mlp=False`` runs the blocks in sequence.

Why on by default now, and why opt-in before: the blocks it computes are the sequential blocks' bit
for bit (one FP8 layer at 48 and 256 rows, eagerly and replayed from a CUDA graph, with the MLP
compiled or not: ``experiments/overlap_check.py``, ``experiments/results/overlap_check_h200.json``),
and the side stream changes no token (the same seeds with the MLP on the current stream give the
same tokens); but with the tier's kernels tuned by timing, seeds of the compiled FP8 tier differed
from the sequential tier's: of the tiny model's 576 argmax values (2 seeds × 3 samples × 6 steps ×
16 positions) 100 in one run and 54 in another, the count moving with what the process had
compiled before. ``experiments/compile_history.py`` explained it: Inductor tuned kernels compiled
again for dynamic shapes by timing them. Since the tier compiles in Inductor's deterministic mode
(:func:`petri.engine.torch.decoder_hooks.compile_function`) the overlapped tier's seeds are the
sequential tier's: all 576 argmax values equal, in fp8-fast and in bf16, with the MLP on the side
stream or on the current one (``overlap_check_h200_deterministic.json``, 2026-12-03). bf16 layers,
never overlapped, give the sequential tokens anyway.

How: :func:`feedforward_blocks` is the two blocks in sequence (what the fused norms' forward traces
by default). :func:`overlapped_feedforward_blocks` is opaque to ``torch.compile``
(``torch.compiler.disable``: the compiled layer breaks its graph there and resumes after, which
costs host time only where a step is not replayed from a graph) and on CUDA runs the MLP's block
(:class:`MLPBeside`'s, compiled on its own by the caller so that its kernels stay Inductor's) on its
side stream while the router and experts, already opaque ops, run on the current stream; off CUDA,
or when the input is not on one, both in sequence. Memory stays safe under the caching allocator:
the side stream's buffers are allocated and freed on it, its output and inputs are read and dropped
on the current stream only after the join.

Shapes: pre (T, H) bf16 or e4m3 with pre_scale (T,) float32, pre_2 (T, H) with pre_2_scale,
router_input (T, H) → mlp (T, H), experts (T, H).
"""

from __future__ import annotations

from typing import Any, cast

import torch

from petri.engine.cuda.fp8_tier.fp8_mlp import mlp_quantized
from petri.engine.cuda.fused.fused_router import route_scaled


class MLPBeside:
    """The compiled tier's overlapped MLP, made once per :func:`petri.engine.cuda.compiled_tier.compile_regions`
    and shared by its layers: ``call`` (:func:`feedforward_mlp` compiled, or any callable of its
    signature) and each CUDA device's side stream, made on first use (the warm-up, never inside a
    capture: a stream made there would not be captured)."""

    def __init__(self, call):
        self.call = call
        self.streams: dict[torch.device, torch.cuda.Stream] = {}

    def stream(self, device: torch.device) -> torch.cuda.Stream:
        """``device``'s side stream."""
        stream = self.streams.get(device)
        if stream is None:
            stream = self.streams[device] = torch.cuda.Stream(device)
        return stream


def feedforward_mlp(layer: Any, pre: torch.Tensor, pre_scale: torch.Tensor | None,
                    quantize: bool) -> torch.Tensor:
    """``layer``'s dense MLP of its input: quantized rows through :func:`petri.engine.cuda.fp8_tier.fp8_mlp.mlp_quantized`
    in the FP8 tier, else the module. (T, H) → (T, H)."""
    return mlp_quantized(layer.mlp, pre, cast(torch.Tensor, pre_scale)) if quantize else layer.mlp(pre)  # set when quantized


def feedforward_experts(layer: Any, pre_2: torch.Tensor, pre_2_scale: torch.Tensor | None,
                        router_input: torch.Tensor, quantize: bool) -> torch.Tensor:
    """``layer``'s router (the fused top-k of its scaled input) and experts. (T, H) each → (T, H)."""
    _, top_k_weights, top_k_index = route_scaled(layer.router, router_input)
    if quantize:
        return layer.experts(pre_2, top_k_index, top_k_weights, hidden_scale=pre_2_scale)
    return layer.experts(pre_2, top_k_index, top_k_weights)


def feedforward_blocks(layer, pre, pre_scale, pre_2, pre_2_scale, router_input, quantize: bool):
    """Both feed-forward blocks in sequence: (mlp, experts), (T, H) each."""
    return (feedforward_mlp(layer, pre, pre_scale, quantize),
            feedforward_experts(layer, pre_2, pre_2_scale, router_input, quantize))


@torch.compiler.disable
def overlapped_feedforward_blocks(beside: MLPBeside, layer, pre, pre_scale, pre_2, pre_2_scale, router_input,
                                  quantize: bool):
    """:func:`feedforward_blocks` with ``beside.call`` (as :func:`feedforward_mlp`) on the device's
    side stream while the router and experts run on the current stream, joined before returning
    (module docstring). Off CUDA: in sequence."""
    if not pre.is_cuda:
        return (beside.call(layer, pre, pre_scale, quantize),
                feedforward_experts(layer, pre_2, pre_2_scale, router_input, quantize))
    current = torch.cuda.current_stream(pre.device)
    side = beside.stream(pre.device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        mlp_out = beside.call(layer, pre, pre_scale, quantize)
    experts_out = feedforward_experts(layer, pre_2, pre_2_scale, router_input, quantize)
    current.wait_stream(side)
    return mlp_out, experts_out
