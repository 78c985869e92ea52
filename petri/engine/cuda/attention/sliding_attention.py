"""Attention of the decoder's sliding layers at one sample through FlashAttention-2 (issue 25; on
by default in the compiled tier): each key/value head's group of query heads folded into one query
sequence (as :mod:`petri.engine.cuda.attention.split_attention` folds the global layers'), then PyTorch's flash
kernel (``aten._scaled_dot_product_flash_attention``).

Why: for the full-size model's sliding layers (head dim 256, 16 query heads over 8 key/value heads,
256 canvas queries against the 1,023 kept prompt positions and the canvas) SDPA picks cuDNN's
kernel, whose 64-query tiles make 64 programs at one sample on an H200's 132 multiprocessors, each
walking all 1,279 keys; the flash kernel splits the keys when its programs are few (its
``splitkv`` form) and takes 32.5 µs a layer against SDPA's 35.5 (``experiments/attention_check.py``,
``experiments/results/attention_check_h200.json``, a 1,600-token prompt). From two samples on
SDPA's choice is the faster (37.0 against 52.1 µs at two, 38.9 / 92.5 at three, 40.3 / 73.2 at
four, 55.8 / 94.6 at twelve with a 200-token prompt), so calls of :data:`FLASH_BELOW_SAMPLES`
samples or more keep SDPA: the lever is for one sample.

The arithmetic is the flash kernel's: float32 scores and running softmax, bf16 weights into the
second product; within bf16 rounding of SDPA's result (GPU test).

Where it applies: what :func:`petri.engine.cuda.attention.split_attention.attend_or_sdpa` computes with
:func:`petri.engine.cuda.attention.split_attention.unmasked` (CUDA, no mask, not causal, no dropout), bf16 or
fp16, a head dim of at most 256 divisible by 8, fewer than :data:`FLASH_BELOW_SAMPLES` samples;
every other call goes to transformers' own
``sdpa_attention_forward``. Installed on the layers whose head dim is at most 256 by a shared config
copy naming :data:`NAME` (:func:`use_flash_sliding`), undone by
:func:`petri.engine.cuda.attention.split_attention.drop_split_attention`.

Shapes: query (B, H, Lq, D), key and value (B, Hkv, Lk, D) with H = Hkv·G; transformers' attention
functions return (B, Lq, H, D).
"""

from __future__ import annotations

import torch

from petri.engine.cuda.attention.split_attention import WIDEST_FAST_HEAD, attend_or_sdpa, give_attention_function, split_attention, unmasked

#: the function's name in transformers' ``AttentionInterface``
NAME = "petri_flash_sliding"
#: calls of this many samples or more keep SDPA (cuDNN's kernel, faster from two samples on an H200)
FLASH_BELOW_SAMPLES = 2


def attend_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """(N, Hkv, M, D) queries, (N, Hkv, K, D) keys and values → out (N, Hkv, M, D) and the
    log-sum-exp (N, Hkv, M) by PyTorch's flash kernel (CUDA, bf16 or fp16, D ≤ 256)."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)[:2]
    return out, lse


def flash_kernel_takes(query: torch.Tensor) -> bool:
    """Whether PyTorch's flash kernel takes queries like ``query`` (B, H, Lq, D): bf16 or fp16, D ≤ 256
    and divisible by 8."""
    dim = query.shape[-1]
    return query.dtype in (torch.bfloat16, torch.float16) and dim <= WIDEST_FAST_HEAD and dim % 8 == 0


def flash_takes(query: torch.Tensor) -> bool:
    """Whether this lever sends the call's query (B, H, Lq, D) to the flash kernel: the kernel takes it
    (:func:`flash_kernel_takes`) and B is below :data:`FLASH_BELOW_SAMPLES`."""
    return flash_kernel_takes(query) and query.shape[0] < FLASH_BELOW_SAMPLES


def _folded_flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """(B, H, Lq, D), (B, Hkv, Lk, D) twice → (B, H, Lq, D): the query heads folded, one flash call."""
    return split_attention(query, key, value, scale, 1, attend=attend_flash)


def petri_flash_sliding(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                        is_causal: bool | None = None, **kwargs):
    """transformers' attention-function signature: the folded flash attention where it applies
    (module docstring), else ``sdpa_attention_forward`` with the same arguments."""
    return attend_or_sdpa(_folded_flash, unmasked(flash_takes), module, query, key, value, attention_mask, dropout,
                          scaling, is_causal, kwargs)


def use_flash_sliding(layers, widest_head: int = WIDEST_FAST_HEAD) -> int:
    """Give the attention of every layer of ``layers`` whose head dim is at most ``widest_head`` and
    that runs SDPA one shared copy of its config naming :data:`NAME`; returns how many."""
    return give_attention_function(layers, NAME, petri_flash_sliding,
                                   lambda attention: 0 < getattr(attention, "head_dim", 0) <= widest_head)
