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
(random numbers are drawn in the same order); ``tests/engine/test_sampler_parity.py`` proves it.
"""

from __future__ import annotations

import time

import torch

from petri.core.cancel import CancelToken
from petri.core.trajectory import SamplerSettings, Trajectory
from petri.engine.base import SampleRequest, StepCallback, TorchLoadedModel, spelled_out
from petri.engine.families.uniform import UniformDiffusionScheduler
from petri.engine.fixed_noise import FixedNoise
from petri.engine.loop import RecordedStepper, run_loop
from petri.engine.torch.array_ops import TorchOps, accept_mask, token_entropy  # noqa: F401 - the names tests import
from petri.engine.torch.step import StabilityTracker, cache_kwarg, start_batch  # noqa: F401 - StabilityTracker: tests


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
def sample_request(
    lm: TorchLoadedModel,
    request: SampleRequest,
    *,
    on_step: StepCallback | None = None,
    fixed_noise: FixedNoise | None = None,
    cancel: CancelToken | None = None,
    fast: bool | None = None,
) -> Trajectory:
    """Denoise one canvas per sample, all samples in one batch sharing one encoded prompt: the
    loop (:func:`petri.engine.loop.run_loop`) over DiffusionGemma's step
    (:class:`petri.engine.families.uniform.UniformDiffusionScheduler`) on torch.

    Args:
        lm: the loaded model (a torch :class:`~petri.engine.torch.model.LoadedModel`).
        request: prompt (P,), layouts (S), settings, seed (``torch.manual_seed`` before the first
            random draw), canvas prefix, prompt text.
        on_step: optional live callback; it costs one device→host copy per step, so leave it
            ``None`` for batch runs.
        fixed_noise: replaces the three random draws (the start canvas, the denoiser's multinomial
            draw → the argmax, the renoise tokens of each step) for backend parity tests
            (:mod:`petri.engine.fixed_noise`); ``None`` samples as ``generate`` does.
        cancel: checked at the start of every step; a cancelled token raises
            :class:`~petri.core.cancel.Cancelled` within one step.
        fast: on CUDA, ``None`` (default) runs the GPU fast path (``petri.engine.cuda.fast_sampler``:
            CUDA graphs, fused logits pass, tokens drawn by exponential race, or by inverse CDF in
            its compiled tier) when it can run and falls back here with a logged reason; ``False``
            always runs this eager sampler (the one that reproduces ``generate``); ``True`` raises
            when the fast path cannot run.

    Returns: a :class:`Trajectory` (numpy arrays; see its docstring for shapes).
    """
    # --- GPU fast path (issue 14, petri/engine/cuda/fast_sampler.py) ---
    if fast is not False and lm.device.type == "cuda" and fixed_noise is None:
        from petri.engine.cuda.fast_sampler import run_sampler_auto

        result = run_sampler_auto(lm, request, on_step=on_step, cancel=cancel)
        if result is not None:
            return result
        if fast:
            raise RuntimeError("the fast path was asked for but cannot run (the log says why)")
    # --- end of the fast path hook ---
    started = time.perf_counter()
    stepper, pinned_mask = eager_stepper(lm, request, fixed_noise)
    encoded = time.perf_counter()
    return run_loop(stepper, lm=lm, request=request, pinned_mask=pinned_mask, sampler=lm.fast_tier.eager_name,
                    started=started, encoded=encoded, on_step=on_step, cancel=cancel)


#: :func:`sample_request` with the request spelled out (the fields of :class:`SampleRequest`)
run_sampler = spelled_out(sample_request)


def eager_stepper(lm: TorchLoadedModel, request: SampleRequest, fixed_noise: FixedNoise | None = None):
    """The eager sampler's first moves (seed, pins, the prompt encoded once) and its stepper: the
    decoder forward and DiffusionGemma's step (:class:`RecordedStepper`), ready for step 0. Returns
    (stepper, pinned mask (S, L) bool on the host). :func:`sample_request` and the probe
    (:mod:`petri.engine.probe`) drive it."""
    pinned_mask, anchor_mask, anchor_ids, cache = start_batch(
        lm, request.prompt_ids, request.layouts, request.canvas_prefix, request.seed
    )
    ops = TorchOps(lm.device, lm.model.model.decoder.embed_tokens.weight.dtype)
    scheduler = UniformDiffusionScheduler(
        ops, request.settings, lm.vocab_size, anchor_mask, anchor_ids, bool(pinned_mask.any()), fixed_noise
    )
    forward = _decoder_forward(lm, cache, scheduler.canvas)
    return RecordedStepper(ops, forward, scheduler, len(request.layouts)), pinned_mask


def _decoder_forward(lm: TorchLoadedModel, cache, canvas: torch.Tensor):
    """DiffusionGemma's decoder over the canvas (S, L) after the prompt's cache, with the previous
    step's logits as self-conditioning: ``forward(canvas, self_conditioning) → logits (S, L, V)``."""
    model, device = lm.model, lm.device
    batch, length = canvas.shape
    prompt_length = cache.get_seq_length()
    positions = torch.arange(prompt_length, prompt_length + length, dtype=torch.int32, device=device).unsqueeze(0)
    mask_mapping = model.model.decoder.create_diffusion_decoder_attention_mask(
        config=model.config,
        inputs_embeds=canvas.unsqueeze(-1),
        **cache_kwarg(model.model.decoder.create_diffusion_decoder_attention_mask, cache),
        decoder_attention_mask=torch.ones((batch, prompt_length + length), dtype=torch.bool, device=device),
    )
    forward_cache = cache_kwarg(model.forward, cache)

    def forward(canvas: torch.Tensor, self_conditioning: torch.Tensor | None) -> torch.Tensor:
        return model(
            decoder_input_ids=canvas,
            self_conditioning_logits=self_conditioning,
            decoder_attention_mask=mask_mapping,
            decoder_position_ids=positions,
            **forward_cache,
        ).logits

    return forward
