"""The pinned, instrumented DiffusionGemma sampler.

It runs the same denoising step as transformers' ``DiffusionGemmaForBlockDiffusion.generate``
(``_denoising_step`` in ``generation_diffusion_gemma.py``): decoder forward with the previous
step's logits as self-conditioning → linear temperature schedule → sample a denoiser canvas →
accept the lowest-entropy tokens while the entropy budget holds → renoise every other position →
stop when the argmax canvas is stable and the mean entropy is low. Added on top:

- anchors: pinned tokens written into the initial canvas and after every renoise; they never count
  against the entropy budget (their entropy is taken as 0 when choosing what to accept), and the
  stopping rule looks only at free positions and at the argmax with anchors in place;
- a record, per step, sample and position, of the *raw* argmax (before anything is forced), the
  entropy, and the accept mask. It stays on the device during the loop and is copied once.

With no anchors and the same ``torch.manual_seed``, the tokens returned equal ``model.generate``'s
(random numbers are drawn in the same order); ``tests/test_sampler_parity.py`` proves it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from petri.cancel import CancelToken
from petri.engine.base import StepCallback
from petri.engine.fixed_noise import FixedNoise
from petri.engine.torch_step import StabilityTracker, _cache_kwarg, accept_mask, start_batch, token_entropy
from petri.engine.fp8 import precision_tag
from petri.trajectory import AnchorSpan, SamplerSettings, Trajectory, assemble_trajectory, check_sampler_inputs

if TYPE_CHECKING:  # the model class calls this module; the sampler only reads the model's fields
    from petri.engine.torch_model import LoadedModel


@dataclass
class _Record:
    """Per-step logs kept on the device: (T, S, L) each, plus the step at which each sample stopped."""

    argmax: torch.Tensor
    entropy: torch.Tensor
    accepted: torch.Tensor
    steps: torch.Tensor  # (S,) int32

    @classmethod
    def empty(cls, steps: int, batch: int, length: int, device: torch.device) -> "_Record":
        return cls(
            argmax=torch.full((steps, batch, length), -1, dtype=torch.int32, device=device),
            entropy=torch.full((steps, batch, length), float("nan"), dtype=torch.float32, device=device),
            accepted=torch.zeros((steps, batch, length), dtype=torch.bool, device=device),
            steps=torch.zeros(batch, dtype=torch.int32, device=device),
        )


def generate_kwargs(settings: SamplerSettings) -> dict:
    """``settings`` spelled as keywords of transformers' DiffusionGemma ``generate`` (the reference
    this sampler reproduces)."""
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

    return {
        "max_denoising_steps": settings.max_denoising_steps,
        "t_min": settings.t_min,
        "t_max": settings.t_max,
        "sampler_config": EntropyBoundSamplerConfig(entropy_bound=settings.entropy_bound),
        "stability_threshold": settings.stability_threshold,
        "confidence_threshold": settings.confidence_threshold,
    }


@torch.no_grad()
def run_sampler(
    lm: LoadedModel,
    prompt_ids: Sequence[int],
    layouts: Sequence[Sequence[AnchorSpan]],
    settings: SamplerSettings = SamplerSettings(),
    *,
    seed: int | None = None,
    canvas_prefix: Sequence[int] = (),
    prompt_text: str = "",
    on_step: StepCallback | None = None,
    fixed_noise: FixedNoise | None = None,
    cancel: CancelToken | None = None,
    fast: bool | None = None,
) -> Trajectory:
    """Denoise one canvas per sample, all samples in one batch sharing one encoded prompt.

    Args:
        lm: the loaded model.
        prompt_ids: the encoded prompt (P,), shared by all samples (encoded once).
        layouts: per sample, its anchors (possibly none); ``len(layouts)`` is the batch size S.
        settings: sampler settings (DiffusionGemma's defaults).
        seed: ``torch.manual_seed`` applied before the first random draw (``None``: leave the RNG).
        canvas_prefix: tokens pinned at the canvas start for every sample (the thought block).
        on_step: optional live callback; it costs one device→host copy per step, so leave it
            ``None`` for batch runs.
        fixed_noise: replaces the three random draws (the start canvas, the denoiser's multinomial
            draw → the argmax, the renoise tokens of each step) for backend parity tests
            (:mod:`petri.engine.fixed_noise`); ``None`` samples as ``generate`` does.
        cancel: checked at the start of every step; a cancelled token raises
            :class:`~petri.cancel.Cancelled` within one step.
        fast: on CUDA, ``None`` (default) runs the GPU fast path (``petri.engine.fast_sampler``:
            CUDA graphs, fused logits pass, tokens drawn by exponential race, or by inverse CDF in
            its compiled tier) when it can run and
            falls back here with a logged reason; ``False`` always runs this eager sampler (the one
            that reproduces ``generate``); ``True`` raises when the fast path cannot run.

    Returns: a :class:`Trajectory` (numpy arrays; see its docstring for shapes).
    """
    check_sampler_inputs(prompt_ids, layouts)
    # --- GPU fast path (issue 14, petri/engine/fast_sampler.py) ---
    if fast is not False and lm.device.type == "cuda" and fixed_noise is None:
        from petri.engine.fast_sampler import run_sampler_auto

        result = run_sampler_auto(lm, prompt_ids, layouts, settings, seed=seed, canvas_prefix=canvas_prefix,
                                  prompt_text=prompt_text, on_step=on_step, cancel=cancel)
        if result is not None:
            return result
        if fast:
            raise RuntimeError("the fast path was asked for but cannot run (the log says why)")
    # --- end of the fast path hook ---
    model, device = lm.model, lm.device
    batch, length, vocab = len(layouts), lm.canvas_length, lm.vocab_size
    if fixed_noise is not None:
        fixed_noise.check_batch(batch, length)
    max_steps = settings.max_denoising_steps
    started = time.perf_counter()
    pinned_mask, anchor_mask, anchor_ids, cache = start_batch(lm, prompt_ids, layouts, canvas_prefix, seed)
    encoded = time.perf_counter()

    prompt_length = len(prompt_ids)
    decoder_positions = torch.arange(
        prompt_length, prompt_length + length, dtype=torch.int32, device=device
    ).unsqueeze(0)
    if fixed_noise is None:
        canvas = torch.randint(0, vocab, (batch, length), device=device)
    else:
        canvas = torch.as_tensor(np.asarray(fixed_noise.initial_canvas), dtype=torch.long, device=device)
    canvas = torch.where(anchor_mask, anchor_ids, canvas)
    mask_mapping = model.model.decoder.create_diffusion_decoder_attention_mask(
        config=model.config,
        inputs_embeds=canvas.unsqueeze(-1),
        **_cache_kwarg(model.model.decoder.create_diffusion_decoder_attention_mask, cache),
        decoder_attention_mask=torch.ones((batch, prompt_length + length), dtype=torch.bool, device=device),
    )
    stopper = None
    if settings.stability_threshold is not None and settings.confidence_threshold is not None:
        stopper = StabilityTracker(settings.stability_threshold, settings.confidence_threshold, anchor_mask)
    record = _Record.empty(max_steps, batch, length, device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    argmax_canvas = canvas
    self_conditioning: torch.Tensor | None = None
    last_entropy: torch.Tensor | None = None  # the entropy finished samples keep (adaptive stop)
    embed_dtype = model.model.decoder.embed_tokens.weight.dtype
    forward_cache = _cache_kwarg(model.forward, cache)

    for index, remaining in enumerate(range(max_steps, 0, -1)):
        if cancel is not None:  # a host-side flag: no device synchronisation
            cancel.check()
        running = ~finished
        record.steps += running.to(torch.int32)
        logits = model(
            decoder_input_ids=canvas,
            self_conditioning_logits=self_conditioning,
            decoder_attention_mask=mask_mapping,
            decoder_position_ids=decoder_positions,
            **forward_cache,
        ).logits
        temperature = settings.t_min + (settings.t_max - settings.t_min) * (remaining / max_steps)
        logits = logits / temperature
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        raw_argmax = torch.argmax(logits, dim=-1)
        if fixed_noise is None:
            denoised = torch.multinomial(probs.view(-1, vocab), num_samples=1).view(batch, length)
        else:
            denoised = raw_argmax
        entropy = token_entropy(logits)
        accepted = accept_mask(entropy, anchor_mask, settings.entropy_bound)

        new_canvas = torch.where(accepted, denoised, canvas)
        if fixed_noise is None:
            noise = torch.randint(0, vocab, (batch, length), device=device)
        else:
            noise = torch.as_tensor(fixed_noise.renoise_tokens(index), dtype=torch.long, device=device)
        new_canvas = torch.where(accepted, new_canvas, noise)
        new_canvas = torch.where(anchor_mask, anchor_ids, new_canvas)
        new_argmax = torch.where(anchor_mask, anchor_ids, raw_argmax)

        record.argmax[index] = torch.where(running[:, None], raw_argmax.to(torch.int32), -1)
        record.entropy[index] = torch.where(running[:, None], entropy.float(), float("nan"))
        record.accepted[index] = accepted & running[:, None]

        if stopper is not None:
            if index > 0:  # finished samples keep their canvas, argmax and logits
                new_argmax = torch.where(finished[:, None], argmax_canvas, new_argmax)
                new_canvas = torch.where(finished[:, None], canvas, new_canvas)
                logits = torch.where(finished[:, None, None], self_conditioning, logits)
                entropy = torch.where(finished[:, None], last_entropy, entropy)
            finished = finished | stopper(new_argmax, entropy)
            last_entropy = entropy
        canvas, argmax_canvas = new_canvas, new_argmax
        self_conditioning = logits.to(embed_dtype)
        if on_step is not None:
            on_step(index, raw_argmax.cpu().numpy(), finished.cpu().numpy())
        if stopper is not None and bool(finished.all()):
            break

    steps_run = index + 1
    return assemble_trajectory(
        lm,
        sampler="eager" + precision_tag(lm),  # issue 25: the FP8 tier named
        # one device→host copy of each record, reshaped (T, S, L) → (S, T, L)
        argmax=record.argmax[:steps_run].permute(1, 0, 2).cpu().numpy(),
        entropy=record.entropy[:steps_run].permute(1, 0, 2).cpu().numpy(),
        accepted=record.accepted[:steps_run].permute(1, 0, 2).cpu().numpy(),
        steps=record.steps.cpu().numpy(),
        anchor_mask=pinned_mask,
        final_ids=argmax_canvas.cpu().numpy(),
        layouts=layouts,
        prompt_ids=prompt_ids,
        prompt_text=prompt_text,
        settings=settings,
        seed=seed,
        timings={
            "encode_s": encoded - started,
            "denoise_s": time.perf_counter() - encoded,
            "total_s": time.perf_counter() - started,
        },
    )
