"""A full-size attention call for the GPU tests of petri's attention functions
(``petri.engine.cuda.attention.split_attention``, ``petri.engine.cuda.attention.sliding_attention``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def check_against_sdpa(function, batch: int, kv_heads: int, keys: int, dim: int):
    """Call ``function`` (transformers' attention-function signature) on bf16 CUDA inputs of a
    full-size layer: 16 query heads over ``kv_heads``, 256 canvas queries against ``keys`` keys of
    head dim ``dim``, no mask, scale 1 (transformers' DiffusionGemma attention); assert its (B, 256,
    16, D) output is within 1 % relative Frobenius error of PyTorch's SDPA. Returns the output, the
    module stand-in and the inputs (query (B, 16, 256, D) contiguous, key and value (B, Hkv, Lk, D))."""
    torch.manual_seed(batch)
    query = (torch.randn(batch, 256, 16, dim, device="cuda") * 0.1).bfloat16().transpose(1, 2).contiguous()
    key = (torch.randn(batch, kv_heads, keys, dim, device="cuda") * 0.1).bfloat16()
    value = torch.randn(batch, kv_heads, keys, dim, device="cuda").bfloat16()

    class Attention(torch.nn.Module):
        num_key_value_groups, is_causal = 16 // kv_heads, False

    module = Attention()
    got, _ = function(module, query, key, value, None, scaling=1.0)
    want = F.scaled_dot_product_attention(query, key, value, scale=1.0, enable_gqa=True).transpose(1, 2)
    assert got.shape == want.shape == (batch, 256, 16, dim)
    error = (got.float() - want.float()).norm() / want.float().norm()
    assert float(error) < 1e-2, float(error)
    return got, module, (query, key, value)


def tiny_decoder(num_layers: int, seed: int, prompt_length: int):
    """A tiny random model (``petri.engine.torch.tiny``, CPU, 16 canvas positions), its decoder layers and
    random prompt ids (1, prompt_length) and canvas ids (1, 16)."""
    from petri.engine.torch.tiny import tiny_random_model

    lm = tiny_random_model(canvas_length=16, num_layers=num_layers, seed=seed)
    ids = torch.randint(3, lm.vocab_size, (1, prompt_length))
    canvas = torch.randint(3, lm.vocab_size, (1, 16))
    return lm.model, lm.model.model.decoder.layers, ids, canvas
