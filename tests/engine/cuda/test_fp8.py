"""The FP8 tier (petri.engine.cuda.fp8_tier.fp8): quantization against hand-worked values and the e4m3 rounding
bound, the scaled products against float64 loops written here, the tier switched on and off on a
tiny model (reversible, named in every trajectory, refused with a reason where it cannot run), and
on a GPU (skipped elsewhere) torch's scaled matmuls against the dequantized references."""

from __future__ import annotations

import argparse
import copy
from dataclasses import replace

import pytest
import torch

from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.engine.base import SampleRequest
from petri.engine.cuda.fp8_tier.fp8 import (
    FP8,
    FP8_MAX,
    INV_FP8_MAX,
    MIN_SCALE,
    activation_quantized,
    dequantize,
    experts_fp8,
    fp8_reason,
    precision_of,
    quantize_rows,
    quantize_rows_torch,
    scaled_grouped,
    scaled_grouped_reference,
    scaled_matmul,
    scaled_matmul_reference,
    set_precision,
    use_bf16,
    use_fp8,
)
from petri.engine.cuda.fused.fused_experts import experts_reference, gated_activation
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.torch.tiny import tiny_random_model
from tiny_support import tiny_logits

CUDA = torch.cuda.is_available() and HAVE_TRITON and torch.cuda.get_device_capability() >= (8, 9)


def test_quantize_rows_hand_worked():
    # row 0: amax 4 → scale 4/448; 1, -2, 4 become 112, -224, 448 (all exact in e4m3: 1.75·2⁶, -1.75·2⁷, 1.75·2⁸)
    x = torch.tensor([[1.0, -2.0, 4.0], [0.0, 0.0, 0.0]])
    q, scale = quantize_rows(x)
    assert q.dtype == FP8 and scale.dtype == torch.float32 and scale.shape == (2,)
    assert q[0].float().tolist() == [112.0, -224.0, 448.0]
    assert scale[0].item() == pytest.approx(4 / 448, rel=1e-7)
    assert dequantize(q, scale)[0].tolist() == pytest.approx([1.0, -2.0, 4.0], rel=1e-6)
    # an all-zero row: zeros, the smallest scale, no NaN
    assert q[1].float().tolist() == [0.0, 0.0, 0.0] and scale[1].item() == pytest.approx(MIN_SCALE)


def test_quantize_rows_error_is_within_e4m3_rounding():
    # 3 mantissa bits: half an ulp is 2⁻⁴ of the value for normals; below 2⁻⁶ (subnormals, spacing
    # 2⁻⁹ of the row scale's 448) half a spacing is 2⁻¹⁰·448·scale/448 = 2⁻¹⁰ · (scale · 1)... in x units
    torch.manual_seed(0)
    x = torch.randn(64, 300) * torch.logspace(-3, 3, 64)[:, None]
    q, scale = quantize_rows(x)
    error = (dequantize(q, scale) - x).abs()
    bound = torch.maximum(x.abs() * 2**-4, 2**-10 * scale[:, None]) * (1 + 1e-6)
    assert bool((error <= bound).all())
    assert float(error.max()) > 0  # it really rounds


def test_scaled_matmul_reference_hand_worked():
    # x = [[1, 2]] (scale 2/448: q = [224, 448]); w rows [1, 1] and [2, -2] (scales 1/448, 2/448)
    xq, xs = quantize_rows(torch.tensor([[1.0, 2.0]]))
    wq, ws = quantize_rows(torch.tensor([[1.0, 1.0], [2.0, -2.0]]))
    out = scaled_matmul_reference(xq, xs, wq, ws, torch.float32)
    assert out.tolist() == [pytest.approx([3.0, -2.0], rel=1e-6)]
    assert scaled_matmul(xq, xs, wq, ws, torch.float32).tolist() == out.tolist()  # the CPU path is the reference


def test_scaled_grouped_reference_against_a_row_loop():
    torch.manual_seed(1)
    experts, rows, n, k = 4, 10, 16, 32
    xq, xs = quantize_rows(torch.randn(rows, k))
    wq, ws = quantize_rows(torch.randn(experts, n, k))
    offsets = torch.tensor([3, 3, 7, 10], dtype=torch.int32)  # expert 1 has no rows
    group = [0, 0, 0, 2, 2, 2, 2, 3, 3, 3]
    expected = torch.stack([
        (xq[r].double() * xs[r].double()) @ (wq[group[r]].double() * ws[group[r]].double()[:, None]).T for r in range(rows)
    ])
    got = scaled_grouped(xq, xs, wq, ws, offsets, torch.float32)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(got, scaled_grouped_reference(xq, xs, wq, ws, offsets, torch.float32))


def _routing(tokens, experts, top_k, seed=0):
    generator = torch.Generator().manual_seed(seed)
    index = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=generator)
    return index, weights / weights.sum(-1, keepdim=True)


def test_experts_fp8_is_the_experts_block_within_fp8_error():
    torch.manual_seed(2)
    tokens, experts, top_k, hidden, width = 24, 6, 2, 64, 32
    x = torch.randn(tokens, hidden).bfloat16()
    gate_up = (torch.randn(experts, 2 * width, hidden) / hidden**0.5).bfloat16()
    down = (torch.randn(experts, hidden, width) / width**0.5).bfloat16()
    index, weights = _routing(tokens, experts, top_k)
    exact = experts_reference(x, index, weights, gate_up, down, "gelu_pytorch_tanh").float()
    gq, gs = quantize_rows(gate_up)
    dq, ds = quantize_rows(down)
    got = experts_fp8(x, index, weights, gq, gs, dq, ds, "gelu_pytorch_tanh").float()
    relative = float((got - exact).norm() / exact.norm())
    assert 0 < relative < 0.08  # e4m3 operands (≤ 6 % per element, averaging out), bf16 between the GEMMs
    # a wrong expert for one token is far outside that error
    wrong = experts_fp8(x, index.roll(1, dims=1), weights, gq, gs, dq, ds, "gelu_pytorch_tanh").float()
    assert float((wrong - exact).norm() / exact.norm()) > 0.3


def test_torch_scaled_grouped_mm_takes_the_layouts_the_tier_passes():
    # torch's shape and layout checks run on the meta device (no GPU): rows (R, K) row-major,
    # weights (E, N, K) as the column-major (E, K, N) view, scales (R,) and (E, N), int32 offsets
    rows = torch.empty(40, 64, dtype=FP8, device="meta")
    weights = torch.empty(4, 48, 64, dtype=FP8, device="meta")
    out = torch._scaled_grouped_mm(
        rows, weights.transpose(-2, -1), torch.empty(40, device="meta"), torch.empty(4, 48, device="meta"),
        offs=torch.empty(4, dtype=torch.int32, device="meta"), out_dtype=torch.bfloat16,
    )
    assert out.shape == (40, 48) and out.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="column major"):  # the untransposed weights are refused
        torch._scaled_grouped_mm(rows, weights.permute(0, 2, 1).contiguous(), torch.empty(40, device="meta"),
                                 torch.empty(4, 48, device="meta"), offs=torch.empty(4, dtype=torch.int32, device="meta"))


@pytest.fixture()
def bf16_tiny():
    return tiny_random_model(canvas_length=16, dtype=torch.bfloat16)


def test_fp8_tier_changes_the_logits_by_fp8_error_and_switches_back_exactly(bf16_tiny):
    before = tiny_logits(bf16_tiny)
    weights = {name: p.clone() for name, p in bf16_tiny.model.named_parameters()}
    set_precision(bf16_tiny, "fp8")
    assert precision_of(bf16_tiny) == "fp8" and bf16_tiny.device_type == "cpu-fp8"
    during = tiny_logits(bf16_tiny)
    relative = float((during - before).norm() / before.norm())
    assert 0 < relative < 0.35  # two random layers compound each product's few per cent (next test)
    for name, p in bf16_tiny.model.named_parameters():  # the bf16 weights are kept as they were
        assert torch.equal(p, weights[name]), name
    set_precision(bf16_tiny, "bf16")
    assert precision_of(bf16_tiny) == "bf16" and bf16_tiny.device_type == "cpu"
    assert torch.equal(tiny_logits(bf16_tiny), before)


def test_fp8_quantizes_dense_experts_and_lm_head_but_not_the_router(bf16_tiny):
    use_fp8(bf16_tiny)
    model = bf16_tiny.model
    layer = model.model.decoder.layers[0]
    x = torch.randn(20, layer.self_attn.q_proj.in_features).bfloat16()
    exact = x.double() @ layer.self_attn.q_proj.weight.double().T
    with torch.no_grad():
        error = float((layer.self_attn.q_proj(x).double() - exact).norm() / exact.norm())
    assert 0.005 < error < 0.06  # e4m3 operands: ≈ 2.5 % RMS each; bf16 alone would be ≈ 0.3 %
    for module in (layer.self_attn.q_proj, layer.self_attn.o_proj, layer.mlp.down_proj, model.lm_head,
                   model.model.decoder.self_conditioning.gate_proj):
        assert module._petri_fp8_weight.dtype == FP8 and "forward" in vars(module)
    assert "forward" not in vars(layer.router.proj)
    assert layer.experts._petri_fp8_gate_up.shape == layer.experts.gate_up_proj.shape
    assert layer.experts._petri_fp8_down_scale.shape == layer.experts.down_proj.shape[:2]
    use_bf16(bf16_tiny)
    assert "forward" not in vars(layer.self_attn.q_proj) and "forward" not in vars(layer.experts)


def test_fp8_trajectories_name_the_tier(bf16_tiny):
    layouts = [[AnchorSpan("a", 3, (11,))]] * 2
    settings = SamplerSettings(max_denoising_steps=3)
    use_fp8(bf16_tiny)
    assert bf16_tiny.sample(SampleRequest([5, 9, 17], layouts, settings, seed=0)).sampler == "eager+fp8"
    set_precision(bf16_tiny, "fp8-fast")  # straight from one FP8 variant to the other
    assert bf16_tiny.sample(SampleRequest([5, 9, 17], layouts, settings, seed=0)).sampler == "eager+fp8-fast"
    assert bf16_tiny.device_type == "cpu-fp8-fast" and bf16_tiny.model.lm_head._petri_fp8_fast is True
    use_bf16(bf16_tiny)
    assert bf16_tiny.sample(SampleRequest([5, 9, 17], layouts, settings, seed=0)).sampler == "eager"


def test_fp8_survives_the_compiled_tier_switching_its_experts(bf16_tiny):
    from petri.engine.cuda.compiled_tier import uncompile_regions
    from petri.engine.cuda.fused.batch1_experts import _small_batch_forward
    from petri.engine.torch.model import compile_for_sampling

    experts = bf16_tiny.model.model.decoder.layers[0].experts
    use_fp8(bf16_tiny)
    compile_for_sampling(bf16_tiny, backend="eager")  # installs its experts op: FP8's comes back on top
    assert experts.forward.__func__.__name__ == "_experts_forward"
    assert bf16_tiny.device_type == "cpu-compiled-fp8"
    use_bf16(bf16_tiny)  # the compiled tier's experts op again (its small-batch forward, the default)
    assert experts.forward.__func__ is _small_batch_forward
    use_fp8(bf16_tiny)
    uncompile_regions(bf16_tiny)  # the compiled tier off, the FP8 tier still on
    assert experts.forward.__func__.__name__ == "_experts_forward" and precision_of(bf16_tiny) == "fp8"
    use_bf16(bf16_tiny)
    assert "forward" not in vars(experts)


def test_fp8_is_refused_with_a_reason(tiny_lm, bf16_tiny):
    assert "bf16" in fp8_reason(tiny_lm)  # float32 on the CPU
    with pytest.raises(ValueError, match="precision fp8 needs a bf16 model"):
        set_precision(copy.copy(tiny_lm), "fp8")
    with pytest.raises(ValueError, match="precision must be one of bf16, fp8, fp8-fast, got 'fp16'"):
        set_precision(bf16_tiny, "fp16")
    assert fp8_reason(bf16_tiny) is None


def test_precision_option_reaches_the_model_spec():
    pytest.importorskip("pydantic")  # the options read the configuration; the GPU machine's image has no pydantic
    from petri.app.model_options import add_model_arguments, spec_from_args

    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    assert spec_from_args(parser.parse_args([])).precision == "bf16"
    assert spec_from_args(parser.parse_args(["--precision", "fp8"])).precision == "fp8"
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "int4"])


# ---- on an FP8 GPU -----------------------------------------------------------------------------------

@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU with FP8 matrix units and Triton")
def test_torch_scaled_mm_equals_the_dequantized_reference_on_gpu():
    torch.manual_seed(3)
    for m, n, k in ((1, 64, 128), (257, 2816, 704), (3072, 1408, 2816)):
        xq, xs = quantize_rows(torch.randn(m, k, device="cuda").bfloat16())
        wq, ws = quantize_rows(torch.randn(n, k, device="cuda").bfloat16())
        got = scaled_matmul(xq, xs, wq, ws).float()
        reference = scaled_matmul_reference(xq, xs, wq, ws, torch.float32)
        assert float((got - reference).norm() / reference.norm()) < 5e-3  # bf16 output rounding


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU with FP8 matrix units and Triton")
def test_torch_scaled_grouped_mm_equals_the_dequantized_reference_on_gpu():
    torch.manual_seed(4)
    experts, n, k = 16, 1408, 2816
    counts = torch.randint(0, 40, (experts,))
    counts[3] = 0  # an empty group
    offsets = torch.cumsum(counts, 0).to(torch.int32).cuda()
    xq, xs = quantize_rows(torch.randn(int(counts.sum()), k, device="cuda").bfloat16())
    wq, ws = quantize_rows(torch.randn(experts, n, k, device="cuda").bfloat16())
    got = scaled_grouped(xq, xs, wq, ws, offsets).float()
    reference = scaled_grouped_reference(xq, xs, wq, ws, offsets, torch.float32)
    assert float((got - reference).norm() / reference.norm()) < 5e-3


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU with FP8 matrix units and Triton")
def test_fp8_fast_path_runs_in_graphs_and_names_the_tier_on_gpu(bf16_tiny):
    from petri.engine.cuda.fast_sampler import run_sampler_fast

    bf16_tiny.model.to("cuda")
    lm = replace(bf16_tiny, device=torch.device("cuda"))
    use_fp8(lm)
    layouts = [[AnchorSpan("a", 3, (11,))]] * 3
    settings = SamplerSettings(max_denoising_steps=4, stability_threshold=None, confidence_threshold=None)
    first = run_sampler_fast(lm, [5, 9, 17], layouts, settings, seed=5)
    again = run_sampler_fast(lm, [5, 9, 17], layouts, settings, seed=5)
    assert first.sampler == "fast+fp8"
    assert (first.argmax == again.argmax).all()  # reproducible under graph replay


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU with FP8 matrix units and Triton")
@pytest.mark.parametrize("launch", [(None, None), (1, 1), (2, 4), (4, 2), (8, 8)], ids=lambda v: f"{v[0]}rows-{v[1]}warps")
def test_triton_quantization_is_bit_equal_to_the_torch_ops_on_gpu(launch):
    from petri.engine.cuda.fp8_tier.fp8_kernels import gelu_gate_quantized, quantize_rows_triton

    rows_per_program, warps = launch
    torch.manual_seed(5)
    for rows, width in ((1, 1), (7, 100), (300, 704), (256, 2816), (64, 8192)):
        x = (torch.randn(rows, width, device="cuda") * torch.logspace(-4, 4, rows, device="cuda")[:, None]).bfloat16()
        x[0] = 0  # an all-zero row
        if launch == (None, None):
            q, scale = quantize_rows(x)  # the Triton kernel (a 2-D CUDA tensor)
        else:
            q, scale = quantize_rows_triton(x, INV_FP8_MAX, FP8_MAX, MIN_SCALE, rows_per_program=rows_per_program,
                                            num_warps=warps)
        q_ref, scale_ref = quantize_rows_torch(x)
        assert torch.equal(scale, scale_ref), (rows, width)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), (rows, width)
    projected = torch.randn(501, 2 * 704, device="cuda").bfloat16() * 3  # 501: a last program with rows missing

    def fused(pairs=None):
        if launch == (None, None):
            return activation_quantized(projected, "gelu_pytorch_tanh", pairs=pairs)
        return gelu_gate_quantized(projected, INV_FP8_MAX, FP8_MAX, MIN_SCALE, pairs, rows_per_program=rows_per_program,
                                   num_warps=warps)

    q, scale = fused()
    q_ref, scale_ref = quantize_rows_torch(gated_activation(projected, "gelu_pytorch_tanh"))
    assert torch.equal(scale, scale_ref) and torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    pairs = torch.where(torch.rand(501, device="cuda") < 0.4, torch.arange(501, device="cuda"), -1).to(torch.int32)
    pairs[8:16] = -1  # a whole program of padding at 8 rows per program
    used = pairs >= 0  # padding rows of the small-batch layout (-1) are skipped, the others unchanged
    q_skip, scale_skip = fused(pairs)
    assert torch.equal(scale_skip[used], scale_ref[used])
    assert torch.equal(q_skip[used].view(torch.uint8), q_ref[used].view(torch.uint8))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU with FP8 matrix units and Triton")
def test_triton_quantization_divides_as_torch_does_on_every_bf16_value_on_gpu():
    """Every finite bf16 value (-0 included) quantized in rows of neighbouring values (each row's
    quotients spread over e4m3's whole range, rounding boundaries included) and in shuffled rows
    (most quotients far below e4m3's smallest value), against the torch ops (IEEE division)."""
    from petri.engine.cuda.fp8_tier.fp8_kernels import quantize_rows_triton

    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    values = bits.view(torch.bfloat16)
    values = values[torch.isfinite(values)]
    values = values[: values.numel() // 512 * 512].cuda()
    generator = torch.Generator(device="cuda").manual_seed(3)
    for x in (values.view(-1, 512), values[torch.randperm(values.numel(), device="cuda", generator=generator)].view(-1, 512),
              values.view(-1, 512)[:, 1:]):
        q, scale = quantize_rows_triton(x.contiguous(), INV_FP8_MAX, FP8_MAX, MIN_SCALE)
        q_ref, scale_ref = quantize_rows_torch(x)
        assert torch.equal(scale, scale_ref)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), int((q.view(torch.uint8) != q_ref.view(torch.uint8)).sum())


def test_fp8_fast_path_names_the_tier_on_cpu(bf16_tiny):
    from petri.engine.cuda.fast_sampler import run_sampler_fast

    layouts = [[AnchorSpan("a", 3, (11,))]] * 2
    settings = SamplerSettings(max_denoising_steps=2, stability_threshold=None, confidence_threshold=None)
    use_fp8(bf16_tiny)
    assert run_sampler_fast(bf16_tiny, [5, 9, 17], layouts, settings, seed=1).sampler == "fast+fp8"
    use_bf16(bf16_tiny)
    assert run_sampler_fast(bf16_tiny, [5, 9, 17], layouts, settings, seed=1).sampler == "fast"
