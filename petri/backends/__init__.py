"""Device and dtype selection for the torch backend (CUDA, Apple MPS, CPU)."""

from petri.backends.torch_device import resolve_device, resolve_dtype

__all__ = ["resolve_device", "resolve_dtype"]
