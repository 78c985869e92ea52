"""The pieces of one DiffusionGemma denoising step that both torch samplers share (the eager one,
:mod:`petri.engine.torch_sampler`, and the CUDA fast path, :mod:`petri.engine.fast_sampler`):
encoding the prompt once, token entropy, entropy-bounded acceptance with pinned positions, and the
adaptive stop. Each computes exactly what transformers' DiffusionGemma sampler computes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from transformers import DynamicCache

from petri.dish import pinned_arrays
from petri.trajectory import AnchorSpan

if TYPE_CHECKING:
    from petri.engine.torch_model import LoadedModel


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) over the last axis: (S, L, V) → (S, L); computed as
    transformers' sampler computes it, so acceptance decisions match bit for bit."""
    return torch.distributions.Categorical(logits=logits).entropy()


def accept_mask(entropy: torch.Tensor, anchor_mask: torch.Tensor, entropy_bound: float) -> torch.Tensor:
    """Entropy-bounded acceptance (arXiv 2505.24857): accept the k lowest-entropy positions with
    Σ entropy - max entropy ≤ bound. Anchors count as entropy 0, so they never use the budget.
    (S, L) float, (S, L) bool → (S, L) bool."""
    budget_entropy = torch.where(anchor_mask, torch.zeros_like(entropy), entropy)
    sorted_entropy, order = torch.sort(budget_entropy, dim=-1, descending=False)
    selected = torch.cumsum(sorted_entropy, dim=-1) - sorted_entropy <= entropy_bound
    return torch.scatter(torch.zeros_like(selected), -1, order, selected)


class StabilityTracker:
    """DiffusionGemma's adaptive stop: the argmax canvas equals the previous ``threshold`` ones and
    the mean entropy (over free positions) is below ``confidence``."""

    def __init__(self, threshold: int, confidence: float, anchor_mask: torch.Tensor):
        self.threshold = threshold
        self.confidence = confidence
        self.free = ~anchor_mask
        self.free_count = self.free.sum(-1).clamp(min=1)
        self.has_anchors = bool(anchor_mask.any())
        self.history: torch.Tensor | None = None

    def __call__(self, argmax_canvas: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
        if self.threshold == 0:
            stable = torch.ones(argmax_canvas.shape[0], dtype=torch.bool, device=argmax_canvas.device)
        else:
            if self.history is None:
                self.history = torch.full(
                    (self.threshold, *argmax_canvas.shape), -1, dtype=argmax_canvas.dtype, device=argmax_canvas.device
                )
            stable = (self.history == argmax_canvas[None]).all(dim=-1).all(dim=0)
            self.history = torch.roll(self.history, shifts=-1, dims=0)
            self.history[-1] = argmax_canvas
        if self.has_anchors:
            mean_entropy = (entropy * self.free).sum(-1) / self.free_count
        else:  # exactly transformers' reduction
            mean_entropy = entropy.mean(dim=-1)
        return stable & (mean_entropy < self.confidence)


def _cache_kwarg(function: Callable, cache) -> dict:
    """transformers renamed ``past_key_values`` to ``cache`` in DiffusionGemma's code (after 5.17);
    pass the KV cache under whichever name ``function`` takes."""
    parameters = inspect.signature(function).parameters
    return {"cache" if "cache" in parameters else "past_key_values": cache}


def _output_cache(output):
    return output.cache if getattr(output, "cache", None) is not None else output.past_key_values


def _encode_prompt_once(lm: LoadedModel, prompt_ids: torch.Tensor, batch: int) -> DynamicCache:
    """Run the causal encoder on one copy of the prompt (1, P) and repeat its KV cache ``batch`` times."""
    model = lm.model
    length = prompt_ids.shape[1]
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    position_ids = torch.arange(0, length, dtype=torch.int32, device=lm.device).unsqueeze(0)
    attention_mask = torch.ones((1, length), dtype=torch.bool, device=lm.device)
    mask_mapping = model.model.encoder.create_masks_for_generate(
        config=model.config,
        inputs_embeds=torch.empty((1, length, 0), dtype=model.dtype, device=lm.device),
        attention_mask=attention_mask,
        position_ids=position_ids,
        **_cache_kwarg(model.model.encoder.create_masks_for_generate, cache),
    )
    cache = _output_cache(
        model.model.encoder(
            input_ids=prompt_ids,
            attention_mask=mask_mapping,
            position_ids=position_ids,
            **_cache_kwarg(model.model.encoder.forward, cache),
        )
    )
    if batch > 1:
        cache.batch_repeat_interleave(batch)
    return cache


def start_batch(
    lm: "LoadedModel", prompt_ids: Sequence[int], layouts: Sequence[Sequence[AnchorSpan]],
    canvas_prefix: Sequence[int], seed: int | None,
) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, DynamicCache]:
    """What every torch sampler does before its first step, in this order (the RNG order is part of
    parity with ``generate``): seed torch's generator, lay the pins out, encode the prompt once.

    Returns the pinned mask (S, L) bool on the host, the same mask and the pinned ids (S, L) on the
    model's device, and the prompt's KV cache repeated S times.
    """
    if seed is not None:
        torch.manual_seed(seed)
    pinned_mask, pinned_ids = pinned_arrays(layouts, canvas_prefix, lm.canvas_length)
    anchor_mask = torch.from_numpy(pinned_mask).to(lm.device)
    anchor_ids = torch.from_numpy(pinned_ids).to(lm.device)
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=lm.device)
    return pinned_mask, anchor_mask, anchor_ids, _encode_prompt_once(lm, prompt, len(layouts))
