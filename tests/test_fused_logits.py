"""The fused logits pass (petri.engine.fused_logits).

CPU (CI): the chunked torch reference against naive full-tensor ops written here, on random logits.
GPU (skipped without CUDA + Triton): the Triton kernel against the same naive ops and float64.
Stated tolerances: argmax, sampled token and the bf16 self-conditioning copy are exact; the entropy
agrees with torch's float32 ``Categorical`` within 2e-6·max|x| + 1e-5·H, and with float64 within
1e-6·max|x| + 1e-5·H (x: the temperature-scaled logits of the row).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from petri.engine.fused_logits import HAVE_TRITON, reference_logit_pass, scalar_reciprocal, triton_logit_pass

CUDA = torch.cuda.is_available() and HAVE_TRITON


def naive(raw: torch.Tensor, log_noise: torch.Tensor, temperature: float, softcap: float | None):
    """Full-tensor eager ops: the model's softcap, the sampler's temperature, softmax entropy."""
    logits = raw.float()
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    x = logits / temperature
    log_p = torch.log_softmax(x, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    return x, entropy, x.argmax(-1), (x - log_noise).argmax(-1)


def random_rows(rows: int, vocab: int, scale: float, dtype, device="cpu", seed=0):
    generator = torch.Generator(device=device).manual_seed(seed)
    raw = (torch.randn(rows, vocab, generator=generator, device=device) * scale).to(dtype)
    # a few near-deterministic rows and a row with exact ties at the maximum
    raw[0, 7] = 40.0
    raw[1, :] = raw[1, :].clamp(max=1.0)
    raw[1, 3] = raw[1, vocab - 2] = 5.0
    noise = torch.empty(rows, vocab, device=device).exponential_(generator=generator).log_()
    return raw, noise


@pytest.mark.parametrize("softcap", [None, 30.0])
@pytest.mark.parametrize("chunk_rows", [1, 5, 64])
def test_reference_pass_matches_naive_ops(softcap, chunk_rows):
    raw, noise = random_rows(13, 3001, scale=6.0, dtype=torch.float32)
    temperature = 0.65
    x, entropy, argmax, sampled = naive(raw, noise, temperature, softcap)
    sc = torch.full((13, 3001), 7.0)
    keep = torch.zeros(13, dtype=torch.bool)
    keep[4] = True
    out = reference_logit_pass(raw, noise, temperature=temperature, softcap=softcap,
                               self_conditioning_out=sc, keep_rows=keep, chunk_rows=chunk_rows)
    assert torch.equal(out.argmax, argmax)
    assert out.argmax[1] == 3  # first index among tied maxima
    assert torch.equal(out.sampled, sampled)
    bound = 2e-6 * x.abs().amax(-1) + 1e-5 * entropy
    assert ((out.entropy - entropy).abs() <= bound).all()
    assert torch.equal(sc[4], torch.full((3001,), 7.0))  # kept row untouched
    rest = torch.arange(13) != 4
    assert torch.equal(sc[rest], x[rest])


def test_scalar_reciprocal_is_the_double_reciprocal_rounded_to_float32():
    assert scalar_reciprocal(0.55) == float(np.float32(1 / 0.55))
    # 1/0.55 in float32 arithmetic rounds differently: the double-precision form is what CUDA uses
    assert scalar_reciprocal(0.55) != float(np.float32(1) / np.float32(0.55))


def test_reference_pass_inverse_temperature_form():
    raw, noise = random_rows(4, 500, scale=3.0, dtype=torch.float32)
    inv = torch.tensor([scalar_reciprocal(0.5)])
    out = reference_logit_pass(raw, noise, inv_temperature=inv, softcap=None)
    x = raw * inv
    assert torch.equal(out.argmax, x.argmax(-1))
    assert torch.equal(out.sampled, (x - noise).argmax(-1))


def test_exponential_race_samples_softmax():
    """argmax(x - log E) with E ~ Exp(1) is a draw from softmax(x): frequencies over many draws."""
    x = torch.tensor([[0.0, 1.0, 2.0, -1.0]])
    draws = 40_000
    generator = torch.Generator().manual_seed(1)
    noise = torch.empty(draws, 4).exponential_(generator=generator).log_()
    out = reference_logit_pass(x.expand(draws, 4), noise, temperature=1.0)
    freq = torch.bincount(out.sampled, minlength=4).double() / draws
    expected = torch.softmax(x[0].double(), -1)
    assert (freq - expected).abs().max() < 0.01  # 4σ ≈ 0.01 at p≈0.5, n=40,000


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("softcap,dtype", [(None, torch.float32), (30.0, torch.bfloat16)])
def test_triton_pass_matches_naive_ops_on_gpu(softcap, dtype):
    rows, vocab = 96, 262_144
    raw, noise = random_rows(rows, vocab, scale=8.0, dtype=dtype, device="cuda", seed=3)
    temperature = 0.55
    x, entropy, argmax, sampled = naive(raw, noise, temperature, softcap)
    sc = torch.full((rows, vocab), -3.0, dtype=torch.bfloat16, device="cuda")
    keep = torch.zeros(rows // 8, dtype=torch.bool, device="cuda")
    keep[2] = True
    inv = torch.tensor([scalar_reciprocal(temperature)], device="cuda")
    out = triton_logit_pass(raw, noise, inv, softcap=softcap, self_conditioning_out=sc,
                            keep_rows_per_sample=keep, rows_per_sample=8)
    assert torch.equal(out.argmax, argmax)
    assert torch.equal(out.sampled, sampled)
    assert ((out.entropy - entropy).abs() <= 2e-6 * x.abs().amax(-1) + 1e-5 * entropy).all()
    exact = torch.distributions.Categorical(logits=x.double()).entropy()
    assert ((out.entropy.double() - exact).abs() <= 1e-6 * x.abs().amax(-1) + 1e-5 * exact).all()
    kept = torch.zeros(rows, dtype=torch.bool, device="cuda")
    kept[16:24] = True
    assert (sc[kept] == -3.0).all()
    assert torch.equal(sc[~kept], x[~kept].to(torch.bfloat16))
