"""DiffusionGemma's step (uniform, multinomial diffusion), written once for every framework and tier.

The step of transformers' ``DiffusionGemmaForBlockDiffusion.generate`` (``_denoising_step`` in
``generation_diffusion_gemma.py``): the previous step's temperature-scaled logits are the next
forward's self-conditioning → linear temperature schedule → a denoiser token drawn per position →
the lowest-entropy tokens accepted while the entropy budget holds → every other position renoised
→ stop when the argmax canvas is stable and the mean entropy is low. Added on top: anchors, written
into the start canvas and after every renoise, at entropy 0 in the budget; the stop rule looks only
at free positions and at the argmax with anchors in place. Finished samples keep their canvas,
argmax, entropy and logits.

Array operations come from an :class:`petri.engine.loop.ArrayOps` (torch or MLX); the CUDA fast
path computes its own draw in a fused pass and calls :func:`accept_and_renoise` and
:class:`StopRule` for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from petri.core.trajectory import UNIFORM_FAMILY, SamplerSettings

FAMILY = UNIFORM_FAMILY


def temperature_at(settings: SamplerSettings, index: int) -> float:
    """The linear schedule's temperature at step ``index`` (0-based): t_max·… down to t_min."""
    steps = settings.max_denoising_steps
    remaining = steps - index
    return settings.t_min + (settings.t_max - settings.t_min) * (remaining / steps)


def stops(settings: SamplerSettings) -> bool:
    """Whether adaptive stopping is on (both thresholds set, as in transformers)."""
    return settings.stability_threshold is not None and settings.confidence_threshold is not None


class StopRule:
    """DiffusionGemma's adaptive stop: the argmax canvas equals the previous ``threshold`` ones and
    the mean entropy (over free positions when there are anchors, else over all, exactly
    transformers' reduction) is below ``confidence``. (S, L), (S, L) → (S,) bool.

    ``history`` (threshold, S, L) may be given as a static buffer (the CUDA graphs update it in
    place); else it is made at the first call, filled with -1."""

    def __init__(self, ops, threshold: int, confidence: float, anchor_mask, has_anchors: bool, history=None):
        self.ops, self.threshold, self.confidence = ops, threshold, confidence
        self.anchor_mask, self.has_anchors, self.history = anchor_mask, has_anchors, history

    def __call__(self, argmax_canvas, entropy):
        ops = self.ops
        if self.threshold == 0:
            stable = ops.ones_bool((argmax_canvas.shape[0],))
        else:
            if self.history is None:
                self.history = ops.full_like_history(self.threshold, argmax_canvas)
            stable = ops.same_as_history(self.history, argmax_canvas)
            self.history = ops.push_history(self.history, argmax_canvas)
        if self.has_anchors:
            mean_entropy = ops.free_mean(entropy, self.anchor_mask)
        else:
            mean_entropy = ops.row_mean(entropy)
        return stable & (mean_entropy < self.confidence)


def accept_and_renoise(
    ops, *, canvas, argmax_canvas, raw_argmax, entropy, denoised, anchor_mask, anchor_ids,
    entropy_bound: float, noise: Callable[[], Any], finished=None, last_entropy=None, stop: StopRule | None = None,
):
    """The step after the draw: accept by entropy, renoise (``noise()`` draws (S, L) tokens, after
    the acceptance), pin the anchors; with ``stop``, finished samples (S,) keep canvas, argmax and
    entropy and the stop rule runs. Returns (canvas, argmax canvas, accepted, entropy kept,
    finished), each (S, L) but finished (S,)."""
    accepted = ops.accept_mask(entropy, anchor_mask, entropy_bound)
    new_canvas = ops.where(accepted, denoised, canvas)
    new_canvas = ops.where(accepted, new_canvas, noise())
    new_canvas = ops.where(anchor_mask, anchor_ids, new_canvas)
    new_argmax = ops.where(anchor_mask, anchor_ids, raw_argmax)
    if stop is not None:
        if finished is not None:
            done = finished[:, None]
            new_argmax = ops.where(done, argmax_canvas, new_argmax)
            new_canvas = ops.where(done, canvas, new_canvas)
            entropy = ops.where(done, last_entropy, entropy)
            finished = finished | stop(new_argmax, entropy)
        else:
            finished = stop(new_argmax, entropy)
    return new_canvas, new_argmax, accepted, entropy, finished


class UniformDiffusionScheduler:
    """DiffusionGemma's step over a batch: state ``canvas`` (S, L), ``final_ids`` (the argmax
    canvas), ``finished`` (S,), ``model_input`` (the self-conditioning logits, ``None`` at step 0).

    ``fixed_noise`` (:class:`petri.engine.fixed_noise.FixedNoise`) replaces the three random draws
    (start canvas, the denoiser draw → the argmax, the renoise tokens) for backend parity."""

    def __init__(self, ops, settings: SamplerSettings, vocab: int, anchor_mask, anchor_ids,
                 has_anchors: bool, fixed_noise=None):
        self.ops, self.settings, self.vocab, self.fixed_noise = ops, settings, vocab, fixed_noise
        self.anchor_mask, self.anchor_ids = anchor_mask, anchor_ids
        self.max_steps, self.can_stop = settings.max_denoising_steps, stops(settings)
        self.stop = (
            StopRule(ops, cast(int, settings.stability_threshold), cast(float, settings.confidence_threshold), anchor_mask,
                     has_anchors)  # both set: stops(settings)
            if self.can_stop else None
        )
        shape = tuple(anchor_mask.shape)
        if fixed_noise is None:
            canvas = ops.randint(vocab, shape)
        else:
            fixed_noise.check_batch(*shape)
            canvas = ops.tokens(fixed_noise.initial_canvas)
        self.canvas = ops.where(anchor_mask, anchor_ids, canvas)
        self.final_ids = self.canvas
        self.finished = ops.zeros_bool((shape[0],))
        self.model_input = None  # the self-conditioning logits
        self.last_entropy = None

    def _noise(self, index: int):
        if self.fixed_noise is None:
            return self.ops.randint(self.vocab, tuple(self.canvas.shape))
        return self.ops.tokens(self.fixed_noise.renoise_tokens(index))

    def step(self, logits, index: int):
        """(S, L, V) logits → (raw argmax, entropy, accepted), each (S, L); the state advances."""
        ops = self.ops
        logits = logits / temperature_at(self.settings, index)
        raw_argmax = ops.argmax(logits)
        denoised = ops.categorical(logits) if self.fixed_noise is None else raw_argmax
        entropy = ops.entropy(logits)
        first = index == 0
        canvas, argmax_canvas, accepted, kept, finished = accept_and_renoise(
            ops, canvas=self.canvas, argmax_canvas=self.final_ids, raw_argmax=raw_argmax, entropy=entropy,
            denoised=denoised, anchor_mask=self.anchor_mask, anchor_ids=self.anchor_ids,
            entropy_bound=self.settings.entropy_bound, noise=lambda: self._noise(index),
            finished=None if first else self.finished, last_entropy=self.last_entropy, stop=self.stop,
        )
        if self.stop is not None:
            if not first:  # finished samples keep their logits too
                logits = ops.where(self.finished[:, None, None], self.model_input, logits)
            self.finished, self.last_entropy = finished, kept
        self.canvas, self.final_ids = canvas, argmax_canvas
        self.model_input = ops.to_model_dtype(logits)
        return raw_argmax, entropy, accepted

    def state(self) -> list:
        extra = [] if self.stop is None or self.stop.history is None else [self.stop.history]
        kept: list = [] if self.last_entropy is None else [self.last_entropy]
        return [self.canvas, self.final_ids, self.model_input, self.finished, *kept, *extra]
