"""What the GPU fast path (:mod:`petri.engine.fast_sampler`) runs with, per model: its options (the
exact tier's defaults, or those the compiled tier set, :mod:`petri.engine.compiled_tier`), and the
sessions (static buffers and captured CUDA graphs) it keeps per model and shape."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

#: model → {session key: session}; dropped when the model's layers change (compilation)
_SESSIONS: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class FastOptions:
    """graph: capture the step as CUDA graphs (CUDA only). fused: the Triton logits pass (else the
    chunked torch reference). fuse_softcap: read the lm head's output and apply the model's
    final-logit softcap inside the pass (else take the model's own float32 logits).
    Off by default, on in the compiled tier (:func:`petri.engine.compiled_tier.compile_regions`), as neither is bit-exact:
    softmax_self_conditioning: the pass also computes the decoder's softmax of the next
    self-conditioning logits (:mod:`petri.engine.fused_logits`) and the forward hands the decoder
    the soft embeddings (its float32 (S, L, V) softmax and casts are skipped; rare one-ulp
    differences where the sum rounds differently). inverse_cdf_draw: the token drawn by inverse
    CDF from one uniform per position instead of the race over S·L·V noise (same distribution;
    no (S·L, V) float32 noise buffer)."""

    graph: bool = True
    fused: bool = True
    fuse_softcap: bool = True
    softmax_self_conditioning: bool = False
    inverse_cdf_draw: bool = False


def default_options(lm) -> FastOptions:
    """The options set for ``lm``'s model (:func:`set_options`), else :class:`FastOptions`'s defaults."""
    return getattr(lm.model, "_petri_fast_options", FastOptions())


def set_options(lm, options: FastOptions | None) -> None:
    """``options`` for ``lm``'s model from now on (``None``: the defaults again); drops its sessions."""
    _SESSIONS.pop(lm.model, None)
    if options is None:
        vars(lm.model).pop("_petri_fast_options", None)
    else:
        lm.model._petri_fast_options = options
