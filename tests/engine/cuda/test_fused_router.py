"""The routers' fused top-k (petri.engine.cuda.fused.fused_router): on the CPU the op is transformers' router
after its scores, bit for bit (the reference is the library's own router module); the compiled tier
installs it in the decoder's and the encoder's layers and undoes it; on a GPU (skipped elsewhere)
the Triton kernel chooses the reference's experts, in its order, with its weights up to rounding."""

from __future__ import annotations

import pytest
import torch

from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.cuda.fused.fused_router import fuse_routers, route_top_k_reference, route_top_k_triton, unfuse_routers
from petri.engine.torch.decoder_hooks import encoder_layers
from petri.engine.torch.tiny import tiny_random_model

CUDA = torch.cuda.is_available() and HAVE_TRITON


def test_route_top_k_reference_hand_worked():
    # softmax of (ln 1, ln 3, ln 2, ln 4) over 1 + 3 + 2 + 4 = 10: 0.1, 0.3, 0.2, 0.4; top 2: experts 3, 1
    scores = torch.tensor([[1.0, 3.0, 2.0, 4.0]]).log()
    probabilities, weights, index = route_top_k_reference(scores, 2, torch.tensor([1.0, 2.0, 1.0, 0.5]))
    torch.testing.assert_close(probabilities, torch.tensor([[0.1, 0.3, 0.2, 0.4]]))
    assert index.tolist() == [[3, 1]]
    # 0.4 / 0.7 · 0.5 and 0.3 / 0.7 · 2
    torch.testing.assert_close(weights, torch.tensor([[0.4 / 0.7 * 0.5, 0.3 / 0.7 * 2.0]]))


def test_the_fused_router_is_the_librarys_router_on_cpu():
    lm = tiny_random_model(canvas_length=16, num_layers=2, num_experts=8, top_k_experts=3, seed=4)
    layers = lm.model.model.decoder.layers
    router = layers[0].router
    with torch.no_grad():
        router.per_expert_scale.copy_(torch.linspace(0.5, 1.5, 8))
        hidden = torch.randn(40, router.hidden_size)
        want = router(hidden)
        assert fuse_routers(layers) is None
        got = router(hidden)
    unfuse_routers(layers)
    assert "forward" not in vars(router)
    for got_part, want_part in zip(got, want):
        assert torch.equal(got_part, want_part)


def test_the_compiled_tier_fuses_every_router_and_undoes_it():
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=4)
    routers = [layer.router for layer in (*lm.model.model.decoder.layers, *encoder_layers(lm.model))]
    compile_regions(lm, backend="eager")
    assert all("forward" in vars(router) for router in routers)
    uncompile_regions(lm)
    assert not any("forward" in vars(router) for router in routers)
    compile_regions(lm, backend="eager", fused_router=False)
    assert not any("forward" in vars(router) for router in routers)
    uncompile_regions(lm)


def test_a_router_without_its_parts_is_left_alone():
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=4)
    layers = lm.model.model.decoder.layers
    del layers[1].router.per_expert_scale
    assert fuse_routers(layers) == "the router has no per_expert_scale"
    assert not any("forward" in vars(layer.router) for layer in layers)


@pytest.mark.skipif(not CUDA, reason="the Triton kernel needs CUDA")
@pytest.mark.parametrize("tokens,experts,top_k", [(256, 128, 8), (3072, 128, 8), (37, 100, 3), (5, 4, 4)])
def test_triton_router_chooses_the_references_experts_on_gpu(tokens, experts, top_k):
    """float32 scores (ties improbable): the same experts in the same order, weights and
    probabilities within float32 rounding of the reference."""
    torch.manual_seed(tokens)
    scores = torch.randn(tokens, experts, device="cuda") * 3
    scale = torch.rand(experts, device="cuda").bfloat16() + 0.5
    probabilities, weights, index = route_top_k_triton(scores, top_k, scale)
    want_probabilities, want_weights, want_index = route_top_k_reference(scores, top_k, scale)
    assert torch.equal(index, want_index)
    torch.testing.assert_close(weights, want_weights, rtol=2e-6, atol=0)
    torch.testing.assert_close(probabilities, want_probabilities, rtol=2e-6, atol=1e-9)


@pytest.mark.skipif(not CUDA, reason="the Triton kernel needs CUDA")
def test_triton_router_on_bf16_scores_with_ties_chooses_equal_probabilities_on_gpu():
    """bf16 scores tie often; where two experts tie for the last place either may be chosen, so the
    chosen probabilities (not the experts) must be the reference's, and the lowest index goes first."""
    torch.manual_seed(1)
    scores = (torch.randn(512, 128, device="cuda") * 3).bfloat16()
    scale = torch.ones(128, device="cuda").bfloat16()
    probabilities, _, index = route_top_k_triton(scores, 8, scale)
    want_probabilities, _, want_index = route_top_k_reference(scores, 8, scale)
    chosen = probabilities.gather(1, index).sort(dim=1, descending=True).values
    want = want_probabilities.gather(1, want_index).sort(dim=1, descending=True).values
    torch.testing.assert_close(chosen, want, rtol=2e-6, atol=0)
    tied = probabilities.gather(1, index[:, :-1]) == probabilities.gather(1, index[:, 1:])
    assert bool((index[:, :-1][tied] < index[:, 1:][tied]).all())
