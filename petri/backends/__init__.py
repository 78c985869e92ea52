"""Compute backends: device and dtype selection for torch (CUDA, Apple MPS, CPU), and the choice
between torch and the optional MLX backend (``select_backend``; MLX is imported only when used)."""

from petri.backends.select import select_backend
from petri.backends.torch_device import resolve_device, resolve_dtype

__all__ = ["resolve_device", "resolve_dtype", "select_backend"]
