"""Choosing the compute backend: PyTorch (CUDA, Apple MPS, CPU) or MLX (the Apple-silicon fallback).

Rules for ``select_backend("auto")``:

1. the environment variable ``PETRI_BACKEND`` (``torch`` / ``mlx``), when set, wins;
2. on Apple silicon (macOS, arm64) where PyTorch has no usable GPU (MPS unavailable) and ``mlx`` is
   importable: ``"mlx"``;
3. otherwise ``"torch"``.

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

BACKENDS = ("torch", "mlx")
ENV_VAR = "PETRI_BACKEND"
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


def select_backend(name: str | None = "auto") -> str:
    """``"torch"`` or ``"mlx"`` for a requested backend name (``"auto"``, ``"torch"``, ``"mlx"``)."""
    requested = (name or "auto").strip().lower()
    if requested == "auto":
        requested = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if requested == "auto":
        if is_apple_silicon() and not torch_gpu_available() and mlx_available():
            return "mlx"
        return "torch"
    if requested not in BACKENDS:
        raise BackendUnavailableError(f"backend={name!r} is not one of auto, {', '.join(BACKENDS)}")
    if requested == "mlx" and not mlx_available():
        raise BackendUnavailableError(f"backend='mlx' was asked for but mlx is not importable ({MLX_INSTALL_HINT})")
    return requested


def load_backend_model(
    name_or_path: str | os.PathLike | None = None,
    backend: str | None = "auto",
    device: str = "auto",
    dtype: str = "auto",
    allow_download: bool = False,
) -> SamplingModel:
    """Load a checkpoint on the selected backend: a :class:`petri.engine.torch_model.LoadedModel` (torch) or a
    :class:`petri.engine.mlx_sampler.MLXLoadedModel` (mlx; ``device`` is ignored: MLX runs on
    its default device, the GPU on Apple silicon). ``allow_download`` lets either loader fetch a hub
    id that is not in the local cache (off by default)."""
    if select_backend(backend) == "mlx":
        from petri.engine.mlx_sampler import load_mlx_model

        return load_mlx_model(name_or_path, dtype=dtype, allow_download=allow_download)
    from petri.engine.torch_model import load_model

    return load_model(name_or_path, device=device, dtype=dtype, allow_download=allow_download)
