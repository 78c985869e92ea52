"""The fused norms (petri.engine.cuda.fused.fused_norms): the decoder layer's forward with its norms as two ops
gives the library's logits bit for bit through the reference ops (float32 and bf16, norm weights,
router scale and layer scalar drawn at random so that a swapped weight shows); in the FP8 tier the
MLP and the experts take the op's quantized rows, with the logits of the library's layer in that
tier; the ops pass ``torch.library.opcheck`` (their fake forms match); the compiled tier compiles
the fused forward and leaves it out, saying why, when the fused router is off or a layer does not
fit; on a GPU (skipped elsewhere) the Triton kernels against the reference ops at the full-size
width, bf16 and quantized."""

from __future__ import annotations

import logging

import pytest
import torch

from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.cuda.fp8_tier import fp8 as fp8_module
from petri.engine.cuda.fp8_tier import fp8_mlp
from petri.engine.cuda.fp8_tier.fp8 import dequantize, quantize_rows, set_precision
from petri.engine.cuda.fused.fused_norms import (
    NORMS,
    feedforward_inputs,
    feedforward_inputs_reference,
    feedforward_inputs_triton,
    fuse_norms_forward,
    fuse_norms_reason,
    fused_norms_forward,
    layer_output,
    layer_output_reference,
    layer_output_triton,
)
from petri.engine.torch.tiny import tiny_random_model
from rounding_support import assert_close_bf16
from tiny_support import tiny_logits

CUDA = torch.cuda.is_available()


def _randomise_norms(lm, seed=11):
    """Norm weights, router scales and layer scalars away from their initial ones, each different."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in lm.model.model.decoder.layers:
            for name in (*NORMS, "input_layernorm"):
                weight = getattr(layer, name).weight
                weight.copy_(1 + 0.5 * torch.randn(weight.shape, generator=generator))
            layer.router.scale.copy_(1 + 0.5 * torch.randn(layer.router.scale.shape, generator=generator))
            layer.layer_scalar.fill_(0.5 + float(torch.rand(1, generator=generator)))
    return lm


def _tiny(dtype=torch.float32):
    return _randomise_norms(tiny_random_model(canvas_length=16, num_layers=2, seed=3, dtype=dtype))


def _install(lm):
    for layer in lm.model.model.decoder.layers:
        layer.forward = fused_norms_forward(layer)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_forward_is_the_library_layer_bit_for_bit(dtype):
    lm = _tiny(dtype)
    want = tiny_logits(lm)
    _install(lm)
    assert torch.equal(tiny_logits(lm), want)


def test_the_reference_ops_by_hand():
    """One row of width 2 worked by hand: norms of (3, 4) and (1, 1), weights 1 and 2."""
    attention = torch.tensor([[3.0, 4.0]])
    residual = torch.tensor([[1.0, -1.0]])
    ones, twos = torch.ones(2), torch.full((2,), 2.0)
    r, pre, pre_2, router = feedforward_inputs_reference(attention, residual, ones, twos, ones, twos, 0.5, 0.0)
    # rms(3, 4) = sqrt(12.5): normed (0.8485, 1.1314); r = (1.8485, 0.1314)
    normed = torch.tensor([3.0, 4.0]) / 12.5 ** 0.5
    want_r = torch.tensor([1.0, -1.0]) + normed
    rms_r = float((want_r.pow(2).mean()) ** 0.5)
    torch.testing.assert_close(r[0], want_r)
    torch.testing.assert_close(pre[0], 2 * want_r / rms_r)
    torch.testing.assert_close(pre_2[0], want_r / rms_r)
    torch.testing.assert_close(router[0], want_r / rms_r * 2 * 0.5)
    out = layer_output_reference(torch.tensor([[1.0, 1.0]]), torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 1.0]]),
                                 ones, ones, twos, torch.tensor([3.0]), 0.0)
    # norm(1, 1) = (1, 1); norm(2, 0) = (√2, 0); sum (1+√2, 1), its rms; times 2; plus (0, 1); times 3
    combined = torch.tensor([1 + 2 ** 0.5, 1.0])
    want = (torch.tensor([0.0, 1.0]) + 2 * combined / float(combined.pow(2).mean() ** 0.5)) * 3
    torch.testing.assert_close(out[0], want)


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "unstacked"])
def test_the_fp8_tier_feeds_the_op_s_quantized_rows_with_the_library_logits(monkeypatch, stacked):
    """The experts and the MLP take the op's quantized rows; with the gate and up stacked the MLP's
    activation and the down product's quantization are the ``petri::gelu_gate_quantized`` op
    (unstacked: the MLP's own ops). Either way the library layer's logits in that tier, bit for bit."""
    lm = _tiny(torch.bfloat16)
    set_precision(lm, "fp8")
    compile_regions(lm, backend="eager", fused_norms=False, stacked_projections=stacked)
    want = tiny_logits(lm)
    uncompile_regions(lm)
    seen, activations = [], []
    experts_fp8, gelu_op = fp8_module.experts_fp8, fp8_mlp.gelu_gate_quantized_op

    def spy(*args, **kwargs):
        seen.append(kwargs.get("hidden_scale", args[9] if len(args) > 9 else None))
        return experts_fp8(*args, **kwargs)

    def gelu_spy(projected):
        activations.append(projected.shape)
        return gelu_op(projected)

    monkeypatch.setattr(fp8_module, "experts_fp8", spy)
    monkeypatch.setattr(fp8_mlp, "gelu_gate_quantized_op", gelu_spy)
    compile_regions(lm, backend="eager", stacked_projections=stacked)
    got = tiny_logits(lm)
    assert seen and all(scale is not None and scale.dtype == torch.float32 for scale in seen)
    intermediate = lm.model.config.get_text_config().intermediate_size
    layers = len(lm.model.model.decoder.layers)
    if stacked:  # one call per layer of the canvas's rows, gate and up side by side
        assert len(activations) == layers and all(shape[-1] == 2 * intermediate for shape in activations)
    else:
        assert activations == []
    assert torch.equal(got, want)


def test_the_gelu_gate_op_is_the_activation_quantized_and_its_fake_matches():
    torch.manual_seed(2)
    projected = torch.randn(6, 2 * 40, dtype=torch.bfloat16) * 3
    q, scale = fp8_mlp.gelu_gate_quantized_op(projected)
    gate, up = projected.float().split(40, dim=-1)
    activation = (torch.nn.functional.gelu(gate.bfloat16(), approximate="tanh") * up.bfloat16())  # the MLP's ops
    want_q, want_scale = quantize_rows(activation)
    assert q.shape == (6, 40) and torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(scale, want_scale)
    torch.library.opcheck(fp8_mlp.gelu_gate_quantized_op, (projected,), test_utils=("test_schema", "test_faketensor"))


def test_the_ops_fake_forms_match_their_results():
    torch.manual_seed(0)
    rows, width = 5, 24
    attention, residual = torch.randn(rows, width, dtype=torch.bfloat16), torch.randn(rows, width, dtype=torch.bfloat16)
    weights = [torch.rand(width, dtype=torch.bfloat16) + 0.5 for _ in range(4)]
    for quantize in (False, True):
        torch.library.opcheck(feedforward_inputs, (attention, residual, *weights, 0.25, 1e-6, quantize),
                              test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(layer_output, (attention, residual, attention * 2, *weights[:3],
                                         torch.tensor([0.7], dtype=torch.bfloat16), 1e-6),
                          test_utils=("test_schema", "test_faketensor"))


def test_quantized_inputs_are_the_rows_quantized():
    torch.manual_seed(1)
    attention, residual = torch.randn(4, 32, dtype=torch.bfloat16), torch.randn(4, 32, dtype=torch.bfloat16)
    weights = [torch.rand(32, dtype=torch.bfloat16) + 0.5 for _ in range(4)]
    plain = feedforward_inputs(attention, residual, *weights, 0.25, 1e-6, False)
    quantized = feedforward_inputs(attention, residual, *weights, 0.25, 1e-6, True)
    assert plain[2].numel() == plain[4].numel() == 0
    for (q, scale), bf16 in (((quantized[1], quantized[2]), plain[1]), ((quantized[3], quantized[4]), plain[3])):
        want_q, want_scale = quantize_rows(bf16)
        assert q.dtype == torch.float8_e4m3fn and torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
        assert torch.equal(scale, want_scale)
    assert torch.equal(quantized[0], plain[0]) and torch.equal(quantized[5], plain[5])


def test_the_compiled_tier_compiles_the_fused_forward_and_undoes_it():
    lm = _tiny()
    want = tiny_logits(lm)
    compile_regions(lm, backend="eager")
    layers = lm.model.model.decoder.layers
    compiled = [layer.forward for layer in layers]
    assert all(getattr(f, "layer_index", None) == i for i, f in enumerate(compiled))
    torch.testing.assert_close(tiny_logits(lm), want, rtol=1e-5, atol=1e-5)
    uncompile_regions(lm)
    assert not any("forward" in vars(layer) for layer in layers)
    assert torch.equal(tiny_logits(lm), want)


def test_the_compiled_tier_leaves_the_fused_norms_out_and_says_why(caplog, monkeypatch):
    lm = _tiny()
    traced = []
    monkeypatch.setattr("petri.engine.cuda.compiled_tier.fused_norms_forward",
                        lambda layer, **kwargs: traced.append(layer) or fused_norms_forward(layer, **kwargs))
    with caplog.at_level(logging.WARNING, logger="petri.engine.cuda.compiled_tier"):
        compile_regions(lm, backend="eager", fused_router=False)
    assert "fused norms off: the fused router is off" in caplog.text and traced == []
    uncompile_regions(lm)
    compile_regions(lm, backend="eager")
    assert len(traced) == len(lm.model.model.decoder.layers)
    uncompile_regions(lm)
    lm.model.model.decoder.layers[1].post_feedforward_layernorm_2.eps = 1e-3
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="petri.engine.cuda.compiled_tier"):
        compile_regions(lm, backend="eager")
    assert "fused norms off: post_feedforward_layernorm_2's eps differs from input_layernorm's" in caplog.text


def test_the_reason_names_what_a_layer_lacks():
    lm = _tiny()
    layer = lm.model.model.decoder.layers[0]
    assert fuse_norms_reason(layer) is None
    del layer.pre_feedforward_layernorm_2
    assert fuse_norms_reason(layer) == "the layer has no pre_feedforward_layernorm_2"
    layer = lm.model.model.decoder.layers[1]
    layer.router.norm.weight = torch.nn.Parameter(torch.ones(4))
    assert fuse_norms_reason(layer) == "router.norm has a weight"


def test_the_forward_has_the_library_signature():
    assert fuse_norms_forward.__code__.co_varnames[:5] == (
        "self", "hidden_states", "position_embeddings", "attention_mask", "position_ids")


# ---- on a GPU: the Triton kernels -------------------------------------------------------------------

def _gpu_rows(rows, width, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    draw = lambda *shape, scale=1.0: (torch.randn(*shape, device="cuda", generator=generator) * scale).to(torch.bfloat16)  # noqa: E731
    weights = [(1 + draw(width, scale=0.5)) for _ in range(6)]
    return draw(rows, width, scale=3.0), draw(rows, width), weights


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("width", [64, 2816])
def test_the_kernels_compute_the_reference_on_gpu(width):
    attention, residual, weights = _gpu_rows(300, width, seed=width)
    args = (attention, residual, *weights[:4], width ** -0.5, 1e-6)
    want = feedforward_inputs_reference(*args)
    got = feedforward_inputs_triton(*args, quantize=False)
    for g, w in zip((got[0], got[1], got[3], got[5]), want):
        assert_close_bf16(g, w)
    assert got[2].numel() == got[4].numel() == 0
    quantized = feedforward_inputs_triton(*args, quantize=True)
    for q, scale, bf16 in ((quantized[1], quantized[2], want[1]), (quantized[3], quantized[4], want[2])):
        want_q, want_scale = quantize_rows(bf16)
        torch.testing.assert_close(scale, want_scale, rtol=2 ** -7, atol=0)
        torch.testing.assert_close(dequantize(q, scale), dequantize(want_q, want_scale), rtol=2 ** -3, atol=1e-3)
    mlp, experts = attention * 0.7, residual * -1.3
    scalar = torch.tensor([0.8], device="cuda", dtype=torch.bfloat16)
    out_args = (mlp, experts, residual, *weights[3:6], scalar, 1e-6)
    assert_close_bf16(layer_output_triton(*out_args), layer_output_reference(*out_args))


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_the_ops_take_the_kernels_on_gpu_and_the_layer_stays_close():
    """The tiny model in bf16 on the GPU, its layers' forward fused (the ops' Triton path) against
    the library's: logits within bf16 rounding."""
    from dataclasses import replace

    lm = _tiny(torch.bfloat16)
    lm = replace(lm, model=lm.model.to("cuda"), device=torch.device("cuda"))
    torch.manual_seed(0)
    canvas = torch.randint(4, lm.vocab_size, (2, lm.canvas_length), device="cuda")
    prompt = torch.tensor([[5, 9, 17, 33]] * 2, device="cuda")
    with torch.no_grad():
        want = lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()
        _install(lm)
        got = lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()
    assert float((got - want).norm() / want.norm()) < 1e-2
