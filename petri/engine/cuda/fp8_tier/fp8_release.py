"""The FP8 tier without its bf16 copies (issue 62): what lets it fit an 80 GB card.

The FP8 tier (:mod:`petri.engine.cuda.fp8_tier.fp8`) keeps the model's bf16 weights beside its e4m3 copies,
so that it can be switched off again and the prompt encoder, which shares the decoder's matrices,
runs in bf16. For the full-size architecture that is 47.0 GiB of bf16 and 23.5 GiB of FP8 copies:
more than an 80 GB H100 holds with a 12-sample workspace (:mod:`petri.engine.torch.tier_memory`).
:func:`release_bf16` frees the bf16 storage of every matrix the tier quantized (the decoder's
linears but the routers, its self-conditioning MLP, the experts; also each stacked group's weight,
:mod:`petri.engine.cuda.fused.stacked_projections`), leaving the LM head, which is the token embedding
the embedding lookup reads. The prompt encoder must then run in FP8 too (the tier's
``fp8_encoder``, ``+enc-fp8``), since its matrices are the decoder's. Released, the model cannot go
back to bf16 or be compiled again: :func:`petri.engine.cuda.fp8_tier.fp8.use_bf16` and the compiled tier refuse,
naming why (reload the model instead).

Each freed parameter keeps its name and dtype, its storage replaced by an empty tensor (shape (0,)).
"""

from __future__ import annotations

import torch

from petri.engine.base import TorchLoadedModel
from petri.engine.cuda.fp8_tier.fp8 import _experts_of, _forget_compiled_code, dense_targets, encoder_targets, is_fp8
from petri.engine.cuda.fused.stacked_projections import stacked_groups


def released_tensors(model) -> list[torch.Tensor]:
    """The parameters :func:`release_bf16` frees, each once: every FP8-quantized matrix's bf16
    weight but the LM head's (the token embedding), the stacked groups' weights and their members'."""
    tensors = [m.weight for _, m in dense_targets(model) + encoder_targets(model) if m is not model.lm_head]
    for group in stacked_groups(model):
        tensors += [group.stacked.weight, *(member.weight for member in group.members)]
    for _, experts in _experts_of(model, encoder=True):
        tensors += [experts.gate_up_proj, experts.down_proj]
    embedding = model.get_input_embeddings().weight
    return [t for t in {id(t): t for t in tensors}.values() if t is not embedding]


@torch.no_grad()
def release_bf16(lm: TorchLoadedModel) -> int:
    """Free the bf16 copies of what the FP8 tier quantized (module docstring); returns the bytes whose
    storage was released. ``ValueError`` naming the field where the tier is off or the prompt encoder
    would still read them (``fp8_encoder`` off)."""
    tier = lm.fast_tier
    if not is_fp8(lm):
        raise ValueError(f"precision: releasing the bf16 weights needs the FP8 tier on (precision is {tier.precision})")
    if not tier.fp8_encoder:
        raise ValueError("precision: releasing the bf16 weights needs +enc-fp8 (the prompt encoder reads the "
                         "decoder's matrices; in FP8 it reads their FP8 copies)")
    tier.released_fingerprint = lm.fingerprint()  # of the weights as loaded: a study's run id stays theirs
    storages: dict[int, int] = {}
    for tensor in released_tensors(lm.model):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        tensor.data = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    tier.released_bf16 = True
    tier.drop_sessions()
    if lm.device.type == "cuda":
        torch.cuda.empty_cache()
    return sum(storages.values())


def set_accumulation(lm: TorchLoadedModel, precision: str) -> None:
    """Between ``"fp8"`` and ``"fp8-fast"`` on a model in the FP8 tier, released or not: the same e4m3
    copies, only the scaled products' accumulation flag changes (no bf16 weights needed);
    ``ValueError`` naming ``precision`` for anything else."""
    if precision not in ("fp8", "fp8-fast") or not is_fp8(lm):
        raise ValueError(f"precision: set_accumulation switches between fp8 and fp8-fast in the FP8 tier, got "
                         f"{precision!r} on {lm.fast_tier.precision}")
    fast = precision == "fp8-fast"
    for module in lm.model.modules():
        if "_petri_fp8_fast" in vars(module):
            module._petri_fp8_fast = fast
    lm.fast_tier.precision = precision
    _forget_compiled_code(lm)
