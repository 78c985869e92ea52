"""Attention of the decoder's global layers (issue 25; on by default in the compiled tier): each
key/value head's group of query heads folded into one query sequence, then attended by one of two
methods (:data:`METHODS`):

- ``"products"`` (the default since 2026-12-03): two batched products around a float32 softmax,
  scores = q kᵀ in float32 (``torch.bmm``'s ``out_dtype`` on CUDA), weights = softmax(s·scores) cast
  to the inputs' dtype, out = weights v (:func:`products_attention`). The scores are materialised
  (B·Hkv × G·Lq × Lk float32: 30 MB at one sample with a 1,600-token prompt, 90 MB at twelve with
  200), which at these shapes costs less than any fused kernel PyTorch has for head dim 512:
  ``experiments/attention_check.py`` on an H200, compiled, 52 µs a layer at one sample against 116
  for the chunks, 133 against 378 at twelve (``experiments/results/attention_check_h200.json``).
  Calls whose scores would pass :data:`MAX_SCORES_BYTES` take the chunks instead.
- ``"chunks"``: the keys split into chunks attended as separate batch entries by PyTorch's
  memory-efficient kernel, then combined by their log-sum-exp (flash-decoding's split;
  :func:`split_attention`).

Why: the full-size model's five global layers have head dim 512, which neither PyTorch 2.11's flash
nor its cuDNN kernel takes, so SDPA runs the sm80 memory-efficient kernel. At one sample (256 canvas
queries × 16 heads against 1,856 keys) its 32-query tiles make one wave on an H200 and each walks
every key: 0.19 ms a call, about 80 TFLOP/s. Before it, transformers copies each key/value head
for the eight query heads that share it (``repeat_kv``; 59 µs a call in the compiled profile,
``experiments/results/bench_h200_shapes_b1_b12_small_batch.json``). Folding the group into the
query sequence needs no copy of the keys, and C chunks give the kernel C times as many tiles.

The computation, per key/value head and chunk c: out_c = softmax(s·q k_cᵀ) v_c and
lse_c = log Σ exp(s·q k_cᵀ) (PyTorch's memory-efficient kernel with its log-sum-exp on CUDA,
:func:`attend_reference` elsewhere); then out = Σ_c exp(lse_c − lse) out_c with lse = log Σ_c exp(lse_c),
in float32, cast to the inputs' dtype. Exact in real arithmetic; the chunk outputs are rounded to
the inputs' dtype before the combine, one rounding more than the unsplit kernel.

The products' arithmetic: each score is a float32 sum of bf16 products (cuBLAS's order), the
softmax float32, the weights rounded to bf16 before the second product (a flash kernel rounds its
unnormalised weights the same way); within bf16 rounding of the kernels' results (GPU test).

Where it applies: no mask, not causal, no dropout, CUDA, head dim over 256 (the layers SDPA sends to
the memory-efficient kernel); every other call goes to transformers' own ``sdpa_attention_forward``.
It is installed by giving the global layers' attention modules one copy of the text config that
names the method's attention function (:data:`NAMES`, registered with transformers'
``AttentionInterface``, its documented way to add an attention function), so the masks and the
other layers stay as they were (:func:`use_split_attention`, undone by :func:`drop_split_attention`).

Shapes: query (B, H, Lq, D), key and value (B, Hkv, Lk, D) with H = Hkv·G; transformers' attention
functions return (B, Lq, H, D).
"""

from __future__ import annotations

import copy
from typing import Any, cast

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import AttentionInterface

#: the chunks' attention implementation's name in transformers' ``AttentionInterface``
NAME = "petri_split_sdpa"
#: the products' name there
PRODUCTS_NAME = "petri_products_attention"
#: method → its attention function's name
NAMES = {"products": PRODUCTS_NAME, "chunks": NAME}
METHODS = tuple(NAMES)
#: head dims above this go to the memory-efficient kernel (flash and cuDNN take up to 256)
WIDEST_FAST_HEAD = 256
#: the largest float32 score tensor the products method makes (1 GiB); a larger call takes the chunks
MAX_SCORES_BYTES = 2**30


def chunks_for(batch: int, keys: int) -> int:
    """C: 1 from 4 samples on (the kernel has tiles enough), else the largest of 4, 3 and 2 that
    divides the key count (chunks of one length need no mask), else 1."""
    if batch >= 4:
        return 1
    return next((c for c in (4, 3, 2) if keys % c == 0), 1)


def attend_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """(N, Hkv, M, D) queries, (N, Hkv, K, D) keys and values → out (N, Hkv, M, D) in q's dtype and
    lse (N, Hkv, M), by explicit ops in float32 (float64 for float64 inputs; any device)."""
    wide = torch.promote_types(q.dtype, torch.float32)
    logits = torch.einsum("nhmd,nhkd->nhmk", q.to(wide), k.to(wide)) * scale
    out = torch.einsum("nhmk,nhkd->nhmd", torch.softmax(logits, dim=-1), v.to(wide))
    return out.to(q.dtype), torch.logsumexp(logits, dim=-1)


def attend_efficient(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """:func:`attend_reference` by PyTorch's memory-efficient kernel (CUDA), which pads its
    log-sum-exp along the queries."""
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False, scale=scale)[:2]
    return out, lse[..., : q.shape[2]]


def split_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float, chunks: int,
                    attend=attend_efficient) -> torch.Tensor:
    """Module docstring: (B, H, Lq, D), (B, Hkv, Lk, D) twice → (B, H, Lq, D). Query head h uses
    key/value head h // G (transformers' ``repeat_kv`` order); ``chunks`` must divide Lk."""
    batch, heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    group = heads // kv_heads
    if keys % chunks:
        raise ValueError(f"{chunks} chunks do not divide {keys} keys")
    folded = query.reshape(batch, kv_heads, group * length, dim)
    if chunks == 1:
        out, _ = attend(folded, key, value, scale)
        return out.reshape(batch, heads, length, dim)
    size = keys // chunks

    def split(t: torch.Tensor) -> torch.Tensor:  # (B, Hkv, Lk, D) → (B·C, Hkv, Lk / C, D)
        return t.reshape(batch, kv_heads, chunks, size, dim).transpose(1, 2).reshape(batch * chunks, kv_heads, size, dim)

    queries = folded.unsqueeze(1).expand(batch, chunks, kv_heads, group * length, dim)
    out, lse = attend(queries.reshape(batch * chunks, kv_heads, group * length, dim), split(key), split(value), scale)
    wide = torch.promote_types(query.dtype, torch.float32)  # float32 for bf16 inputs
    weights = torch.softmax(lse.view(batch, chunks, kv_heads, group * length).to(wide), dim=1)
    combined = (out.view(batch, chunks, kv_heads, group * length, dim).to(wide) * weights.unsqueeze(-1)).sum(dim=1)
    return combined.to(query.dtype).reshape(batch, heads, length, dim)


def products_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """The products method (module docstring): (B, H, Lq, D), (B, Hkv, Lk, D) twice → (B, H, Lq, D),
    query head h using key/value head h // G. Scores in float32: from bf16 or fp16 CUDA inputs by
    ``torch.bmm(..., out_dtype=torch.float32)``, otherwise from the inputs cast to float32 (float64 stays
    float64)."""
    batch, heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    folded = query.reshape(batch * kv_heads, heads // kv_heads * length, dim)
    keys_t = key.reshape(batch * kv_heads, keys, dim).transpose(1, 2)
    if query.is_cuda and query.dtype in (torch.bfloat16, torch.float16):
        scores = torch.bmm(folded, keys_t, out_dtype=torch.float32)
    else:
        wide = torch.promote_types(query.dtype, torch.float32)
        scores = torch.bmm(folded.to(wide), keys_t.to(wide))
    weights = torch.softmax(scores * scale, dim=-1).to(value.dtype)
    return torch.bmm(weights, value.reshape(batch * kv_heads, keys, dim)).reshape(batch, heads, length, dim)


def scores_bytes(query: torch.Tensor, key: torch.Tensor) -> int:
    """The bytes of the products method's float32 scores for these inputs: B·H·Lq·Lk·4."""
    return query.shape[0] * query.shape[1] * query.shape[2] * key.shape[2] * 4


def method_for(method: str, query: torch.Tensor, key: torch.Tensor) -> str:
    """The method a call runs: ``method``, except ``"chunks"`` for a products call whose scores would
    pass :data:`MAX_SCORES_BYTES` (the chunks' kernel makes no score tensor)."""
    return "chunks" if method == "products" and scores_bytes(query, key) > MAX_SCORES_BYTES else method


def attend_or_sdpa(compute, fits, module, query, key, value, attention_mask, dropout: float, scaling, is_causal,
                   kwargs: dict):
    """The body of petri's attention functions (transformers' signature): where the call is on CUDA,
    asks for no weights and ``fits(query, key, attention_mask, causal, dropout, kwargs)`` holds
    (``causal``: its ``is_causal``, else the module's), ``compute(query, key, value, scale)`` →
    (B, H, Lq, D), returned as (B, Lq, H, D) contiguous with no weights; every other call goes to
    transformers' ``sdpa_attention_forward`` with the same arguments."""
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    if fits(query, key, attention_mask, causal, dropout, kwargs) and query.is_cuda and not kwargs.get("output_attentions"):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return compute(query, key, value, scale).transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def unmasked(takes):
    """The ``fits`` of :func:`attend_or_sdpa` for the decoder's functions: no mask, not causal (a
    causal call of one query is not), no dropout, query heads a multiple of the key/value heads, and
    ``takes(query)``."""
    def fits(query, key, attention_mask, causal, dropout, kwargs) -> bool:
        return (attention_mask is None and not (causal and query.shape[2] > 1) and not dropout
                and query.shape[1] % key.shape[1] == 0 and takes(query))
    return fits


def _global_attention(method: str, module, query, key, value, attention_mask, dropout: float, scaling, is_causal,
                      **kwargs):
    """``method``'s attention where it applies (module docstring), else ``sdpa_attention_forward``."""
    def compute(query, key, value, scale):
        if method_for(method, query, key) == "products":
            return products_attention(query, key, value, scale)
        return split_attention(query, key, value, scale, chunks_for(query.shape[0], key.shape[2]))

    return attend_or_sdpa(compute, unmasked(lambda query: query.shape[-1] > WIDEST_FAST_HEAD), module, query, key,
                          value, attention_mask, dropout, scaling, is_causal, kwargs)


def petri_split_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs):
    """transformers' attention-function signature: the chunks method (:func:`split_attention`) where
    it applies (module docstring), else ``sdpa_attention_forward`` with the same arguments."""
    return _global_attention("chunks", module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)


def petri_products_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                             scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """As :func:`petri_split_sdpa` with the products method (:func:`products_attention`)."""
    return _global_attention("products", module, query, key, value, attention_mask, dropout, scaling, is_causal,
                             **kwargs)


FUNCTIONS = {NAME: petri_split_sdpa, PRODUCTS_NAME: petri_products_attention}


def check_method(method: str) -> str:
    """``method`` if it is one of :data:`METHODS`; else ``ValueError`` naming it and the methods."""
    if method not in NAMES:
        raise ValueError(f"global attention method must be one of {', '.join(METHODS)}, got {method!r}")
    return method


def use_split_attention(layers, widest_fast_head: int = WIDEST_FAST_HEAD, method: str = "products") -> int:
    """Give the attention of every layer of ``layers`` whose head dim is over ``widest_fast_head``
    and that runs SDPA one shared copy of its config naming ``method``'s function (:data:`NAMES`);
    returns how many. ``ValueError`` names an unknown method."""
    name = NAMES[check_method(method)]
    return give_attention_function(layers, name, FUNCTIONS[name],
                                   lambda attention: getattr(attention, "head_dim", 0) > widest_fast_head)


def give_attention_function(layers, name: str, function, takes) -> int:
    """Register ``function`` as ``name`` with transformers' ``AttentionInterface`` and give every
    layer's attention that runs SDPA, has no petri function yet and for which ``takes(attention)``
    holds one shared copy of its config naming it; returns how many (undone by
    :func:`drop_split_attention`)."""
    AttentionInterface.register(name, function)
    shared = None
    changed = 0
    for layer in layers:
        attention = getattr(layer, "self_attn", None)
        config = getattr(attention, "config", None)
        if attention is None or not takes(attention):
            continue
        if getattr(config, "_attn_implementation", None) != "sdpa" or "_petri_config" in vars(attention):
            continue
        if shared is None:
            shared = copy.copy(cast(Any, config))  # the attention's config: present where it takes the split
            shared._attn_implementation = name
        attention._petri_config, attention.config = config, shared
        changed += 1
    return changed


def drop_split_attention(layers) -> None:
    """Undo :func:`give_attention_function` (:func:`use_split_attention`,
    :func:`petri.engine.cuda.attention.sliding_attention.use_flash_sliding`,
    :func:`petri.engine.cuda.attention.encoder_attention.use_encoder_window`): each attention's own config again."""
    for layer in layers:
        attention = getattr(layer, "self_attn", None)
        if attention is not None and "_petri_config" in vars(attention):
            attention.config = vars(attention).pop("_petri_config")
