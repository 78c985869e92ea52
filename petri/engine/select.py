"""Choosing the compute backend: PyTorch (CUDA, Apple MPS, CPU) or MLX (the Apple-silicon fallback).

Rules for ``select_backend("auto")``:

1. a backend named (``torch`` / ``mlx``) wins; the command line's ``--backend`` defaults to
   ``PETRI_BACKEND`` (:class:`petri.core.config.PetriConfig`, read by the entry points);
2. on Apple silicon (macOS, arm64) where PyTorch has no usable GPU (MPS unavailable) and ``mlx`` is
   importable: ``"mlx"``;
3. otherwise ``"torch"``.

:func:`load_backend_model` runs a checkpoint of a family MLX does not run (its registration's
``backends``: masked diffusion, ``petri-tiny-mdm``) on torch even where rule 2 picks MLX, whose
backend runs DiffusionGemma only; asking for ``mlx`` by name for one is
refused, naming the backend.

``select_backend("mlx")`` insists on MLX and raises :class:`BackendUnavailableError` with the
install command when it cannot be imported. MLX is optional: nothing here imports it (or torch)
at module import time, so ``petri`` imports fine without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import sys

from petri.engine.base import BackendUnavailableError, SamplingModel
from petri.engine.families.registry import UNIFORM, Family, families, family_for_model_type

BACKENDS = ("torch", "mlx")
MLX_INSTALL_HINT = 'pip install "mlx[cpu]" on Linux, pip install mlx on macOS (Apple silicon)'


def is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def mlx_available() -> bool:
    """True when ``mlx.core`` imports (checked lazily; the import is cached by Python)."""
    if importlib.util.find_spec("mlx") is None:
        return False
    try:
        importlib.import_module("mlx.core")
    except Exception:  # noqa: BLE001 - a broken install counts as unavailable
        return False
    return True


def torch_gpu_available() -> bool:
    """True when PyTorch sees CUDA or Apple MPS."""
    try:
        import torch
    except ImportError:
        return False
    if torch.cuda.is_available():
        return True
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def requested_backend(name: str | None = "auto") -> str:
    """The backend asked for: ``name`` in lower case (``"auto"`` when it names none)."""
    return (name or "auto").strip().lower() or "auto"


def select_backend(name: str | None = "auto") -> str:
    """``"torch"`` or ``"mlx"`` for a requested backend name (``"auto"``, ``"torch"``, ``"mlx"``)."""
    requested = requested_backend(name)
    if requested == "auto":
        if is_apple_silicon() and not torch_gpu_available() and mlx_available():
            return "mlx"
        return "torch"
    if requested not in BACKENDS:
        raise BackendUnavailableError(f"backend={name!r} is not one of auto, {', '.join(BACKENDS)}")
    if requested == "mlx" and not mlx_available():
        raise BackendUnavailableError(f"backend='mlx' was asked for but mlx is not importable ({MLX_INSTALL_HINT})")
    return requested


def default_model_name() -> str:
    """The model a run without a model argument loads: the real DiffusionGemma when a GPU and its
    cached weights are present, else the embedded model (:func:`petri.engine.torch.model.default_model_name`)."""
    from petri.engine.torch.model import default_model_name as torch_default

    return torch_default()


def checkpoint_family(name_or_path: str | os.PathLike | None) -> Family:
    """The family that loads the named checkpoint (an embedded model's name, a folder or a cached hub
    id), by its ``config.json``'s ``model_type``; ``None`` (the default model) is DiffusionGemma."""
    from petri.core.paths import checkpoint_source
    from petri.engine.checkpoints import model_type_of

    if name_or_path is None:
        return UNIFORM
    return family_for_model_type(model_type_of(checkpoint_source(str(name_or_path))))


def planned_tier(name_or_path, device: str, dtype: str, compile: bool | None, precision: str):
    """Issue 62: on CUDA, the tier a DiffusionGemma checkpoint loads in
    (:func:`petri.engine.torch.tier_memory.plan_cuda_tier`: one that fits the card, or a refusal naming
    the one that does); ``None`` elsewhere and for other families."""
    from petri.engine.torch.device import resolve_device

    if resolve_device(device).type != "cuda" or checkpoint_family(name_or_path) != UNIFORM:
        return None
    from petri.engine.torch.tier_memory import plan_cuda_tier

    return plan_cuda_tier(name_or_path, device, dtype, compile, precision)


def load_backend_model(
    name_or_path: str | os.PathLike | None = None,
    backend: str | None = "auto",
    device: str = "auto",
    dtype: str = "auto",
    allow_download: bool = False,
    compile: bool | None = False,
    trust_remote_code: bool = False,
    precision: str = "bf16",
) -> SamplingModel:
    """Load a checkpoint on the selected backend: a :class:`petri.engine.torch.model.LoadedModel` (torch) or a
    :class:`petri.engine.mlx.sampler.MLXLoadedModel` (mlx; ``device`` is ignored: MLX runs on
    its default device, the GPU on Apple silicon). ``allow_download`` lets either loader fetch a hub
    id that is not in the local cache (off by default). ``compile``: the torch backend's compiled
    tier (:func:`petri.engine.torch.model.compile_for_sampling`): ``True`` on, ``False`` off,
    ``None`` where it is the default (CUDA with Triton); the tier is chosen here, at load.
    ``trust_remote_code``: a masked-diffusion checkpoint's own code may run (LLaDA, Dream).
    ``precision``: ``"fp8"`` / ``"fp8-fast"`` is the opt-in FP8 tier, with its opt-in levers after it
    (``"fp8-fast+sc-fp8"``, :mod:`petri.engine.precision_choice`; refused, naming why, where it cannot run).
    On CUDA a DiffusionGemma's tier is planned before it loads
    (:func:`petri.engine.torch.tier_memory.plan_cuda_tier`): ``compile=None`` takes the compiled tier where
    it fits the card, else the exact one; an FP8 tier that fits only without its bf16 copies runs so
    (``+enc-fp8``, :mod:`petri.engine.cuda.fp8_tier.fp8_release`); a tier that does not fit is refused
    (:class:`petri.engine.torch.tier_memory.TierMemoryError`, naming the tier that fits)."""
    from petri.engine.precision_choice import PrecisionChoice, parse_precision

    choice = parse_precision(precision)  # before anything loads: a typo costs no model load
    chosen = select_backend(backend)
    if compile and chosen != "torch":
        raise ValueError("--compile applies to the torch backend only")
    if choice.fp8_self_conditioning and compile is False:
        raise ValueError(f"precision {choice.text!r}: +sc-fp8 runs in the compiled tier only, and compile is off")
    if choice.precision != "bf16" and chosen != "torch":
        raise ValueError(f"precision={precision!r}: the FP8 tier applies to the torch backend only")
    family = checkpoint_family(name_or_path) if chosen == "mlx" else None
    if family is not None and "mlx" not in family.backends:
        if requested_backend(backend) == "mlx":
            runs = ", ".join(f.id for f in families() if "mlx" in f.backends)
            raise BackendUnavailableError(f"backend='mlx' runs {runs} checkpoints only; {name_or_path!r} is a "
                                          f"{family.id} model: use --backend torch (or auto)")
        chosen = "torch"  # auto: a family MLX does not run (masked diffusion) runs on torch (MPS or CPU)
    if chosen == "mlx":
        from petri.engine.mlx.sampler import load_mlx_model

        return load_mlx_model(name_or_path, dtype=dtype, allow_download=allow_download)
    from petri.engine.torch.model import compile_for_sampling, compiles_by_default, load_model

    tier = planned_tier(name_or_path, device, dtype, compile, choice.text)
    if tier is not None:
        compile, choice = tier.compiled, parse_precision(tier.precision_text)
    lm = load_model(name_or_path, device=device, dtype=dtype, allow_download=allow_download,
                    trust_remote_code=trust_remote_code)
    if lm.family != UNIFORM.id:  # the compiled and FP8 tiers are DiffusionGemma's
        if compile or choice != PrecisionChoice():
            raise ValueError(f"--compile and --precision apply to DiffusionGemma only; {lm.model_id!r} is {lm.family}")
        return lm
    if compile or (compile is None and compiles_by_default(lm)):
        compile_for_sampling(lm)
    if choice != PrecisionChoice():
        from petri.engine.cuda.fp8_tier.fp8 import set_precision_choice

        set_precision_choice(lm, choice)
    if tier is not None and tier.released:
        from petri.engine.cuda.fp8_tier.fp8_release import release_bf16

        release_bf16(lm)
    return lm
