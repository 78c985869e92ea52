"""The fused attention inputs (petri.engine.cuda.attention.attention_inputs): the decoder attention's forward with its
q, k, v norms, rotary embedding and appending to the prompt's keys as one op gives the library's logits
bit for bit through the reference (float32 and bf16; the tiny model's sliding layer has a v projection,
its global layer takes its values from the keys, and the q and k norms' weights are drawn at random so
that a swapped weight shows), and the op is what runs; ``generate`` gives the library's tokens with its
dynamic cache (the op in every layer) and its static one (the library's forward); a hand-worked head;
the op's fake form matches;
the compiled tier installs it by default, leaves it out when asked and undoes it; what an attention
must have; on a GPU (skipped elsewhere) the Triton kernel against the reference at the full-size
shapes (sliding and global layers, one and twelve samples) and through the tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from petri.engine.cuda.attention import attention_inputs as module
from petri.engine.cuda.attention.attention_inputs import (
    attention_inputs,
    attention_inputs_reference,
    attention_inputs_triton,
    drop_fused_attention_inputs,
    fused_attention_reason,
    use_fused_attention_inputs,
)
from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.torch.decoder_hooks import encoder_layers
from petri.engine.torch.tiny import tiny_random_model
from rounding_support import assert_close_bf16
from tiny_support import tiny_logits

CUDA = torch.cuda.is_available()


def _tiny(dtype=torch.float32):
    """The tiny model with its q and k norms' weights drawn away from one, each different."""
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=3, dtype=dtype)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for layer in lm.model.model.decoder.layers:
            for name in ("q_norm", "k_norm"):
                weight = getattr(layer.self_attn, name).weight
                weight.copy_(1 + 0.5 * torch.randn(weight.shape, generator=generator))
    return lm


def _counting(monkeypatch):
    """Count the op's calls through the attention forward (the reference underneath)."""
    calls = []
    real = module.attention_inputs

    def counted(*args):
        calls.append(args[2] is None)  # values are the keys
        return real(*args)

    monkeypatch.setattr(module, "attention_inputs", counted)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_forward_is_the_library_attention_bit_for_bit(dtype, monkeypatch):
    lm = _tiny(dtype)
    layers = lm.model.model.decoder.layers
    assert layers[0].self_attn.v_proj is not None and layers[1].self_attn.v_proj is None  # both kinds of values
    want = tiny_logits(lm)
    calls = _counting(monkeypatch)
    assert use_fused_attention_inputs(layers) == 2
    assert torch.equal(tiny_logits(lm), want)
    assert calls == [False, True]  # the op ran in both layers, the global one's values from its keys
    drop_fused_attention_inputs(layers)
    assert not any("forward" in vars(layer.self_attn) for layer in layers)
    calls.clear()
    assert torch.equal(tiny_logits(lm), want) and calls == []


@pytest.mark.parametrize("cache", [None, "static"])
def test_generate_gives_the_library_s_tokens_with_either_cache(cache, monkeypatch):
    """transformers' ``generate`` through the fused forward: with its dynamic cache the op runs in
    every layer of every step; its static cache (compileable: its appending pads) goes through the
    library's forward. The tokens are the library's either way."""
    from petri.core.trajectory import SamplerSettings
    from petri.engine.torch.sampler import generate_kwargs

    lm = _tiny()
    settings = SamplerSettings(max_denoising_steps=4)

    def tokens():
        torch.manual_seed(0)
        out = lm.model.generate(torch.tensor([[5, 9, 17, 33]]), max_new_tokens=lm.canvas_length, eos_token_id=None,
                                **generate_kwargs(settings), **({"cache_implementation": cache} if cache else {}))
        return getattr(out, "sequences", out)

    want = tokens()
    calls = _counting(monkeypatch)
    use_fused_attention_inputs(lm.model.model.decoder.layers)
    assert torch.equal(tokens(), want)
    assert len(calls) == (0 if cache else 2 * settings.max_denoising_steps)


def test_the_reference_by_hand():
    """One head of two values rotated by 90 degrees (cos 0, sin 1: rope(n) = (-n₂, n₁)), eps 0:
    q (3, 4) has root mean square √12.5, its weight (1, 2); k (1, -1) root mean square 1, weight
    (1, 1); v (0, 2) root mean square √2, no weight; one prompt position before the canvas's."""
    query, key, value = torch.tensor([[[3.0, 4.0]]]), torch.tensor([[[1.0, -1.0]]]), torch.tensor([[[0.0, 2.0]]])
    cos, sin = torch.zeros(1, 1, 2), torch.ones(1, 1, 2)
    prompt_keys, prompt_values = torch.tensor([7.0, 8.0]).view(1, 1, 1, 2), torch.tensor([5.0, 6.0]).view(1, 1, 1, 2)
    q, keys, values = attention_inputs_reference(query, key, value, cos, sin, torch.tensor([1.0, 2.0]),
                                                 torch.ones(2), prompt_keys, prompt_values, 2, 0.0)
    root = math.sqrt(12.5)
    torch.testing.assert_close(q, torch.tensor([-8 / root, 3 / root]).view(1, 1, 1, 2))
    torch.testing.assert_close(keys, torch.tensor([[7.0, 8.0], [1.0, 1.0]]).view(1, 1, 2, 2))
    torch.testing.assert_close(values, torch.tensor([[5.0, 6.0], [0.0, math.sqrt(2)]]).view(1, 1, 2, 2))
    _, _, values = attention_inputs_reference(query, key, None, cos, sin, torch.tensor([1.0, 2.0]), torch.ones(2),
                                              prompt_keys, prompt_values, 2, 0.0)
    torch.testing.assert_close(values[0, 0, 1], torch.tensor([1.0, -1.0]))  # the raw keys, normed, not rotated


def test_the_op_s_fake_form_matches_its_result():
    torch.manual_seed(0)
    batch, length, heads, kv_heads, dim, prompt = 2, 3, 4, 2, 8, 5
    projected = torch.randn(batch, length, (heads + 2 * kv_heads) * dim, dtype=torch.bfloat16)
    query, key, value = projected.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    angles = torch.randn(1, length, dim)
    args = (query, key, value, angles.cos().bfloat16(), angles.sin().bfloat16(), torch.rand(dim, dtype=torch.bfloat16),
            torch.rand(dim, dtype=torch.bfloat16), torch.randn(batch, kv_heads, prompt, dim, dtype=torch.bfloat16),
            torch.randn(batch, kv_heads, prompt, dim, dtype=torch.bfloat16), dim, 1e-6)
    torch.library.opcheck(attention_inputs, args, test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(attention_inputs, (query, key, None, *args[3:]), test_utils=("test_schema", "test_faketensor"))


def test_the_compiled_tier_installs_it_by_default_and_undoes_it(monkeypatch):
    lm = _tiny()
    want = tiny_logits(lm)
    calls = _counting(monkeypatch)
    compile_regions(lm, backend="eager")
    layers = lm.model.model.decoder.layers
    assert all(vars(layer.self_attn).get(module.INSTALLED) for layer in layers)
    torch.testing.assert_close(tiny_logits(lm), want, rtol=1e-5, atol=1e-5)
    assert len(calls) == len(layers)
    uncompile_regions(lm)
    assert not any("forward" in vars(layer.self_attn) for layer in layers)
    compile_regions(lm, backend="eager", fused_attention_inputs=False)
    calls.clear()
    torch.testing.assert_close(tiny_logits(lm), want, rtol=1e-5, atol=1e-5)
    assert calls == [] and not any("forward" in vars(layer.self_attn) for layer in layers)
    uncompile_regions(lm)


def test_the_reason_names_what_an_attention_lacks():
    lm = _tiny()
    attention = lm.model.model.decoder.layers[0].self_attn
    assert fused_attention_reason(attention) is None
    assert "is not the library's decoder attention" in fused_attention_reason(torch.nn.Linear(2, 2))
    attention.v_norm.weight = torch.nn.Parameter(torch.ones(attention.head_dim))
    assert fused_attention_reason(attention) == "the v norm has a weight"
    attention = lm.model.model.decoder.layers[1].self_attn
    attention.k_norm.eps = 1e-3
    assert fused_attention_reason(attention) == "the q, k and v norms' eps differ"
    encoder_attention = encoder_layers(lm.model)[0].self_attn
    assert "is not the library's decoder attention" in fused_attention_reason(encoder_attention)


# ---- on a GPU: the Triton kernel --------------------------------------------------------------------

def _gpu_inputs(batch, length, heads, kv_heads, dim, prompt, values_are_keys, seed):
    """Projections as the stacked product's column views, rotary angles of the positions after the
    prompt's, norm weights near one, the prompt's keys and values."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    draw = lambda *shape, scale=1.0: (torch.randn(*shape, device="cuda", generator=generator) * scale).bfloat16()  # noqa: E731
    widths = [heads * dim, kv_heads * dim] + ([] if values_are_keys else [kv_heads * dim])
    parts = draw(batch, length, sum(widths), scale=3.0).split(widths, dim=-1)
    inverse = 10000 ** (-torch.arange(0, dim, 2, device="cuda").float() / dim)
    angles = (prompt + torch.arange(length, device="cuda").float())[:, None] * inverse
    angles = torch.cat([angles, angles], dim=-1)[None]
    return (parts[0], parts[1], None if values_are_keys else parts[2], angles.cos().bfloat16(), angles.sin().bfloat16(),
            1 + draw(dim, scale=0.5), 1 + draw(dim, scale=0.5), draw(batch, kv_heads, prompt, dim),
            draw(batch, kv_heads, prompt, dim), dim, 1e-6)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("shape", [
    (12, 256, 16, 8, 256, 200, False),  # a sliding layer at twelve samples
    (1, 256, 16, 2, 512, 1600, True),  # a global layer at one sample, its values the keys
    (2, 5, 4, 1, 64, 0, False),  # no prompt
])
def test_the_kernel_computes_the_reference_on_gpu(shape):
    """The default launch and others (heads a program, warps): another launch may sum a head's
    squares in another order, so each is held to the reference, not to the default's bits (on an
    H200 up to 104 of 35 M outputs moved between launches, ``kernel_levers_h200_attention_inputs_launch.json``);
    the prompt's rows are copies whatever the launch."""
    args = _gpu_inputs(*shape, seed=sum(shape[:6]))
    want = attention_inputs_reference(*args)
    prompt = shape[5]
    for launch in ({}, {"heads_per_program": 1, "num_warps": 2}, {"heads_per_program": 8, "num_warps": 2}):
        got = attention_inputs_triton(*args, **launch)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.is_contiguous()
        assert torch.equal(got[1][:, :, :prompt], want[1][:, :, :prompt])
        assert torch.equal(got[2][:, :, :prompt], want[2][:, :, :prompt])
        for g, w in ((got[0], want[0]), (got[1][:, :, prompt:], want[1][:, :, prompt:]),
                     (got[2][:, :, prompt:], want[2][:, :, prompt:])):
            assert_close_bf16(g, w)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_the_op_takes_the_kernel_on_gpu_and_the_model_stays_close(monkeypatch):
    """The tiny model in bf16 on the GPU, its attention's inputs fused (the op's Triton path)
    against the library's: logits within bf16 rounding."""
    from dataclasses import replace

    lm = _tiny(torch.bfloat16)
    lm = replace(lm, model=lm.model.to("cuda"), device=torch.device("cuda"))
    torch.manual_seed(0)
    canvas = torch.randint(4, lm.vocab_size, (2, lm.canvas_length), device="cuda")
    prompt = torch.tensor([[5, 9, 17, 33]] * 2, device="cuda")
    launched = []
    real = module.attention_inputs_triton
    monkeypatch.setattr(module, "attention_inputs_triton", lambda *args: launched.append(1) or real(*args))
    with torch.no_grad():
        want = lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()
        use_fused_attention_inputs(lm.model.model.decoder.layers)
        got = lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()
    assert len(launched) == 2
    assert float((got - want).norm() / want.norm()) < 1e-2
