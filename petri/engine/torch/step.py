"""The pieces of one DiffusionGemma denoising step that both torch samplers share (the eager one,
:mod:`petri.engine.torch.sampler`, and the CUDA fast path, :mod:`petri.engine.cuda.fast_sampler`):
encoding the prompt once and the adaptive stop (token entropy, entropy-bounded acceptance with pinned
positions and the torch array operations are one module lower, :mod:`petri.engine.torch.array_ops`).
Each computes exactly what transformers' DiffusionGemma sampler computes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from petri.core.dish import pinned_arrays
from petri.core.trajectory import AnchorSpan
from petri.engine.base import TorchLoadedModel
from petri.engine.families.uniform import StopRule
from petri.engine.torch.array_ops import TorchOps


class StabilityTracker(StopRule):
    """:class:`petri.engine.families.uniform.StopRule` on torch arrays (the anchors read off ``anchor_mask``)."""

    def __init__(self, threshold: int, confidence: float, anchor_mask: torch.Tensor):
        super().__init__(TorchOps(anchor_mask.device), threshold, confidence, anchor_mask, bool(anchor_mask.any()))


def cache_kwarg(function: Callable, cache) -> dict:
    """transformers renamed ``past_key_values`` to ``cache`` in DiffusionGemma's code (after 5.17);
    pass the KV cache under whichever name ``function`` takes."""
    parameters = inspect.signature(function).parameters
    return {"cache" if "cache" in parameters else "past_key_values": cache}


def _output_cache(output):
    return output.cache if getattr(output, "cache", None) is not None else output.past_key_values


def encoder_inputs(lm: TorchLoadedModel, length: int) -> tuple[DynamicCache, torch.Tensor, dict]:
    """What one encoder pass over a prompt of ``length`` tokens takes besides the ids: an empty KV
    cache, the position ids (1, P) int32 and the encoder's attention masks (by layer type). They
    depend on the length only, so a captured pass (:mod:`petri.engine.cuda.encoder_graphs`) makes them
    before its capture: building the masks may read the device."""
    model = lm.model
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    position_ids = torch.arange(0, length, dtype=torch.int32, device=lm.device).unsqueeze(0)
    attention_mask = torch.ones((1, length), dtype=torch.bool, device=lm.device)
    mask_mapping = model.model.encoder.create_masks_for_generate(
        config=model.config,
        inputs_embeds=torch.empty((1, length, 0), dtype=model.dtype, device=lm.device),
        attention_mask=attention_mask,
        position_ids=position_ids,
        **cache_kwarg(model.model.encoder.create_masks_for_generate, cache),
    )
    return cache, position_ids, mask_mapping


def run_encoder(lm: TorchLoadedModel, prompt_ids: torch.Tensor, cache: DynamicCache, position_ids: torch.Tensor,
                mask_mapping) -> DynamicCache:
    """The causal encoder of ``lm`` over ``prompt_ids`` (1, P) with :func:`encoder_inputs`' inputs of
    that length: the cache it filled."""
    encoder = lm.model.model.encoder
    return _output_cache(
        encoder(
            input_ids=prompt_ids,
            attention_mask=mask_mapping,
            position_ids=position_ids,
            **cache_kwarg(encoder.forward, cache),
        )
    )


def encode_prompt_once(lm: TorchLoadedModel, prompt_ids: torch.Tensor) -> DynamicCache:
    """Run the causal encoder of ``lm`` (a torch :class:`~petri.engine.torch.model.LoadedModel`) on one copy of the prompt (1, P):
    its KV cache."""
    return run_encoder(lm, prompt_ids, *encoder_inputs(lm, prompt_ids.shape[1]))


def start_batch(
    lm: TorchLoadedModel, prompt_ids: Sequence[int], layouts: Sequence[Sequence[AnchorSpan]],
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
    return pinned_mask, anchor_mask, anchor_ids, encoded_prompt(lm, prompt_ids, len(layouts))


def encoded_prompt(lm: TorchLoadedModel, prompt_ids: Sequence[int], batch: int) -> DynamicCache:
    """The prompt's KV cache repeated ``batch`` times: from the model's kept prompts
    (:class:`petri.engine.torch.prompt_cache.PromptCache`) or by one encoder pass (:func:`encode_prompt_once`,
    or its graph replayed where the tier keeps one: :mod:`petri.engine.cuda.encoder_graphs`). The key is the ids, the tier's precision and
    encoder form (compiled or eager) and the loaded model's device and dtype (copies of a loaded model over one
    module share its tier)."""
    ids = tuple(int(i) for i in prompt_ids)

    @torch.no_grad()
    def encode() -> DynamicCache:
        return lm.fast_tier.encoder_graphs.encode(lm, torch.tensor([list(ids)], dtype=torch.long, device=lm.device))

    key = (ids, lm.fast_tier.precision, lm.fast_tier.encoder_form, str(lm.device), str(lm.dtype))
    return lm.fast_tier.prompts.encoded(key, encode, batch)
