"""The stacked projections (petri.engine.cuda.fused.stacked_projections): a group's members give their own
products (against their unstacked linears, in float64), from one product of the stacked weight
when called as the library calls them and from their own call of it otherwise; the weights become
views without a copy; the compiled tier installs and undoes the groups, Dynamo traces them as one
product without a graph break; in the FP8 tier the stacked layers are what is quantized, with the
same logits as the members quantized one by one; on a GPU (skipped elsewhere) the same in FP8
through ``torch._scaled_mm``."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.cuda.fp8_tier.fp8 import dense_targets, precision_of, set_precision
from petri.engine.cuda.fused.stacked_projections import (
    StackedProjections,
    is_stacked_member,
    projection_groups,
    stack_projections,
    stacked_groups,
)
from petri.engine.torch.tiny import tiny_random_model
from tiny_support import tiny_logits

CUDA = torch.cuda.is_available()


def _linears(widths=(4, 2, 3), inputs=6, dtype=torch.float64):
    torch.manual_seed(sum(widths))
    return [torch.nn.Linear(inputs, width, bias=False, dtype=dtype) for width in widths]


def _counting(group):
    calls = []
    group.stacked.register_forward_hook(lambda *_: calls.append(1))
    return calls


def test_members_called_in_order_share_one_product_and_each_gets_its_own():
    members = _linears()
    x = torch.randn(5, 6, dtype=torch.float64)
    want = [torch.nn.functional.linear(x, m.weight.detach().clone()) for m in members]
    group = StackedProjections(members)
    calls = _counting(group)
    got = [group.output(index, x) for index in range(3)]
    assert len(calls) == 1 and group._pending is None
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)


def test_a_member_called_out_of_order_or_with_another_input_computes_its_own():
    members = _linears()
    x, other = torch.randn(5, 6, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    group = StackedProjections(members)
    calls = _counting(group)
    torch.testing.assert_close(group.output(2, x), torch.nn.functional.linear(x, members[2].weight), rtol=0, atol=1e-12)
    assert len(calls) == 1
    group.output(0, x)
    # the same values in another tensor object: the pending product is not taken
    torch.testing.assert_close(group.output(1, other), torch.nn.functional.linear(other, members[1].weight), rtol=0, atol=1e-12)
    assert len(calls) == 3
    group.output(0, x)
    torch.testing.assert_close(group.output(2, x), torch.nn.functional.linear(x, members[2].weight), rtol=0, atol=1e-12)
    assert len(calls) == 5  # member 2 skipped member 1's turn: computed anew


def test_the_weights_become_views_of_the_stacked_one_with_their_values():
    members = _linears()
    before = [m.weight.detach().clone() for m in members]
    parameters = [m.weight for m in members]
    group = StackedProjections(members)
    stacked = group.stacked.weight
    assert stacked.shape == (9, 6)
    start = 0
    for member, old, parameter in zip(members, before, parameters):
        assert member.weight is parameter  # the same parameter object (tied modules keep seeing it)
        assert torch.equal(member.weight, old)
        assert member.weight.untyped_storage().data_ptr() == stacked.untyped_storage().data_ptr()
        assert member.weight.data_ptr() == stacked[start].data_ptr()
        start += old.shape[0]


def test_the_compiled_tier_stacks_the_decoder_and_undoes_it():
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=3)
    want = tiny_logits(lm)
    layers = lm.model.model.decoder.layers
    # a global layer (q, k), a sliding one (q, k, v), two MLPs, the self-conditioning MLP
    assert [len(g) for g in projection_groups(lm.model, layers)] == [3, 2, 2, 2, 2]
    compile_regions(lm, backend="eager")
    assert len(stacked_groups(lm.model)) == 5
    assert all(is_stacked_member(m) for g in projection_groups(lm.model, layers) for m in g)
    torch.testing.assert_close(tiny_logits(lm), want, rtol=1e-5, atol=1e-5)
    uncompile_regions(lm)
    assert stacked_groups(lm.model) == []
    assert not any("forward" in vars(m) for g in projection_groups(lm.model, layers) for m in g)
    compile_regions(lm, backend="eager", stacked_projections=False)
    assert stacked_groups(lm.model) == []
    uncompile_regions(lm)
    torch.testing.assert_close(tiny_logits(lm), want, rtol=1e-5, atol=1e-5)


def test_dynamo_traces_a_layer_with_one_product_per_group_and_no_break():
    import torch._dynamo

    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=3)
    mlp = lm.model.model.decoder.layers[0].mlp
    x = torch.randn(2, 5, mlp.gate_proj.in_features)
    want = mlp(x)
    stack_projections(lm, lm.model.model.decoder.layers)
    explained = torch._dynamo.explain(mlp.forward)(x)
    assert explained.graph_break_count == 0
    code = explained.graphs[0].code
    assert code.count("torch._C._nn.linear(") == 2  # the stacked gate·up, then down
    torch._dynamo.reset()
    got = torch.compile(mlp.forward, backend="aot_eager", fullgraph=True)(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert stacked_groups(lm.model)[1]._pending is None  # nothing kept after the call


@pytest.fixture()
def bf16_tiny():
    return tiny_random_model(canvas_length=16, seed=3, dtype=torch.bfloat16)


def test_the_fp8_tier_quantizes_the_stacked_layers_with_the_members_logits(bf16_tiny):
    unstacked = replace(bf16_tiny, model=copy.deepcopy(bf16_tiny.model))
    set_precision(unstacked, "fp8")
    want = tiny_logits(unstacked)
    set_precision(bf16_tiny, "fp8")
    compile_regions(bf16_tiny, backend="eager")  # the FP8 tier off around the install, then on again
    assert precision_of(bf16_tiny) == "fp8"
    names = [name for name, _ in dense_targets(bf16_tiny.model)]
    attention = "model.decoder.layers.{}.self_attn.{}"
    assert "+".join(attention.format(0, p) for p in ("q_proj", "k_proj", "v_proj")) in names  # sliding
    assert "+".join(attention.format(1, p) for p in ("q_proj", "k_proj")) in names  # global: no v_proj
    assert [n for n in names if "+" not in n and n.endswith(("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))] == []
    for group in stacked_groups(bf16_tiny.model):
        assert "_petri_fp8_weight" in vars(group.stacked)
        assert not any("_petri_fp8_weight" in vars(m) for m in group.members)
    # per-row scales: the stacked quantization is the members' one; the products equal up to the
    # float32 summation of the CPU reference
    torch.testing.assert_close(tiny_logits(bf16_tiny), want, rtol=2e-2, atol=2e-2)
    uncompile_regions(bf16_tiny)
    assert precision_of(bf16_tiny) == "fp8" and stacked_groups(bf16_tiny.model) == []
    assert all("_petri_fp8_weight" in vars(m) for _, m in dense_targets(bf16_tiny.model))


def test_stacking_with_the_fp8_tier_on_is_refused(bf16_tiny):
    set_precision(bf16_tiny, "fp8")
    with pytest.raises(RuntimeError, match="with the FP8 tier off \\(precision is fp8\\)"):
        stack_projections(bf16_tiny, bf16_tiny.model.model.decoder.layers)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_stacked_products_on_gpu(precision):
    """The tiny model in bf16 on the GPU, eager layers, stacked (through ``stack_projections`` with
    the FP8 tier switched off around it, as the compiled tier does) against unstacked: the FP8
    tier's logits equal (``torch._scaled_mm`` with per-row scales), bf16's within rounding."""
    lm = tiny_random_model(canvas_length=16, seed=5)
    lm = replace(lm, model=lm.model.to("cuda", torch.bfloat16), device=torch.device("cuda"), dtype=torch.bfloat16)
    set_precision(lm, precision)
    torch.manual_seed(0)
    canvas = torch.randint(4, lm.vocab_size, (2, lm.canvas_length), device="cuda")
    prompt = torch.tensor([[5, 9, 17, 33]] * 2, device="cuda")
    with torch.no_grad():
        want = lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()
        set_precision(lm, "bf16")
        stack_projections(lm, lm.model.model.decoder.layers)
        set_precision(lm, precision)
        got = lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()
    if precision == "fp8":
        assert torch.equal(got, want)
    else:
        assert float((got - want).norm() / want.norm()) < 1e-2
