"""Pick the torch device and dtype a model runs on.

Rules: ``device="auto"`` prefers CUDA, then Apple MPS, then the CPU. ``dtype="auto"`` is bfloat16
on CUDA, float16 on MPS (PyTorch's MPS backend supports bf16 only on recent macOS versions, fp16
everywhere), float32 on the CPU (bf16 matmuls on a laptop CPU are slow and less exact).
"""

from __future__ import annotations

import torch

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` → cuda, mps or cpu (first available); anything else is checked and returned."""
    if isinstance(device, torch.device):
        return device
    name = device.strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: CUDA is not available in this PyTorch build or machine")
    if name == "mps" and not mps_available():
        raise ValueError(f"device={device!r}: Apple MPS is not available on this machine")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device={device!r} is not a torch device ({err})") from None


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"`` → bf16 on CUDA, fp16 on MPS, fp32 on CPU; names like ``"bf16"`` are accepted."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtype.strip().lower()
    if name == "auto":
        return {"cuda": torch.bfloat16, "mps": torch.float16}.get(device.type, torch.float32)
    if name not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of auto, {', '.join(sorted(_DTYPES))}")
    return _DTYPES[name]


def set_cpu_threads(threads: int) -> None:
    """Use ``threads`` CPU threads for torch's intra-op work (numbers on the CPU can depend on it)."""
    torch.set_num_threads(int(threads))
