"""Loading DiffusionGemma models: the real one from the local Hugging Face cache, a local
checkpoint folder (the embedded model in ``assets/petri-tiny`` by default), or a tiny random one.

Nothing is ever downloaded at run time: hub ids are resolved from the local cache only, and a
missing model produces a :class:`ModelNotFoundError` whose message says how to get it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion, PreTrainedTokenizerBase

from petri.backends import resolve_device, resolve_dtype
from petri.trajectory import SamplerSettings

REPO_ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_MODEL_PATH = REPO_ROOT / "assets" / "petri-tiny"
REAL_MODEL_ID = "google/diffusiongemma-26B-A4B-it"


class ModelNotFoundError(RuntimeError):
    """The named model is neither a local folder nor in the local Hugging Face cache."""


@dataclass
class LoadedModel:
    """A model ready to sample from, with everything an output must name.

    ``tokenizer`` is ``None`` only for benchmark models built without a vocabulary (random weights
    of the full-size architecture); their trajectories carry empty texts.
    """

    model: DiffusionGemmaForBlockDiffusion
    tokenizer: PreTrainedTokenizerBase | None
    model_id: str
    device: torch.device
    dtype: torch.dtype

    @property
    def canvas_length(self) -> int:
        return int(self.model.config.canvas_length)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.text_config.vocab_size)

    def default_settings(self) -> SamplerSettings:
        """The sampler settings of the checkpoint's generation config, DiffusionGemma's defaults elsewhere."""
        return settings_from_generation_config(self.model.generation_config)

    def describe(self) -> dict[str, str | int]:
        return {
            "model_id": self.model_id,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "canvas_length": self.canvas_length,
            "vocab_size": self.vocab_size,
        }


def compile_for_sampling(lm: LoadedModel, backend: str = "inductor", regional: bool = True) -> LoadedModel:
    """Compile what the samplers call, in place. ``regional`` (default): ``torch.compile`` each decoder
    layer (``petri.engine.fast_sampler.compile_regions``: one compiled graph per layer type, reused
    across layers and across restarts through Inductor's on-disk caches); the GPU fast path captures
    the compiled layers in its CUDA graphs. ``regional=False``: the whole model forward, as before
    (measured on one H200, full-size architecture, 12 samples × 24 steps: 2.85 s instead of 4.72 s
    eager after about 160 s of compilation, ``experiments/results/bench_h200_b12_p200_compiled_petri.json``).
    ``backend="eager"`` traces without compiling (what the CPU test uses)."""
    if regional:
        from petri.engine.fast_sampler import compile_regions

        compile_regions(lm, backend=backend)
    else:
        lm.model.forward = torch.compile(lm.model.forward, backend=backend)
    return lm


def settings_from_generation_config(generation_config) -> SamplerSettings:
    """Read DiffusionGemma's sampler settings off a (DiffusionGemma)GenerationConfig; unset ones keep
    :class:`SamplerSettings`' defaults, which are transformers' global defaults."""
    defaults = SamplerSettings()
    sampler_config = getattr(generation_config, "sampler_config", None)
    entropy_bound = getattr(sampler_config, "entropy_bound", None)
    if isinstance(sampler_config, dict):
        entropy_bound = sampler_config.get("entropy_bound")

    def pick(name):
        value = getattr(generation_config, name, None)
        return getattr(defaults, name) if value is None else value

    return SamplerSettings(
        max_denoising_steps=int(pick("max_denoising_steps")),
        t_min=float(pick("t_min")),
        t_max=float(pick("t_max")),
        entropy_bound=float(entropy_bound if entropy_bound is not None else defaults.entropy_bound),
        stability_threshold=pick("stability_threshold"),
        confidence_threshold=pick("confidence_threshold"),
    )


def real_model_is_cached(model_id: str = REAL_MODEL_ID) -> bool:
    """True when the hub model's config and weights index are in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    for filename in ("config.json", "model.safetensors.index.json"):
        found = try_to_load_from_cache(model_id, filename)
        if not isinstance(found, str):
            return False
    return True


def default_model_name() -> str:
    """The real DiffusionGemma when a GPU and its cached weights are present, else the embedded model."""
    if torch.cuda.is_available() and real_model_is_cached():
        return REAL_MODEL_ID
    return str(EMBEDDED_MODEL_PATH)


def _missing_model_message(name: str) -> str:
    return (
        f"Model {name!r} was not found: it is not a local folder and not in the local Hugging Face cache "
        f"({os.environ.get('HF_HOME', '~/.cache/huggingface')}). Petri never downloads at run time. "
        f"To use it, download it once on a machine with access, e.g. "
        f"`huggingface-cli download {name}` (about 52 GB for {REAL_MODEL_ID}), or pass the path of a "
        f"checkpoint folder. Without a model argument petri uses the embedded model in {EMBEDDED_MODEL_PATH}."
    )


def load_model(
    name_or_path: str | os.PathLike | None = None,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
) -> LoadedModel:
    """Load a DiffusionGemma checkpoint for sampling.

    Args:
        name_or_path: a hub id (resolved from the local cache only) or a checkpoint folder; ``None``
            picks :func:`default_model_name`.
        device: ``"auto"`` (cuda → mps → cpu) or a torch device string.
        dtype: ``"auto"`` (bf16 on CUDA, fp16 on MPS, fp32 on CPU) or a dtype name.
    """
    name = str(name_or_path) if name_or_path is not None else default_model_name()
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    local = Path(name).expanduser()
    source = str(local) if local.is_dir() else name
    if not local.is_dir() and (local.exists() or name.startswith((".", "/", "~"))):
        raise ModelNotFoundError(_missing_model_message(name))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(
            source, local_files_only=True, dtype=torch_dtype
        )
    except OSError as err:
        raise ModelNotFoundError(_missing_model_message(name)) from err
    model.to(torch_device).eval()
    model_id = local.name if local.is_dir() else name
    return LoadedModel(model=model, tokenizer=tokenizer, model_id=model_id, device=torch_device, dtype=torch_dtype)
