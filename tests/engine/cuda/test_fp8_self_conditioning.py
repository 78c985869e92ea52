"""The FP8 tier's opt-in FP8 self-conditioning (FastOptions.fp8_self_conditioning, issue 25): the
logits pass writes the probabilities as e4m3(448·exp(bf16(x) - M)) with a row scale 1/(448·Z)
(hand-worked row), keeps finished rows, refuses half-given arguments; the embedding's columns in
e4m3; the soft embeddings within e4m3 error of bf16's; the sampler names it, runs it only in the
FP8 tier, and its first step (zeros: no self-conditioning) equals the bf16 self-conditioning's; on a
GPU (skipped elsewhere) the Triton pass against the torch reference."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.engine.cuda.fast_sampler import run_sampler_fast
from petri.engine.cuda.fp8_tier.fp8 import embedding_columns, precision_of, scaled_matmul, set_precision
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON, reference_logit_pass, scalar_reciprocal, triton_logit_pass
from petri.engine.torch.fast_tier import FastOptions
from petri.engine.torch.tiny import tiny_random_model

CUDA = torch.cuda.is_available() and HAVE_TRITON
E4M3 = torch.float8_e4m3fn


def _pass(raw, out, scale, keep=None, probabilities=True):
    return reference_logit_pass(raw, None, temperature=1.0, self_conditioning_out=out, self_conditioning_scale=scale,
                                probabilities=probabilities, uniforms=torch.full((raw.shape[0],), 0.5), keep_rows=keep)


def test_a_row_hand_worked():
    # x = (0, -1, -2, 1), exact in bf16: M = 1, exp(x - M) = e^-1, e^-2, e^-3, 1; times 448:
    # 164.8 → 160 (e4m3 steps of 16 in [128, 256)), 60.6 → 60 (steps of 4), 22.3 → 22 (steps of 2), 448
    raw = torch.tensor([[0.0, -1.0, -2.0, 1.0]])
    out, scale = torch.zeros(1, 4, dtype=E4M3), torch.zeros(1)
    _pass(raw, out, scale)
    assert out.float().tolist() == [[160.0, 60.0, 22.0, 448.0]]
    z = 1 + math.exp(-1) + math.exp(-2) + math.exp(-3)
    assert float(scale[0]) == pytest.approx(1 / (448 * z), rel=1e-6)
    softmax = torch.softmax(raw, dim=-1)[0]
    # dequantized: within e4m3's half step (2⁻⁴ relative) of the softmax, the largest exact
    torch.testing.assert_close(out.float()[0] * scale[0], softmax, rtol=2 ** -4, atol=0)
    assert float(out.float()[0, 3] * scale[0]) == pytest.approx(float(softmax[3]), rel=1e-6)


def test_finished_rows_keep_their_probabilities_and_scale():
    torch.manual_seed(0)
    raw = torch.randn(4, 50)
    out, scale = torch.zeros(4, 50, dtype=E4M3), torch.zeros(4)
    _pass(raw, out, scale)
    before, before_scale = out.float().clone(), scale.clone()
    keep = torch.tensor([True, False, True, False])
    _pass(raw * 3, out, scale, keep=keep)
    assert torch.equal(out.float()[keep], before[keep]) and torch.equal(scale[keep], before_scale[keep])
    assert not torch.equal(out.float()[~keep], before[~keep]) and not torch.equal(scale[~keep], before_scale[~keep])


def test_half_given_arguments_are_refused():
    raw = torch.randn(2, 8)
    with pytest.raises(ValueError, match="needs probabilities=True and a self_conditioning_scale"):
        _pass(raw, torch.zeros(2, 8, dtype=E4M3), None)
    with pytest.raises(ValueError, match="needs probabilities=True"):
        _pass(raw, torch.zeros(2, 8, dtype=E4M3), torch.zeros(2), probabilities=False)
    with pytest.raises(ValueError, match="only for an e4m3 self_conditioning_out"):
        _pass(raw, torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(2))


@pytest.fixture()
def bf16_tiny():
    return tiny_random_model(canvas_length=16, seed=6, dtype=torch.bfloat16)


def test_soft_embeddings_within_e4m3_error_of_bf16(bf16_tiny):
    with pytest.raises(ValueError, match="needs the FP8 tier \\(precision is bf16\\)"):
        embedding_columns(bf16_tiny)
    set_precision(bf16_tiny, "fp8")
    columns, column_scale = embedding_columns(bf16_tiny)
    weight = bf16_tiny.model.model.decoder.embed_tokens.weight.detach().float()
    assert columns.dtype == E4M3 and columns.shape == weight.T.shape
    torch.testing.assert_close(columns.float() * column_scale[:, None], weight.T, rtol=2 ** -4, atol=1e-12)
    torch.manual_seed(1)
    raw = torch.randn(6, weight.shape[0]) * 2
    q, scale = torch.zeros(raw.shape, dtype=E4M3), torch.zeros(6)
    _pass(raw, q, scale)
    bf16 = torch.zeros(raw.shape, dtype=torch.bfloat16)
    _pass(raw, bf16, None)
    want = bf16.float() @ weight
    got = scaled_matmul(q, scale, columns, column_scale, torch.float32)
    error = float((got - want).norm() / want.norm())
    assert 1e-4 < error < 0.06, error  # e4m3 on both operands: a few per cent, not bf16's tenths
    set_precision(bf16_tiny, "bf16")
    assert "_petri_fp8_columns" not in vars(bf16_tiny.model.model.decoder.embed_tokens)


def test_the_sampler_names_it_and_runs_it_only_in_the_fp8_tier(bf16_tiny):
    settings = SamplerSettings(max_denoising_steps=5, stability_threshold=None, confidence_threshold=None)
    layouts = [[AnchorSpan("a", 2, (11,))], []]
    prompt = [5, 9, 17, 33]
    base = FastOptions(graph=False, fused=False, softmax_self_conditioning=True)
    fp8_sc = replace(base, fp8_self_conditioning=True)
    bf16_plain = run_sampler_fast(bf16_tiny, prompt, layouts, settings, seed=3, options=base)
    bf16_asked = run_sampler_fast(bf16_tiny, prompt, layouts, settings, seed=3, options=fp8_sc)
    assert "+sc-fp8" not in bf16_asked.sampler  # bf16 tier: the option has no effect
    np.testing.assert_array_equal(bf16_asked.argmax, bf16_plain.argmax)
    set_precision(bf16_tiny, "fp8")
    plain = run_sampler_fast(bf16_tiny, prompt, layouts, settings, seed=3, options=base)
    got = run_sampler_fast(bf16_tiny, prompt, layouts, settings, seed=3, options=fp8_sc)
    assert precision_of(bf16_tiny) == "fp8"
    assert got.sampler == plain.sampler.replace("+sc-softmax", "+sc-softmax+sc-fp8")
    # step 0 reads zeros either way (no self-conditioning yet): the same logits, the same draw
    np.testing.assert_array_equal(got.argmax[:, 0], plain.argmax[:, 0])  # (S, T, L)
    np.testing.assert_array_equal(got.entropy[:, 0], plain.entropy[:, 0])
    assert not np.array_equal(got.entropy, plain.entropy)  # later steps read the e4m3 probabilities
    assert np.isfinite(got.entropy).all() and (got.argmax >= 0).all()


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_triton_fp8_probabilities_match_the_reference_on_gpu():
    """The second kernel's e4m3 probabilities and scales against the torch reference on the GPU: the
    scales within float32 rounding of Z's summation order, the e4m3 values equal except where
    448·exp rounds to the other side of a half step (at most one e4m3 step apart)."""
    torch.manual_seed(0)
    rows, vocab = 64, 262_144
    raw = (torch.randn(rows, vocab, device="cuda") * 4).bfloat16()
    uniforms = torch.rand(rows, device="cuda")
    want, want_scale = torch.zeros(rows, vocab, dtype=E4M3, device="cuda"), torch.zeros(rows, device="cuda")
    got, got_scale = torch.zeros_like(want), torch.zeros_like(want_scale)
    reference_logit_pass(raw, None, inv_temperature=torch.tensor([scalar_reciprocal(0.8)], device="cuda"), softcap=30.0,
                         self_conditioning_out=want, self_conditioning_scale=want_scale, probabilities=True,
                         uniforms=uniforms)
    triton_logit_pass(raw, None, torch.tensor([scalar_reciprocal(0.8)], device="cuda"), softcap=30.0,
                      self_conditioning_out=got, self_conditioning_scale=got_scale, probabilities=True, uniforms=uniforms)
    torch.testing.assert_close(got_scale, want_scale, rtol=1e-5, atol=0)
    differ = got.float() != want.float()
    assert float(differ.float().mean()) < 1e-4
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -3, atol=2 ** -9)
