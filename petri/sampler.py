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

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from petri.dish import pinned_arrays
from petri.models import LoadedModel
from petri.trajectory import AnchorSpan, SamplerSettings, Trajectory, assemble_trajectory, check_sampler_inputs

#: Called after each step with (step index, raw argmax (S, L) on the host, finished (S,) bool).
StepCallback = Callable[[int, np.ndarray, np.ndarray], None]


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
        fast: on CUDA, ``None`` (default) runs the GPU fast path (``petri.engine.fast_sampler``:
            CUDA graphs, fused logits pass, tokens drawn by exponential race) when it can run and
            falls back here with a logged reason; ``False`` always runs this eager sampler (the one
            that reproduces ``generate``); ``True`` raises when the fast path cannot run.

    Returns: a :class:`Trajectory` (numpy arrays; see its docstring for shapes).
    """
    check_sampler_inputs(prompt_ids, layouts)
    # --- GPU fast path (issue 14, petri/engine/fast_sampler.py) ---
    if fast is not False and lm.device.type == "cuda":
        from petri.engine.fast_sampler import run_sampler_auto

        result = run_sampler_auto(lm, prompt_ids, layouts, settings, seed=seed, canvas_prefix=canvas_prefix,
                                  prompt_text=prompt_text, on_step=on_step)
        if result is not None:
            return result
        if fast:
            raise RuntimeError("the fast path was asked for but cannot run (the log says why)")
    # --- end of the fast path hook ---
    model, device = lm.model, lm.device
    batch, length, vocab = len(layouts), lm.canvas_length, lm.vocab_size
    max_steps = settings.max_denoising_steps
    started = time.perf_counter()
    if seed is not None:
        torch.manual_seed(seed)

    pinned_mask, pinned_ids = pinned_arrays(layouts, canvas_prefix, length)
    anchor_mask = torch.from_numpy(pinned_mask).to(device)
    anchor_ids = torch.from_numpy(pinned_ids).to(device)
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    cache = _encode_prompt_once(lm, prompt, batch)
    encoded = time.perf_counter()

    prompt_length = prompt.shape[1]
    decoder_positions = torch.arange(
        prompt_length, prompt_length + length, dtype=torch.int32, device=device
    ).unsqueeze(0)
    canvas = torch.randint(0, vocab, (batch, length), device=device)
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
        denoised = torch.multinomial(probs.view(-1, vocab), num_samples=1).view(batch, length)
        raw_argmax = torch.argmax(logits, dim=-1)
        entropy = token_entropy(logits)
        accepted = accept_mask(entropy, anchor_mask, settings.entropy_bound)

        new_canvas = torch.where(accepted, denoised, canvas)
        noise = torch.randint(0, vocab, (batch, length), device=device)
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
