"""The prompt encoder's sliding layers through the flash kernel told their window
(petri.engine.cuda.attention.encoder_attention): which calls it computes (hand-worked), that petri's encoder calls
it with what it needs (one prompt, causal, the layer's window, an empty cache) and with the
library's SDPA on the CPU leaves the cache bit for bit, the compiled tier's install and undo; on a
GPU (skipped elsewhere) a hand-worked case at the window's edge, and the function against the
library's SDPA with transformers' own band mask."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import petri.engine.cuda.attention.encoder_attention as encoder_attention
from petri.engine.cuda.attention.encoder_attention import NAME, petri_encoder_window, use_encoder_window, window_call_fits
from petri.engine.cuda.attention.split_attention import drop_split_attention
from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.torch.decoder_hooks import encoder_layers
from petri.engine.torch.step import encode_prompt_once, encoder_inputs
from petri.engine.torch.tiny import tiny_random_model

CUDA = torch.cuda.is_available()
WINDOW = 8
#: longer than the window, so the band cuts keys off for the later queries
PROMPT = list(range(20, 45))


def tiny(device: str = "cpu", dtype: torch.dtype = torch.float32):
    """Six layers (five sliding with a window of 8, one full) of a tiny random DiffusionGemma."""
    lm = tiny_random_model(canvas_length=16, num_layers=6, sliding_window=WINDOW, seed=3)
    if device != "cpu" or dtype != torch.float32:
        lm.model.to(device, dtype)
        lm = replace(lm, device=torch.device(device), dtype=dtype)
    return lm


def cache_of(lm) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cache = encode_prompt_once(lm, torch.tensor([PROMPT], device=lm.device))
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def test_which_calls_it_computes():
    def call(batch=1, queries=25, keys=25, dim=32, dtype=torch.bfloat16, heads=4, kv_heads=2, causal=True, window=8,
             dropout=0.0):
        query = torch.zeros(batch, heads, queries, dim, dtype=dtype)
        key = torch.zeros(batch, kv_heads, keys, dim, dtype=dtype)
        return window_call_fits(query, key, causal, window, dropout)

    assert call() and call(dtype=torch.float16) and call(dim=256) and call(queries=1, keys=1) and call(window=1)
    assert not call(batch=2)  # two sequences: a padded batch's mask is not the band
    assert not call(keys=32)  # keys kept from before: not one prompt into an empty cache
    assert not call(causal=False)
    assert not call(window=None) and not call(window=0)  # a full-attention layer
    assert not call(dropout=0.1)
    assert not call(dtype=torch.float32)
    assert not call(dim=512) and not call(dim=100)  # over the flash kernel's widest head; not a multiple of 8
    assert not call(heads=3, kv_heads=2)


def test_the_encoder_calls_it_with_one_prompt_causal_and_the_layers_window(monkeypatch):
    """What the function relies on, from transformers' encoder as petri calls it: each sliding
    layer's call is causal, names the layer's window and has as many keys as queries (the prompt's
    length); on the CPU every call then goes to the library's SDPA, so the cache is the same."""
    lm = tiny()
    want = cache_of(lm)
    layers = encoder_layers(lm.model)
    assert use_encoder_window(layers) == 5  # the five sliding layers, not the full one
    assert [layer.self_attn.config._attn_implementation for layer in layers] == [NAME] * 5 + ["sdpa"]
    assert use_encoder_window(layers) == 0  # installed once
    seen = []

    def spy(query, key, causal, window, dropout):
        seen.append((tuple(query.shape), key.shape[2], causal, window, dropout))
        return window_call_fits(query, key, causal, window, dropout)

    monkeypatch.setattr(encoder_attention, "window_call_fits", spy)
    got = cache_of(lm)
    drop_split_attention(layers)
    heads, dim = lm.model.config.get_text_config().num_attention_heads, lm.model.config.get_text_config().head_dim
    assert seen == [((1, heads, len(PROMPT), dim), len(PROMPT), True, WINDOW, 0.0)] * 5
    for (keys, values), (want_keys, want_values) in zip(got, want):
        assert torch.equal(keys, want_keys) and torch.equal(values, want_values)
    assert all(layer.self_attn.config._attn_implementation == "sdpa" for layer in layers)


@pytest.mark.parametrize("encoder_window", [True, False])
def test_the_compiled_tier_installs_it_on_the_encoder_only_and_undoes_it(encoder_window):
    lm = tiny()
    compile_regions(lm, backend="eager", encoder_window=encoder_window)
    try:
        names = [layer.self_attn.config._attn_implementation for layer in encoder_layers(lm.model)]
        assert names == ([NAME] * 5 if encoder_window else ["sdpa"] * 5) + ["sdpa"]
        assert NAME not in {layer.self_attn.config._attn_implementation for layer in lm.model.model.decoder.layers}
    finally:
        uncompile_regions(lm)
    assert all(layer.self_attn.config._attn_implementation == "sdpa" for layer in encoder_layers(lm.model))


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_the_windows_edge_on_gpu():
    """Hand-worked: every query looks the same way, key 0 alone scores 30 (the others 0) and carries
    the value 1 (the others 0). Query i sees key 0 while i < W (weight 1 − O(i·e⁻³⁰)), after that
    only zero values: out[i] = 1 for i < W, exactly 0 from i = W on. A window one key too wide or
    too narrow moves the edge."""
    length, heads, kv_heads, dim = 3 * WINDOW, 4, 2, 32
    query = torch.zeros(1, heads, length, dim, device="cuda", dtype=torch.bfloat16)
    query[..., 0] = 1.0
    key = torch.zeros(1, kv_heads, length, dim, device="cuda", dtype=torch.bfloat16)
    key[:, :, 0, 0] = 30.0
    value = torch.zeros_like(key)
    value[:, :, 0] = 1.0

    class Attention(torch.nn.Module):
        num_key_value_groups, is_causal = heads // kv_heads, True

    out, _ = petri_encoder_window(Attention(), query, key, value, None, scaling=1.0, sliding_window=WINDOW)
    assert out.shape == (1, length, heads, dim)
    assert torch.all(out[0, :WINDOW].float() > 0.999)
    assert torch.equal(out[0, WINDOW:], torch.zeros_like(out[0, WINDOW:]))


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("length", [WINDOW - 3, 25, 200])
def test_against_sdpa_with_the_librarys_band_mask_on_gpu(length):
    """The mask transformers builds for petri's encoder (``encoder_inputs``) at lengths below and
    above the window: the function's result within bf16 rounding of SDPA's with that mask (1 %
    relative Frobenius error; one key in or out of the window is off by far more at these lengths)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    lm = tiny("cuda", torch.bfloat16)
    attention = encoder_layers(lm.model)[0].self_attn
    mask = encoder_inputs(lm, length)[2]["sliding_attention"]
    torch.manual_seed(length)
    heads, kv_heads, dim = 16, 8, 256  # the full-size sliding layers'
    query = torch.randn(1, heads, length, dim, device="cuda").bfloat16()
    key = (torch.randn(1, kv_heads, length, dim, device="cuda") / dim ** 0.5).bfloat16()
    value = torch.randn(1, kv_heads, length, dim, device="cuda").bfloat16()
    attention.num_key_value_groups = heads // kv_heads
    got, _ = petri_encoder_window(attention, query, key, value, mask, scaling=1.0, is_causal=True, sliding_window=WINDOW)
    want, _ = sdpa_attention_forward(attention, query, key, value, mask, scaling=1.0, is_causal=True,
                                     sliding_window=WINDOW)
    error = (got.float() - want.float()).norm() / want.float().norm()
    assert float(error) < 1e-2, float(error)
    narrow = encoder_attention.window_attention(query, key, value, 1.0, WINDOW - 1).transpose(1, 2)
    if length > WINDOW - 1:  # a window one key narrower is not within rounding
        assert float((narrow.float() - want.float()).norm() / want.float().norm()) > 5e-2
