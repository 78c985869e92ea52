"""Attention of the prompt encoder's sliding layers through the flash kernel told the layer's window
(issue 25; on by default in the compiled tier): ``aten._flash_attention_forward`` with ``is_causal``
and ``window_size_left = W − 1``, instead of SDPA with the band mask transformers builds.

Why: the encoder attends causally within a window of W = 1,024 keys (the full-size model's sliding
layers: 16 query heads over 8 key/value heads, head dim 256). Given the band as a mask tensor, SDPA
runs cuDNN's kernel over every (query, key) tile, the masked ones included; the flash kernel given
the window skips the tiles outside it and takes the key/value heads as they are (no copies per
query head). ``experiments/encoder_levers.py`` on an H200, one layer's attention alone in a CUDA
graph (``experiments/results/encoder_levers_h200.json``): 1,600 prompt tokens 244 → 99 µs, 200
tokens 27.6 → 16.5 µs, the same largest difference from float32 attention.

Where it applies: a call that encodes one prompt into an empty cache: one sequence, as many keys
as queries, causal (its ``is_causal``, else the module's), the layer's ``sliding_window`` given,
no dropout and no weights asked for, on CUDA in bf16 or fp16 with a head dim of at most 256
divisible by 8. That is every call of petri's prompt encoder
(:func:`petri.engine.torch.step.encoder_inputs`: one unpadded prompt, a fresh cache), and there
transformers' sliding mask over an all-ones attention mask is exactly "query i sees key j when
i − W < j ≤ i", which the kernel computes from the window, so the mask tensor is not read. The
function is installed on the encoder's sliding layers only (:func:`use_encoder_window`, by the
compiled tier, undone by :func:`petri.engine.cuda.attention.split_attention.drop_split_attention`); every other
call goes to transformers' ``sdpa_attention_forward`` with its mask.

The arithmetic is the flash kernel's (float32 scores and running softmax, bf16 weights into the
second product); within bf16 rounding of SDPA's (GPU test, and a hand-worked case at the window's
edge).

Shapes: query (1, H, P, D), key and value (1, Hkv, P, D) with H a multiple of Hkv; transformers'
attention functions return (1, P, H, D).
"""

from __future__ import annotations

import torch

from petri.engine.cuda.attention.sliding_attention import flash_kernel_takes
from petri.engine.cuda.attention.split_attention import WIDEST_FAST_HEAD, attend_or_sdpa, give_attention_function

#: the function's name in transformers' ``AttentionInterface``
NAME = "petri_encoder_window"


def window_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
                     window: int) -> torch.Tensor:
    """Causal attention of each query over itself and the ``window − 1`` keys before it, by
    PyTorch's flash kernel (CUDA): query (B, H, P, D), key and value (B, Hkv, P, D) → (B, H, P, D)
    (a view of the kernel's contiguous (B, P, H, D) output)."""
    length = query.shape[2]
    return torch.ops.aten._flash_attention_forward(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), None, None, length, length, 0.0, True,
        False, scale=scale, window_size_left=window - 1, window_size_right=0)[0].transpose(1, 2)


def window_call_fits(query: torch.Tensor, key: torch.Tensor, causal: bool, window, dropout: float) -> bool:
    """Whether :func:`window_attention` computes this call (module docstring), the device aside: one
    sequence, keys as many as queries, causal, a window, no dropout, bf16 or fp16, a head dim of at
    most 256 divisible by 8 and query heads a multiple of the key/value heads."""
    return (query.shape[0] == 1 and key.shape[2] == query.shape[2] and causal and window is not None and window > 0
            and not dropout and flash_kernel_takes(query) and query.shape[1] % key.shape[1] == 0)


def _window_fits(query, key, attention_mask, causal, dropout, kwargs) -> bool:
    """:func:`window_call_fits` as :func:`petri.engine.cuda.attention.split_attention.attend_or_sdpa`'s ``fits``: the
    window is the layer's ``sliding_window``, the mask is not read (module docstring)."""
    return window_call_fits(query, key, causal, kwargs.get("sliding_window"), dropout)


def petri_encoder_window(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs):
    """transformers' attention-function signature: :func:`window_attention` over the layer's
    ``sliding_window`` where the call fits (:func:`window_call_fits`, on CUDA, no weights asked for),
    else ``sdpa_attention_forward`` with the same arguments (:func:`petri.engine.cuda.attention.split_attention.attend_or_sdpa`)."""
    def compute(query, key, value, scale):
        return window_attention(query, key, value, scale, int(kwargs["sliding_window"]))

    return attend_or_sdpa(compute, _window_fits, module, query, key, value, attention_mask, dropout, scaling,
                          is_causal, kwargs)


def use_encoder_window(layers) -> int:
    """Give the attention of every sliding layer of ``layers`` (the prompt encoder's: a
    ``sliding_window`` and a head dim of at most 256) that runs SDPA one shared copy of its config
    naming :data:`NAME`; returns how many."""
    return give_attention_function(
        layers, NAME, petri_encoder_window,
        lambda attention: getattr(attention, "sliding_window", None) is not None
        and 0 < getattr(attention, "head_dim", 0) <= WIDEST_FAST_HEAD)
