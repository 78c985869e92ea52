"""The fused logits pass (petri.engine.cuda.fused.fused_logits).

CPU (CI): the chunked torch reference against naive full-tensor ops written here, on random logits.
GPU (skipped without CUDA + Triton): the Triton kernel against the same naive ops and float64.
Stated tolerances: argmax, sampled token (exponential race) and the bf16 self-conditioning copy are
exact; the inverse-CDF draw equals the reference's but where the cumulative sum rounds differently
at the crossing (within a 1e-5 relative perturbation of the target); probabilities are one bf16 ulp off in at most 1e-3; the entropy
agrees with torch's float32 ``Categorical`` within 2e-6·max|x| + 1e-5·H, and with float64 within
1e-6·max|x| + 1e-5·H (x: the temperature-scaled logits of the row).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from petri.engine.cuda.fused.fused_logits import HAVE_TRITON, inverse_cdf_draw, reference_logit_pass, scalar_reciprocal, triton_logit_pass

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


def test_inverse_cdf_draw_hand_worked():
    # weights exp(x - max x) = [0.5, 1, 0.5]: cumulative 0.5, 1.5, 2.0; the draw is the first
    # index whose cumulative weight exceeds u·2
    x = torch.log(torch.tensor([[1.0, 2.0, 1.0]])).expand(6, 3)
    u = torch.tensor([0.2, 0.3, 0.74, 0.76, 0.999999, 0.0])
    assert inverse_cdf_draw(x, u).tolist() == [0, 1, 1, 2, 2, 0]
    # weight 0 past the first token (exp underflows): never drawn, even when u·Σw reaches the total
    tail = torch.tensor([[0.0, -1000.0, -1000.0]]).expand(3, 3)
    assert inverse_cdf_draw(tail, torch.tensor([0.0, 0.9999999, 1.0])).tolist() == [0, 0, 0]


@pytest.mark.parametrize("draw", ["race", "inverse_cdf"])
def test_draws_sample_softmax(draw):
    """Both draws are draws from softmax(x): frequencies over many draws."""
    x = torch.tensor([[0.0, 1.0, 2.0, -1.0]])
    draws = 40_000
    generator = torch.Generator().manual_seed(1)
    if draw == "race":
        noise = {"log_noise": torch.empty(draws, 4).exponential_(generator=generator).log_()}
    else:
        noise = {"log_noise": None, "uniforms": torch.rand(draws, generator=generator)}
    out = reference_logit_pass(x.expand(draws, 4), temperature=1.0, **noise)
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


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("softcap,dtype,scale", [(None, torch.float32, 3.0), (30.0, torch.bfloat16, 8.0)])
def test_triton_probabilities_match_the_decoders_softmax_on_gpu(softcap, dtype, scale):
    """probabilities=True writes softmax(bf16(x)) as the decoder computes it: the same argmax,
    sampled tokens and entropies, and the probabilities equal but for rare one-ulp roundings."""
    rows, vocab = 96, 262_144
    raw, noise = random_rows(rows, vocab, scale=scale, dtype=dtype, device="cuda", seed=5)
    temperature = 0.55
    x, entropy, argmax, sampled = naive(raw, noise, temperature, softcap)
    sc = torch.full((rows, vocab), 7.0, dtype=torch.bfloat16, device="cuda")
    keep = torch.zeros(rows // 8, dtype=torch.bool, device="cuda")
    keep[5] = True
    inv = torch.tensor([scalar_reciprocal(temperature)], device="cuda")
    out = triton_logit_pass(raw, noise, inv, softcap=softcap, self_conditioning_out=sc,
                            keep_rows_per_sample=keep, rows_per_sample=8, probabilities=True)
    assert torch.equal(out.argmax, argmax) and torch.equal(out.sampled, sampled)
    assert ((out.entropy - entropy).abs() <= 2e-6 * x.abs().amax(-1) + 1e-5 * entropy).all()
    kept = torch.zeros(rows, dtype=torch.bool, device="cuda")
    kept[40:48] = True
    assert (sc[kept] == 7.0).all()
    expected = x[~kept].to(torch.bfloat16).softmax(dim=-1, dtype=torch.float32).to(torch.bfloat16)
    ulps = (sc[~kept].view(torch.int16).int() - expected.view(torch.int16).int()).abs()
    assert int(ulps.max()) <= 1
    assert float((ulps > 0).float().mean()) < 1e-3


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("softcap,dtype", [(None, torch.float32), (30.0, torch.bfloat16)])
def test_triton_inverse_cdf_draw_matches_the_reference_on_gpu(softcap, dtype):
    """The kernel's draw is the inverse-CDF draw of float64 arithmetic up to a 1e-5 relative
    perturbation of the target (rows where float32 sums round differently at a crossing, mostly
    high-entropy ones, may pick a neighbour of the reference's token), and a draw from softmax(x)."""
    rows, vocab = 1024, 262_144
    raw, _ = random_rows(rows, vocab, scale=3.0, dtype=dtype, device="cuda", seed=8)
    uniforms = torch.rand(rows, device="cuda")
    inv = torch.tensor([scalar_reciprocal(0.7)], device="cuda")
    out = triton_logit_pass(raw, None, inv, softcap=softcap, uniforms=uniforms)
    reference = reference_logit_pass(raw, None, inv_temperature=inv, softcap=softcap, uniforms=uniforms)
    assert torch.equal(out.argmax, reference.argmax)
    assert int((out.sampled != reference.sampled).sum()) <= rows // 20
    for part in torch.split(torch.arange(rows, device="cuda"), 128):
        x, _, _, _ = naive(raw[part], raw[part].float(), 0.7, softcap)
        cumulative = torch.exp((x - x.amax(-1, keepdim=True)).double()).cumsum(-1)
        total = cumulative[:, -1]
        target = uniforms[part].double() * total
        j = out.sampled[part]
        at = cumulative.gather(1, j[:, None]).squeeze(1)
        before = torch.where(j > 0, cumulative.gather(1, (j - 1).clamp(min=0)[:, None]).squeeze(1), 0.0)
        assert (at > target - 1e-5 * total).all() and (before <= target + 1e-5 * total).all()
    # and it is a draw from softmax(x): 40,000 draws from one four-token row
    x = torch.tensor([[0.0, 1.0, 2.0, -1.0]], device="cuda").expand(40_000, 4).contiguous()
    one = torch.tensor([1.0], device="cuda")
    drawn = triton_logit_pass(x, None, one, uniforms=torch.rand(40_000, device="cuda")).sampled
    freq = torch.bincount(drawn, minlength=4).double().cpu() / 40_000
    assert (freq - torch.softmax(x[0].double().cpu(), -1)).abs().max() < 0.01


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("block", [None, 1024])
def test_a_target_at_the_total_draws_the_last_token_of_positive_weight_on_gpu(block):
    """Where u·Σw reaches the total (u = 1 here; rounding does it for u just below 1) no prefix
    exceeds the target: the draw is the last index whose weight is positive, whichever tile holds
    it, never a later one whose weight underflowed to 0 (the hand-worked case of the reference)."""
    vocab = 5_000
    x = torch.full((4, vocab), -1000.0, device="cuda")
    for row, last in enumerate((0, 1023, 2999, vocab - 1)):  # first tile, a tile's end, inside one, the row's end
        x[row, : last + 1] = 0.0
    one = torch.tensor([1.0], device="cuda")
    drawn = triton_logit_pass(x, None, one, uniforms=torch.ones(4, device="cuda"), block=block,
                              num_warps=4 if block else None).sampled
    assert drawn.tolist() == [0, 1023, 2999, vocab - 1]
    assert reference_logit_pass(x, None, temperature=1.0, uniforms=torch.ones(4, device="cuda")).sampled.tolist() \
        == [0, 1023, 2999, vocab - 1]
