"""Building a DiffusionGemma with random weights straight on its device, through the meta device.

A normal build (``DiffusionGemmaForBlockDiffusion(config)`` under ``torch.device("cuda")``) allocates
each block's parameters and initialises them as it goes, and its transient buffers pushed the
full-size architecture (25.25 B parameters, 47.0 GiB in bf16) past an 80 GB H100 while it was being
built (issue 62: out of memory inside ``DiffusionGemmaTextExperts.__init__`` at 78.9 GiB); building on
the CPU and moving took over 560 s on 16 cores (random initialisation of 25 B values). Here the model
is built on the meta device (shapes only, no storage), materialised once on ``device``
(:func:`materialise`: one uninitialised allocation per distinct tensor, shared weights kept shared) and initialised there by transformers'
own ``init_weights`` (so on a GPU the random draws run on the GPU).

``to_empty`` leaves the buffers uninitialised too; ``init_weights`` recomputes the rotary
``inv_freq`` and the embeddings' ``embed_scale`` but (transformers 5.17-5.24) not every layer's
``layer_scalar``, which a normal build sets to 1.0: :func:`restore_buffers` sets them. Tied
parameters (the LM head and the token embedding) stay one tensor.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion


def build_random_on_device(config: DiffusionGemmaConfig, device: torch.device | str,
                           dtype: torch.dtype = torch.bfloat16) -> DiffusionGemmaForBlockDiffusion:
    """A randomly initialised ``DiffusionGemmaForBlockDiffusion(config)`` in ``dtype`` on ``device``
    (eval mode), with at most one copy of each weight ever allocated there: built on the meta device,
    then ``to_empty(device)`` and initialised in place. Same parameter names, shapes, dtypes and
    buffers as a normal build under ``torch.device(device)`` with ``dtype`` as the default dtype
    (``tests/engine/test_meta_build.py``); the random values come from ``device``'s generator."""
    device = torch.device(device)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = DiffusionGemmaForBlockDiffusion(config)
    finally:
        torch.set_default_dtype(previous)
    materialise(model, device)
    with torch.no_grad(), torch.device(device):
        model.init_weights()
        restore_buffers(model)
    return model.eval()


def materialise(model: torch.nn.Module, device: torch.device) -> None:
    """Give every meta parameter and buffer of ``model`` uninitialised storage on ``device``, one
    allocation per distinct tensor: a parameter that several modules share (DiffusionGemma's decoder
    reuses the encoder's weights) stays one tensor. ``Module.to_empty`` allocates it once per module
    that holds it: on an 80 GB H100 the full-size architecture ran out of memory at 78.5 GiB that way."""
    fresh: dict[int, Any] = {}  # parameters and buffers
    for module in model.modules():
        for table, make in ((module._parameters, _empty_parameter), (module._buffers, _empty_buffer)):
            for name, tensor in list(table.items()):
                if tensor is not None:
                    if id(tensor) not in fresh:
                        fresh[id(tensor)] = make(tensor, device)
                    table[name] = fresh[id(tensor)]


def _empty_parameter(p: torch.Tensor, device: torch.device) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.empty_like(p, device=device), requires_grad=p.requires_grad)


def _empty_buffer(b: torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.empty_like(b, device=device)


def restore_buffers(model: torch.nn.Module) -> None:
    """Set each decoder and encoder layer's ``layer_scalar`` buffer (shape (1,)) to 1.0, the value
    a normal build gives it and ``init_weights`` does not restore after ``to_empty``."""
    for module in model.modules():
        scalar = getattr(module, "layer_scalar", None)
        if isinstance(scalar, torch.Tensor):
            scalar.fill_(1.0)
