"""The pieces of one DiffusionGemma denoising step that both torch samplers share (the eager one,
:mod:`petri.engine.torch.sampler`, and the CUDA fast path, :mod:`petri.engine.cuda.fast_sampler`):
encoding the prompt once, token entropy, entropy-bounded acceptance with pinned positions, and the
adaptive stop. Each computes exactly what transformers' DiffusionGemma sampler computes.
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


class StabilityTracker(StopRule):
    """:class:`petri.engine.families.uniform.StopRule` on torch arrays (the anchors read off ``anchor_mask``)."""

    def __init__(self, threshold: int, confidence: float, anchor_mask: torch.Tensor):
        super().__init__(TorchOps(anchor_mask.device), threshold, confidence, anchor_mask, bool(anchor_mask.any()))


class TorchOps:
    """:class:`petri.engine.loop.ArrayOps` on torch tensors on ``device``; ``model_dtype`` is what
    the self-conditioning input is cast to. Random draws call ``torch.randint`` / ``torch.multinomial``
    on torch's default generator, in the order ``generate`` draws them."""

    def __init__(self, device: torch.device, model_dtype: torch.dtype = torch.float32):
        self.device, self.model_dtype = torch.device(device), model_dtype

    where = staticmethod(torch.where)
    entropy = staticmethod(token_entropy)
    accept_mask = staticmethod(accept_mask)

    def tokens(self, host) -> torch.Tensor:
        return torch.as_tensor(np.asarray(host), dtype=torch.long, device=self.device)

    def mask(self, host) -> torch.Tensor:
        return torch.from_numpy(np.asarray(host, dtype=bool)).to(self.device)

    def randint(self, high: int, shape) -> torch.Tensor:
        return torch.randint(0, high, shape, device=self.device)

    def categorical(self, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        return torch.multinomial(probs.view(-1, probs.shape[-1]), num_samples=1).view(probs.shape[:-1])

    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.argmax(logits, dim=-1)

    def zeros_bool(self, shape) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.bool, device=self.device)

    def ones_bool(self, shape) -> torch.Tensor:
        return torch.ones(shape, dtype=torch.bool, device=self.device)

    def zeros_int(self, shape) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.int32, device=self.device)

    def int32(self, array: torch.Tensor) -> torch.Tensor:
        return array.to(torch.int32)

    def float32(self, array: torch.Tensor) -> torch.Tensor:
        return array.float()

    def to_model_dtype(self, array: torch.Tensor) -> torch.Tensor:
        return array.to(self.model_dtype)

    def stack(self, arrays, axis: int) -> torch.Tensor:
        return torch.stack(list(arrays), dim=axis)

    def numpy(self, array: torch.Tensor) -> np.ndarray:
        return array.cpu().numpy()

    def all(self, array: torch.Tensor) -> bool:
        return bool(array.all())

    def materialize(self, *arrays) -> None:
        """Torch runs eagerly: nothing to do."""

    # the stop rule's history (threshold, S, L), updated in place (a CUDA graph may hold it)
    def full_like_history(self, threshold: int, argmax_canvas: torch.Tensor) -> torch.Tensor:
        return torch.full((threshold, *argmax_canvas.shape), -1, dtype=argmax_canvas.dtype, device=argmax_canvas.device)

    def same_as_history(self, history: torch.Tensor, argmax_canvas: torch.Tensor) -> torch.Tensor:
        return (history == argmax_canvas[None]).all(dim=-1).all(dim=0)

    def push_history(self, history: torch.Tensor, argmax_canvas: torch.Tensor) -> torch.Tensor:
        history.copy_(torch.roll(history, shifts=-1, dims=0))
        history[-1].copy_(argmax_canvas)
        return history

    def free_mean(self, entropy: torch.Tensor, anchor_mask: torch.Tensor) -> torch.Tensor:
        free = ~anchor_mask
        return (entropy * free).sum(-1) / free.sum(-1).clamp(min=1)

    def row_mean(self, entropy: torch.Tensor) -> torch.Tensor:
        return entropy.mean(dim=-1)


def _cache_kwarg(function: Callable, cache) -> dict:
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
        **_cache_kwarg(model.model.encoder.create_masks_for_generate, cache),
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
            **_cache_kwarg(encoder.forward, cache),
        )
    )


def _encode_prompt_once(lm: TorchLoadedModel, prompt_ids: torch.Tensor) -> DynamicCache:
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
    (:class:`petri.engine.torch.prompt_cache.PromptCache`) or by one encoder pass (:func:`_encode_prompt_once`,
    or its graph replayed where the tier keeps one: :mod:`petri.engine.cuda.encoder_graphs`). The key is the ids, the tier's precision and
    encoder form (compiled or eager) and the loaded model's device and dtype (copies of a loaded model over one
    module share its tier)."""
    ids = tuple(int(i) for i in prompt_ids)

    @torch.no_grad()
    def encode() -> DynamicCache:
        return lm.fast_tier.encoder_graphs.encode(lm, torch.tensor([list(ids)], dtype=torch.long, device=lm.device))

    key = (ids, lm.fast_tier.precision, lm.fast_tier.encoder_form, str(lm.device), str(lm.dtype))
    return lm.fast_tier.prompts.encoded(key, encode, batch)
