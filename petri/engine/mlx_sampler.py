"""The pinned, logged DiffusionGemma sampler on MLX (the fallback backend for Apple silicon without a
usable PyTorch GPU; MLX also runs on a Linux CPU, where CI tests it).

Step for step the same as :func:`petri.engine.torch_sampler.run_sampler` (see its docstring): decoder forward
with the previous step's (temperature-scaled) logits as self-conditioning → linear temperature
schedule → multinomial denoiser canvas → entropy-bounded acceptance with anchors at entropy 0 →
renoise the rest → pin anchors → adaptive stop on a stable argmax canvas and low mean entropy over
free positions. It records the same raw argmax / entropy / accept logs and returns the same
:class:`~petri.trajectory.Trajectory` (numpy arrays).

MLX draws different random numbers than torch, so the same seed gives different samples on the two
backends. Parity is proven with the noise removed: pass ``fixed_noise`` (a
:class:`~petri.engine.fixed_noise.FixedNoise`) to start from a given canvas, take the argmax
instead of a multinomial draw, and renoise from a fixed token stream.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from petri.cancel import CancelToken
from petri.dish import pinned_arrays
from petri.engine.base import (
    ModelNotFoundError,
    StepCallback,
    fetch_hub_model,
    missing_model_message,
    settings_from_generation_config,
)
from petri.engine.fixed_noise import FixedNoise
from petri.engine.mlx_model import MLXDiffusionGemma, resolve_mlx_dtype
from petri.paths import embedded_model_path
from petri.trajectory import AnchorSpan, SamplerSettings, Trajectory, assemble_trajectory, check_sampler_inputs


@dataclass
class MLXLoadedModel:
    """An MLX model ready to sample from; mirrors :class:`petri.engine.torch_model.LoadedModel`'s fields."""

    model: MLXDiffusionGemma
    tokenizer: object
    model_id: str
    generation_config: object | None = None
    backend: str = "mlx"
    checkpoint_digest: str = ""

    @property
    def device(self) -> str:
        return f"mlx:{mx.default_device().type.name}"

    @property
    def dtype(self) -> str:
        return str(self.model.dtype).removeprefix("mlx.core.")

    @property
    def canvas_length(self) -> int:
        return self.model.canvas_length

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def device_type(self) -> str:
        return "mlx"

    def default_settings(self) -> SamplerSettings:
        return settings_from_generation_config(self.generation_config)

    def describe(self) -> dict[str, str | int]:
        return {
            "model_id": self.model_id,
            "device": self.device,
            "dtype": self.dtype,
            "canvas_length": self.canvas_length,
            "vocab_size": self.vocab_size,
        }

    def fingerprint(self) -> str:
        """The checkpoint's digest (config and weight files, see :func:`checkpoint_digest`) with
        the dtype it runs in: 16 hex characters."""
        return hashlib.sha256(f"{self.checkpoint_digest}/{self.dtype}".encode()).hexdigest()[:16]

    def sample(
        self,
        prompt_ids: Sequence[int],
        layouts: Sequence[Sequence[AnchorSpan]],
        settings: SamplerSettings,
        *,
        seed: int | None = None,
        canvas_prefix: Sequence[int] = (),
        prompt_text: str = "",
        on_step: StepCallback | None = None,
        fixed_noise: FixedNoise | None = None,
        cancel: CancelToken | None = None,
    ) -> Trajectory:
        """:func:`run_mlx_sampler` on this model (see :meth:`petri.engine.base.SamplingModel.sample`)."""
        return run_mlx_sampler(
            self, prompt_ids, layouts, settings, seed=seed, canvas_prefix=canvas_prefix,
            prompt_text=prompt_text, on_step=on_step, fixed_noise=fixed_noise, cancel=cancel,
        )


def checkpoint_digest(folder: Path, head_bytes: int = 1 << 20) -> str:
    """A cheap digest of a checkpoint folder: ``config.json`` whole, and of every safetensors file
    its size and first and last ``head_bytes`` (the header names every tensor and its offsets)."""
    digest = hashlib.sha256((folder / "config.json").read_bytes())
    for weights in sorted(folder.glob("*.safetensors")):
        size = weights.stat().st_size
        digest.update(f"{weights.name}/{size}".encode())
        with weights.open("rb") as handle:
            digest.update(handle.read(head_bytes))
            handle.seek(max(0, size - head_bytes))
            digest.update(handle.read(head_bytes))
    return digest.hexdigest()


def load_mlx_model(name_or_path: str | Path | None = None, dtype: str = "auto", allow_download: bool = False) -> MLXLoadedModel:
    """Load a DiffusionGemma checkpoint for the MLX backend.

    ``name_or_path``: a checkpoint folder or a hub id resolved from the local Hugging Face cache
    only (``None``: the embedded model), or fetched when ``allow_download`` (see
    :func:`petri.engine.base.fetch_hub_model`). ``dtype``: ``"auto"`` is float32 on the CPU and bfloat16 on
    an Apple GPU. Raises :class:`petri.engine.base.ModelNotFoundError` when nothing is found locally.
    """
    from transformers import AutoTokenizer

    embedded = str(embedded_model_path())
    name = str(name_or_path) if name_or_path is not None else embedded
    local = Path(name).expanduser()
    if local.is_dir():
        folder = local
    elif local.exists() or name.startswith((".", "/", "~")):
        raise ModelNotFoundError(missing_model_message(name, embedded))
    elif allow_download:
        folder = Path(fetch_hub_model(name))
    else:
        from huggingface_hub import snapshot_download

        try:
            folder = Path(snapshot_download(name, local_files_only=True))
        except Exception as err:  # noqa: BLE001 - any miss in the local cache means "not found"
            raise ModelNotFoundError(missing_model_message(name, embedded)) from err
    has_weights = (folder / "model.safetensors").exists() or (folder / "model.safetensors.index.json").exists()
    if not has_weights:
        raise ModelNotFoundError(missing_model_message(name, embedded))
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = MLXDiffusionGemma.from_pretrained(folder, dtype=resolve_mlx_dtype(dtype))
    generation_config = None
    if (folder / "generation_config.json").exists():
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import DiffusionGemmaGenerationConfig

        generation_config = DiffusionGemmaGenerationConfig.from_pretrained(str(folder), local_files_only=True)
    return MLXLoadedModel(
        model=model,
        tokenizer=tokenizer,
        model_id=local.name if local.is_dir() else name,
        generation_config=generation_config,
        checkpoint_digest=checkpoint_digest(folder),
    )


# ------------------------------------------------------------------------------ sampler pieces
def token_entropy(logits: mx.array) -> mx.array:
    """Entropy (nats) of softmax(logits) over the last axis, as ``torch.distributions.Categorical``
    computes it: ``-Σ p · (logits - logsumexp)``."""
    normalized = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return -mx.sum(normalized * mx.exp(normalized), axis=-1)


def accept_mask(entropy: mx.array, anchor_mask: mx.array, entropy_bound: float) -> mx.array:
    """Entropy-bounded acceptance: the k lowest-entropy positions with Σ entropy - max ≤ bound;
    anchors count as entropy 0. (S, L) float, (S, L) bool → (S, L) bool."""
    budget = mx.where(anchor_mask, mx.zeros_like(entropy), entropy)
    order = mx.argsort(budget, axis=-1)
    ordered = mx.take_along_axis(budget, order, axis=-1)
    selected = (mx.cumsum(ordered, axis=-1) - ordered) <= entropy_bound
    return mx.take_along_axis(selected, mx.argsort(order, axis=-1), axis=-1)


class StabilityTracker:
    """The adaptive stop: argmax canvas equal to the previous ``threshold`` ones and mean entropy
    over free positions below ``confidence`` (exactly :class:`petri.engine.torch_sampler.StabilityTracker`)."""

    def __init__(self, threshold: int, confidence: float, anchor_mask: mx.array):
        self.threshold = threshold
        self.confidence = confidence
        self.free = (~anchor_mask).astype(mx.float32)
        self.free_count = mx.maximum(mx.sum(self.free, axis=-1), 1.0)
        self.has_anchors = bool(mx.any(anchor_mask).item())
        self.history: mx.array | None = None

    def __call__(self, argmax_canvas: mx.array, entropy: mx.array) -> mx.array:
        if self.threshold == 0:
            stable = mx.ones((argmax_canvas.shape[0],), dtype=mx.bool_)
        else:
            if self.history is None:
                self.history = mx.full((self.threshold, *argmax_canvas.shape), -1, dtype=argmax_canvas.dtype)
            stable = mx.all(mx.all(self.history == argmax_canvas[None], axis=-1), axis=0)
            self.history = mx.concatenate([self.history[1:], argmax_canvas[None]], axis=0)
        if self.has_anchors:
            mean_entropy = mx.sum(entropy * self.free, axis=-1) / self.free_count
        else:
            mean_entropy = mx.mean(entropy, axis=-1)
        return stable & (mean_entropy < self.confidence)


# ------------------------------------------------------------------------------------ sampler
def run_mlx_sampler(
    lm: MLXLoadedModel,
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
) -> Trajectory:
    """Denoise one canvas per sample on MLX; arguments as :func:`petri.engine.torch_sampler.run_sampler`.

    ``seed`` seeds MLX's generator (``mx.random.seed``): reproducible on MLX, not equal to torch's
    samples. ``fixed_noise`` removes the randomness (given start canvas, argmax denoiser, fixed
    renoise stream) so the run can be compared token for token with the torch backend.
    """
    check_sampler_inputs(prompt_ids, layouts)
    model = lm.model
    batch, length, vocab = len(layouts), lm.canvas_length, lm.vocab_size
    max_steps = settings.max_denoising_steps
    if fixed_noise is not None:
        fixed_noise.check_batch(batch, length)
    started = time.perf_counter()
    if seed is not None:
        mx.random.seed(seed)

    mask_np, ids_np = pinned_arrays(layouts, canvas_prefix, length)
    anchor_mask, anchor_ids = mx.array(mask_np), mx.array(ids_np.astype(np.int32))
    cache = model.encode(np.asarray([list(prompt_ids)])).repeat(batch)
    encoded = time.perf_counter()

    if fixed_noise is None:
        canvas = mx.random.randint(0, vocab, (batch, length), dtype=mx.int32)
    else:
        canvas = mx.array(np.asarray(fixed_noise.initial_canvas).astype(np.int32))
    canvas = mx.where(anchor_mask, anchor_ids, canvas)
    stopper = None
    if settings.stability_threshold is not None and settings.confidence_threshold is not None:
        stopper = StabilityTracker(settings.stability_threshold, settings.confidence_threshold, anchor_mask)
    argmax_log: list[mx.array] = []
    entropy_log: list[mx.array] = []
    accepted_log: list[mx.array] = []
    steps = mx.zeros((batch,), dtype=mx.int32)
    finished = mx.zeros((batch,), dtype=mx.bool_)
    argmax_canvas = canvas
    self_conditioning: mx.array | None = None
    last_entropy: mx.array | None = None

    for index, remaining in enumerate(range(max_steps, 0, -1)):
        if cancel is not None:  # a host-side flag: no device synchronisation
            cancel.check()
        running = ~finished
        steps = steps + running.astype(mx.int32)
        logits = model.decode(canvas, cache, self_conditioning)
        temperature = settings.t_min + (settings.t_max - settings.t_min) * (remaining / max_steps)
        logits = logits / temperature
        raw_argmax = mx.argmax(logits, axis=-1).astype(mx.int32)
        if fixed_noise is None:
            denoised = mx.random.categorical(logits, axis=-1).astype(mx.int32)
        else:
            denoised = raw_argmax
        entropy = token_entropy(logits)
        accepted = accept_mask(entropy, anchor_mask, settings.entropy_bound)

        new_canvas = mx.where(accepted, denoised, canvas)
        if fixed_noise is None:
            noise = mx.random.randint(0, vocab, (batch, length), dtype=mx.int32)
        else:
            noise = mx.array(fixed_noise.renoise_tokens(index).astype(np.int32))
        new_canvas = mx.where(accepted, new_canvas, noise)
        new_canvas = mx.where(anchor_mask, anchor_ids, new_canvas)
        new_argmax = mx.where(anchor_mask, anchor_ids, raw_argmax)

        argmax_log.append(mx.where(running[:, None], raw_argmax, -1))
        entropy_log.append(mx.where(running[:, None], entropy, float("nan")))
        accepted_log.append(accepted & running[:, None])

        if stopper is not None:
            if index > 0:  # finished samples keep their canvas, argmax and logits
                new_argmax = mx.where(finished[:, None], argmax_canvas, new_argmax)
                new_canvas = mx.where(finished[:, None], canvas, new_canvas)
                logits = mx.where(finished[:, None, None], self_conditioning, logits)
                entropy = mx.where(finished[:, None], last_entropy, entropy)
            finished = finished | stopper(new_argmax, entropy)
            last_entropy = entropy
        canvas, argmax_canvas = new_canvas, new_argmax
        self_conditioning = logits.astype(model.dtype)
        # MLX is lazy: evaluate once per step so the graph does not grow across steps.
        pending = [canvas, argmax_canvas, self_conditioning, finished, steps]
        pending += [argmax_log[-1], entropy_log[-1], accepted_log[-1]]
        if stopper is not None:
            pending += [last_entropy] + ([stopper.history] if stopper.history is not None else [])
        mx.eval(*pending)
        if on_step is not None:
            on_step(index, np.array(raw_argmax), np.array(finished))
        if stopper is not None and bool(mx.all(finished).item()):
            break

    return assemble_trajectory(
        lm,
        argmax=np.array(mx.stack(argmax_log, axis=1)),
        entropy=np.array(mx.stack(entropy_log, axis=1)),
        accepted=np.array(mx.stack(accepted_log, axis=1)),
        steps=np.array(steps),
        anchor_mask=mask_np,
        final_ids=np.array(argmax_canvas),
        layouts=layouts,
        prompt_ids=prompt_ids,
        prompt_text=prompt_text,
        settings=settings,
        seed=seed,
        sampler="mlx",
        timings={
            "encode_s": encoded - started,
            "denoise_s": time.perf_counter() - encoded,
            "total_s": time.perf_counter() - started,
        },
    )
