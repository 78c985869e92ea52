"""The prompt encoder's pass replayed as a captured CUDA graph, one graph per prompt length (issue 25).

Every request that finds no kept prompt (:mod:`petri.engine.torch.prompt_cache`) runs one pass of
DiffusionGemma's causal encoder over its P prompt tokens at batch 1. In the compiled tier that pass
is short on the GPU and long on the host: on an H200 with the full-size architecture, 1,470
kernels in 56 ms at P = 200 (``experiments/results/encode_time_h200.json``), most of it Python and
launches, against about 2 ms per step of a 12-sample seed. The step's own work is already replayed
from graphs (:mod:`petri.engine.cuda.fast_sampler`); this module does the same for the encoder.

A pass depends on nothing but the weights and the P ids (the encoder draws no random numbers),
so a pass captured once for a length serves every prompt of that length: the ids are copied into
the graph's input, the graph replays the same kernels on the same buffers, and the cache it fills
is copied out (the next replay overwrites it). The copy equals what the uncaptured pass returns, bit
for bit (``tests/engine/cuda/test_encoder_graphs.py`` on CUDA), so kept prompts made either way are one form.

When: only in the compiled tier on CUDA (its encoder layers compiled, :mod:`petri.engine.cuda.compiled_tier`;
the exact tier's promise of bit-equality with the eager loop is not put on a capture), and only from
a length's second pass on: the first pass of a length runs as before, so a length met once costs no
capture (a capture is one warm-up pass on a side stream plus the recording, about two passes' time).
At most :attr:`EncoderGraphs.max_lengths` lengths are kept (least recently used out; each holds its
pass's activations in its own memory pool: on the full-size model 107 MiB kept at 200 tokens and
378 MiB at 1,600 on an H200, captured in 0.16-0.18 s, ``experiments/encode_time.py``,
``experiments/results/encode_time_h200_captured.json``; so four lengths of 1,600 keep about
1.5 GiB). A capture that fails switches the graphs off for the model (logged) and the pass runs
uncaptured. The tier drops them whenever its forward changes (:class:`petri.engine.torch.fast_tier.FastTier`).

A public server keeps none unless ``PETRI_PROMPT_CACHE_MB`` is set (:func:`petri.web.app.create_app`),
as with kept prompts: a faster pass would tell a visitor that someone sent a prompt of the same
length lately.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from petri.engine.base import SamplingModel, TorchLoadedModel
from petri.engine.torch.prompt_cache import repeated_copy
from petri.engine.torch.step import encode_prompt_once, encoder_inputs, run_encoder

log = logging.getLogger(__name__)

#: how many prompt lengths a model keeps a captured encoder pass for, by default
DEFAULT_ENCODER_GRAPH_LENGTHS = 4
#: a length's pass is captured at its this-many-th pass (the first ones run uncaptured)
CAPTURE_AT_PASS = 2
#: how many lengths' pass counts are remembered (least recently seen out)
REMEMBERED_LENGTHS = 256


class EncoderGraph:
    """The encoder's pass over a prompt of one length, captured (module docstring). ``ids`` (1, P)
    int64: the graph's input; ``cache``: the ``DynamicCache`` the graph fills, overwritten by every
    replay."""

    def __init__(self, lm: TorchLoadedModel, length: int, warmup_passes: int = 1):
        device = lm.device
        self.length = length
        self.ids = torch.zeros((1, length), dtype=torch.long, device=device)
        cache, self.position_ids, self.mask_mapping = encoder_inputs(lm, length)
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):  # lazy initialisation on a side stream, as capture wants
            for _ in range(warmup_passes):
                run_encoder(lm, self.ids, encoder_inputs(lm, length)[0], self.position_ids, self.mask_mapping)
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)
        _state_on_device(cache, device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.cache = run_encoder(lm, self.ids, cache, self.position_ids, self.mask_mapping)
        torch.cuda.synchronize(device)

    def encode(self, prompt_ids: torch.Tensor):
        """The KV cache of ``prompt_ids`` (1, P) on the model's device: replay, then a copy that no
        later replay touches."""
        self.ids.copy_(prompt_ids)
        self.graph.replay()
        return repeated_copy(self.cache, 1)


def _state_on_device(cache, device: torch.device) -> None:
    """Move the host tensors an empty cache's layers hold to ``device`` now: a layer moves them on
    its first write (transformers' sliding-window layer its window size), and a copy from pageable
    host memory cannot be captured. On the device already, that move is a no-op."""
    for layer in cache.layers:
        for name, value in vars(layer).items():
            if isinstance(value, torch.Tensor) and value.device != device:
                setattr(layer, name, value.to(device))


@dataclass(eq=False)
class EncoderGraphs:
    """The captured encoder passes of one model, by prompt length (module docstring).

    max_lengths: how many lengths are kept (0: none, every pass uncaptured). failed: why capturing
    is off for this model after a capture failed, else ``None``. passes: passes run per length not
    (yet) captured. captures / replays: counts, for tests and benchmarks. ``capture`` builds one
    graph (``capture(lm, length)``; :class:`EncoderGraph` unless a test swaps it)."""

    max_lengths: int = DEFAULT_ENCODER_GRAPH_LENGTHS
    capture: Callable[[Any, int], Any] = field(default=EncoderGraph, repr=False)
    graphs: OrderedDict = field(default_factory=OrderedDict, repr=False)
    passes: OrderedDict = field(default_factory=OrderedDict, repr=False)
    failed: str | None = None
    captures: int = 0
    replays: int = 0

    def usable(self, lm: TorchLoadedModel) -> bool:
        """Whether passes on ``lm`` may be captured: lengths to keep, no failed capture, CUDA, the
        compiled tier's encoder, and the tier's graphs on."""
        tier = lm.fast_tier
        return (self.max_lengths > 0 and self.failed is None and lm.device.type == "cuda"
                and bool(tier.compiled_encoder_layers) and tier.options.graph)

    def encode(self, lm: TorchLoadedModel, prompt_ids: torch.Tensor):
        """The KV cache of ``prompt_ids`` (1, P): the kept graph of length P replayed, one captured
        now (at the length's :data:`CAPTURE_AT_PASS`-th pass), or the uncaptured pass."""
        length = prompt_ids.shape[1]
        if not self.usable(lm):
            return encode_prompt_once(lm, prompt_ids)
        graph = self.graphs.get(length)
        if graph is None:
            if self._count_pass(length) < CAPTURE_AT_PASS:
                return encode_prompt_once(lm, prompt_ids)
            graph = self._captured(lm, length)
            if graph is None:
                return encode_prompt_once(lm, prompt_ids)
        self.graphs.move_to_end(length)
        self.replays += 1
        return graph.encode(prompt_ids)

    def _count_pass(self, length: int) -> int:
        """Count one more pass of ``length``; returns how many there have been."""
        count = self.passes.pop(length, 0) + 1
        self.passes[length] = count
        while len(self.passes) > REMEMBERED_LENGTHS:
            self.passes.popitem(last=False)
        return count

    def _captured(self, lm: TorchLoadedModel, length: int):
        """A new graph of ``length`` kept (the least recently used one out), or ``None`` after a
        failed capture (capturing off for the model from now on, logged)."""
        try:
            graph = self.capture(lm, length)
        except (RuntimeError, NotImplementedError, TypeError, AttributeError) as error:
            self.failed = f"a capture failed ({type(error).__name__}: {error})"
            self.graphs.clear()
            log.warning("prompt encoder graphs off, the pass runs uncaptured: %s", self.failed, exc_info=True)
            return None
        self.captures += 1
        self.passes.pop(length, None)
        while len(self.graphs) >= self.max_lengths:
            self.graphs.popitem(last=False)
        self.graphs[length] = graph
        return graph

    def set_max_lengths(self, count: int) -> None:
        """Keep graphs of at most ``count`` lengths from now on (0: none), the oldest out first."""
        self.max_lengths = max(0, int(count))
        while len(self.graphs) > self.max_lengths:
            self.graphs.popitem(last=False)

    def clear(self) -> None:
        """Forget every graph and pass count (the forward they captured changed); a failed capture
        is forgotten too, so the new forward gets its own try."""
        self.graphs.clear()
        self.passes.clear()
        self.failed = None


def set_encoder_graph_lengths(lm: SamplingModel, count: int) -> bool:
    """Let ``lm`` keep captured encoder passes of at most ``count`` prompt lengths (0: none); False
    when it keeps none at all (a model without a torch :class:`~petri.engine.torch.fast_tier.FastTier`)."""
    tier = getattr(lm, "fast_tier", None)
    graphs = getattr(tier, "encoder_graphs", None)
    if not isinstance(graphs, EncoderGraphs):
        return False
    graphs.set_max_lengths(count)
    return True
