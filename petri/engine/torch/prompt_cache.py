"""Encoded prompts kept for reuse: the causal encoder's KV cache of a prompt, by its token ids.

Every torch sampler encodes the prompt once per request (one pass of DiffusionGemma's causal
encoder over the P prompt tokens, :func:`petri.engine.torch.step.start_batch`); the decoder only
reads that cache, never writes it. The encoder draws no random numbers and its output depends on
nothing but the weights and the prompt's ids, so a request whose prompt equals an earlier one's can
take a copy of the earlier cache instead of running the pass: the same tensors, bit for bit, and
the same random stream afterwards (``tests/engine/test_prompt_cache.py`` checks both against requests
that encode). A study samples every event's template many times, and a benchmark repeats one
prompt, so most requests hit. On the full-size architecture the pass over a 1,600-token prompt is
one of the costs outside the step graphs at batch 1 (issue 25).

What is kept: at most ``max_bytes`` of cached key/value tensors (one copy of the prompt, batch 1),
least recently used first out; a prompt whose cache alone is larger is encoded and not kept. The
key is the prompt's ids, the tier's precision and encoder form (compiled or eager,
:class:`petri.engine.torch.fast_tier.FastTier`) and the loaded model's device and dtype, so a switch of
tier never hands out a cache another precision or another form of the encoder made. Weights changed in place (a test sharpening a head, a
fine-tune in the process) must :meth:`PromptCache.clear` it. The MLX backend keeps its encoder caches the same way
(:mod:`petri.engine.mlx.sampler`; MLX arrays are immutable, so a kept cache is handed out
without a copy at batch 1).

The limit: ``PETRI_PROMPT_CACHE_MB`` (default 1,024 MiB; 0 keeps nothing), read by the entry points
(:class:`petri.core.config.PetriConfig`) and applied to a loaded model with :func:`set_prompt_cache_bytes`
(:meth:`petri.study.execution.executors.ModelSpec.load`, :func:`petri.web.app.create_app`). A public server keeps
nothing unless that variable is set: a visitor could otherwise
tell from the speed of a request (its ``encode_s``) that someone else sent the same prompt lately.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from petri.engine.base import SamplingModel

#: the environment variable that sets how many MiB of encoded prompts a model keeps (read by
#: :class:`petri.core.config.PetriConfig` at an entry point, applied through :func:`set_prompt_cache_bytes`)
PROMPT_CACHE_ENV = "PETRI_PROMPT_CACHE_MB"
#: MiB a model keeps unless told otherwise
DEFAULT_PROMPT_CACHE_MB = 1024


def cache_bytes(cache) -> int:
    """Bytes of the key and value tensors a transformers ``Cache`` holds (a tensor that is both a
    layer's keys and its values counted once)."""
    tensors = {id(t): t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
               if t is not None}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def repeated_copy(cache, batch: int):
    """A transformers ``Cache`` of one prompt row repeated ``batch`` times that shares no key or
    value tensor with ``cache``, its other state (lengths, sliding windows) copied. At batch 1 each
    key and value is cloned; above, the copy starts out sharing them and the library's own
    ``batch_repeat_interleave`` replaces each with its repeated copy (no clone made first)."""
    tensors = [t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
               if t is not None]
    if batch == 1:
        return copy.deepcopy(cache, {id(t): t.detach().clone() for t in tensors})
    copied = copy.deepcopy(cache, {id(t): t.detach() for t in tensors})
    copied.batch_repeat_interleave(batch)
    return copied


@dataclass(eq=False)
class PromptCache:
    """The encoded prompts of one model (module docstring). ``repeat(cache, batch)``: how a cache of
    one prompt row is handed out for ``batch`` rows, sharing nothing a caller may write with it
    (:func:`repeated_copy` for transformers' caches; MLX's immutable ``EncoderCache.repeat``);
    ``size``: its bytes; ``owner``: the model whose encoder made what is kept, where its holder
    must tell models apart (MLX). ``hits`` / ``misses`` count the requests served from it and
    those that ran the encoder."""

    max_bytes: int = DEFAULT_PROMPT_CACHE_MB * 2**20
    # None: the default (repeated_copy, cache_bytes), filled in by __post_init__
    repeat: Callable[[Any, int], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    size: Callable[[Any], int] = field(default=None, repr=False)  # type: ignore[assignment]
    owner: Any = field(default=None, repr=False)
    entries: OrderedDict = field(default_factory=OrderedDict, repr=False)
    hits: int = 0
    misses: int = 0

    def __post_init__(self) -> None:
        self.repeat = repeated_copy if self.repeat is None else self.repeat
        self.size = cache_bytes if self.size is None else self.size

    @property
    def held_bytes(self) -> int:
        return sum(size for _, size in self.entries.values())

    def encoded(self, key: Hashable, encode: Callable[[], Any], batch: int = 1) -> Any:
        """The cache of the prompt ``key`` names, repeated for ``batch`` rows: made from the kept
        one, or from ``encode()``'s (one prompt row; kept when it fits). The caller owns what it
        gets: it may narrow or write into it without touching what is kept."""
        kept = self.entries.get(key)
        if kept is not None:
            self.entries.move_to_end(key)
            self.hits += 1
            return self.repeat(kept[0], batch)
        self.misses += 1
        cache = encode()
        size = self.size(cache)
        if not 0 < size <= self.max_bytes:  # not kept: the caller may have it as it is
            return cache if batch == 1 else self.repeat(cache, batch)
        while self.entries and self.held_bytes + size > self.max_bytes:
            self.entries.popitem(last=False)
        self.entries[key] = (cache, size)
        return self.repeat(cache, batch)

    def set_max_bytes(self, max_bytes: int) -> None:
        """Keep at most ``max_bytes`` from now on (0: nothing), dropping the oldest to fit."""
        self.max_bytes = max(0, int(max_bytes))
        while self.entries and self.held_bytes > self.max_bytes:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every kept prompt (the weights changed)."""
        self.entries.clear()


def kept_prompts(lm: SamplingModel) -> PromptCache | None:
    """The encoded prompts ``lm`` keeps: a torch model's on its tier
    (:class:`petri.engine.torch.fast_tier.FastTier`), an MLX model's on itself; ``None`` for a model
    without a prompt encoder (masked diffusion)."""
    tier = getattr(lm, "fast_tier", None)
    prompts = getattr(tier, "prompts", None) if tier is not None else getattr(lm, "prompts", None)
    return prompts if isinstance(prompts, PromptCache) else None


def set_prompt_cache_bytes(lm: SamplingModel, max_bytes: int) -> bool:
    """Let ``lm`` keep at most ``max_bytes`` of encoded prompts (0: none); False when it keeps none
    at all (:func:`kept_prompts`)."""
    prompts = kept_prompts(lm)
    if prompts is None:
        return False
    prompts.set_max_bytes(max_bytes)
    return True


def keep_no_prompts(lm: SamplingModel) -> None:
    """Let ``lm`` keep no encoded prompts and no captured encoder passes (what a public server does
    unless ``PETRI_PROMPT_CACHE_MB`` is set, :func:`petri.web.app.create_app`: a faster pass would
    tell a visitor that someone sent the same prompt, or one of its length, lately). Imports nothing:
    the captured passes are a torch tier's (:class:`petri.engine.cuda.encoder_graphs.EncoderGraphs`)."""
    set_prompt_cache_bytes(lm, 0)
    graphs = getattr(getattr(lm, "fast_tier", None), "encoder_graphs", None)
    if graphs is not None:
        graphs.set_max_lengths(0)
