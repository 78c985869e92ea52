"""The pinned, logged DiffusionGemma sampler on MLX (the fallback backend for Apple silicon without a
usable PyTorch GPU; MLX also runs on a Linux CPU, where CI tests it).

Step for step the same as :func:`petri.engine.torch.sampler.run_sampler` (see its docstring): decoder forward
with the previous step's (temperature-scaled) logits as self-conditioning → linear temperature
schedule → multinomial denoiser canvas → entropy-bounded acceptance with anchors at entropy 0 →
renoise the rest → pin anchors → adaptive stop on a stable argmax canvas and low mean entropy over
free positions. It records the same raw argmax / entropy / accept logs and returns the same
:class:`~petri.core.trajectory.Trajectory` (numpy arrays).

MLX draws different random numbers than torch, so the same seed gives different samples on the two
backends. Parity is proven with the noise removed: pass ``fixed_noise`` (a
:class:`~petri.engine.fixed_noise.FixedNoise`) to start from a given canvas, take the argmax
instead of a multinomial draw, and renoise from a fixed token stream.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import mlx.core as mx
import numpy as np

from petri.core.cancel import CancelToken
from petri.core.dish import pinned_arrays
from petri.core.paths import embedded_model_path
from petri.core.trajectory import SamplerSettings, Trajectory
from petri.engine.base import (
    EngineFacts,
    ModelNotFoundError,
    RequestSampling,
    SampleRequest,
    StepCallback,
    engine_facts,
    fetch_hub_model,
    missing_model_message,
    prompt_room,
    settings_from_generation_config,
    spelled_out,
)
from petri.engine.families.uniform import FAMILY, UniformDiffusionScheduler
from petri.engine.fixed_noise import FixedNoise
from petri.engine.loop import RecordedStepper, run_loop
from petri.engine.mlx.model import EncoderCache, MLXDiffusionGemma, resolve_mlx_dtype
from petri.engine.torch.prompt_cache import PromptCache


@dataclass
class MLXLoadedModel(RequestSampling):
    """An MLX model ready to sample from; mirrors :class:`petri.engine.torch.model.LoadedModel`'s fields."""

    model: MLXDiffusionGemma
    tokenizer: object
    model_id: str
    generation_config: object | None = None
    backend: str = "mlx"
    checkpoint_digest: str = ""
    #: the encoder caches kept for reuse (:mod:`petri.engine.torch.prompt_cache`), made for ``model``: a
    #: copy made with ``dataclasses.replace`` over another model gets its own
    prompts: PromptCache | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.prompts is None or self.prompts.owner is not self.model:
            self.prompts = PromptCache(repeat=EncoderCache.repeat, size=lambda cache: cache.nbytes, owner=self.model)

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

    family = FAMILY
    tier = "mlx"

    @property
    def architecture(self) -> str:
        """The model class's name (the Model tab names it)."""
        return type(self.model).__name__

    @property
    def max_positions(self) -> int | None:
        return self.model.max_positions

    @property
    def max_prompt_length(self) -> int | None:
        return prompt_room(self.max_positions, self.canvas_length)

    def default_settings(self) -> SamplerSettings:
        return settings_from_generation_config(self.generation_config)

    def facts(self) -> EngineFacts:
        """:class:`~petri.engine.base.EngineFacts` (the kept prompts: its own)."""
        return engine_facts(self, self.architecture, cast(PromptCache, self.prompts).max_bytes)

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

    def sampler(self):
        """:func:`sample_mlx`, what :meth:`sample` runs (:class:`~petri.engine.base.RequestSampling`)."""
        return sample_mlx


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


def load_mlx_model(name_or_path: str | os.PathLike | None = None, dtype: str = "auto", allow_download: bool = False) -> MLXLoadedModel:
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


class MLXOps:
    """:class:`petri.engine.loop.ArrayOps` on MLX arrays (int32 tokens); ``model_dtype`` is what
    the self-conditioning input is cast to. Draws use MLX's generator (``mx.random``)."""

    def __init__(self, model_dtype=mx.float32):
        self.model_dtype = model_dtype

    where = staticmethod(mx.where)
    entropy = staticmethod(token_entropy)
    accept_mask = staticmethod(accept_mask)

    def tokens(self, host) -> mx.array:
        return mx.array(np.asarray(host).astype(np.int32))

    def mask(self, host) -> mx.array:
        return mx.array(np.asarray(host, dtype=bool))

    def randint(self, high: int, shape) -> mx.array:
        return mx.random.randint(0, high, shape, dtype=mx.int32)

    def categorical(self, logits: mx.array) -> mx.array:
        return mx.random.categorical(logits, axis=-1).astype(mx.int32)

    def argmax(self, logits: mx.array) -> mx.array:
        return mx.argmax(logits, axis=-1).astype(mx.int32)

    def zeros_bool(self, shape) -> mx.array:
        return mx.zeros(shape, dtype=mx.bool_)

    def ones_bool(self, shape) -> mx.array:
        return mx.ones(shape, dtype=mx.bool_)

    def zeros_int(self, shape) -> mx.array:
        return mx.zeros(shape, dtype=mx.int32)

    def int32(self, array: mx.array) -> mx.array:
        return array.astype(mx.int32)

    def float32(self, array: mx.array) -> mx.array:
        return array.astype(mx.float32)

    def to_model_dtype(self, array: mx.array) -> mx.array:
        return array.astype(self.model_dtype)

    def stack(self, arrays, axis: int) -> mx.array:
        return mx.stack(list(arrays), axis=axis)

    def numpy(self, array: mx.array) -> np.ndarray:
        return np.array(array)

    def all(self, array: mx.array) -> bool:
        return bool(mx.all(array).item())

    def materialize(self, *arrays) -> None:
        """MLX is lazy: evaluate once per step so the graph does not grow across steps."""
        mx.eval(*[a for a in arrays if a is not None])

    # the stop rule's history (threshold, S, L)
    def full_like_history(self, threshold: int, argmax_canvas: mx.array) -> mx.array:
        return mx.full((threshold, *argmax_canvas.shape), -1, dtype=argmax_canvas.dtype)

    def same_as_history(self, history: mx.array, argmax_canvas: mx.array) -> mx.array:
        return mx.all(mx.all(history == argmax_canvas[None], axis=-1), axis=0)

    def push_history(self, history: mx.array, argmax_canvas: mx.array) -> mx.array:
        return mx.concatenate([history[1:], argmax_canvas[None]], axis=0)

    def free_mean(self, entropy: mx.array, anchor_mask: mx.array) -> mx.array:
        free = (~anchor_mask).astype(mx.float32)
        return mx.sum(entropy * free, axis=-1) / mx.maximum(mx.sum(free, axis=-1), 1.0)

    def row_mean(self, entropy: mx.array) -> mx.array:
        return mx.mean(entropy, axis=-1)


# ------------------------------------------------------------------------------------ sampler
def sample_mlx(
    lm: MLXLoadedModel,
    request: SampleRequest,
    *,
    on_step: StepCallback | None = None,
    fixed_noise: FixedNoise | None = None,
    cancel: CancelToken | None = None,
) -> Trajectory:
    """Denoise one canvas per sample on MLX: the loop (:func:`petri.engine.loop.run_loop`) over
    DiffusionGemma's step (:class:`petri.engine.families.uniform.UniformDiffusionScheduler`);
    arguments as :func:`petri.engine.torch.sampler.sample_request`.

    ``seed`` seeds MLX's generator (``mx.random.seed``): reproducible on MLX, not equal to torch's
    samples. ``fixed_noise`` removes the randomness (given start canvas, argmax denoiser, fixed
    renoise stream) so the run can be compared token for token with the torch backend.
    """
    model = lm.model
    started = time.perf_counter()
    if request.seed is not None:
        mx.random.seed(request.seed)
    ops = MLXOps(model.dtype)
    mask_np, ids_np = pinned_arrays(request.layouts, request.canvas_prefix, lm.canvas_length)
    anchor_mask, anchor_ids = ops.mask(mask_np), ops.tokens(ids_np)
    ids = tuple(int(i) for i in request.prompt_ids)
    cache = cast(PromptCache, lm.prompts).encoded((ids, lm.dtype), lambda: model.encode(np.asarray([list(ids)])), len(request.layouts))
    encoded = time.perf_counter()
    scheduler = UniformDiffusionScheduler(
        ops, request.settings, lm.vocab_size, anchor_mask, anchor_ids, bool(mask_np.any()), fixed_noise
    )
    stepper = RecordedStepper(ops, lambda canvas, sc: model.decode(canvas, cache, sc), scheduler, len(request.layouts))
    return run_loop(stepper, lm=lm, request=request, pinned_mask=mask_np, sampler="mlx",
                    started=started, encoded=encoded, on_step=on_step, cancel=cancel)


#: :func:`sample_mlx` with the request spelled out (the fields of :class:`SampleRequest`)
run_mlx_sampler = spelled_out(sample_mlx)
