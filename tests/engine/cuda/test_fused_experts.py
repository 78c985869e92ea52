"""The fused experts op (``petri.engine.cuda.fused.fused_experts``) against a per-token loop written here, against
transformers' own experts module, and (on a GPU) the Triton kernels against the plain-torch path."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import DiffusionGemmaForBlockDiffusion

from petri.engine.cuda.fused.batch1_experts import moe_experts_small_batch
from petri.engine.cuda.fused.fused_experts import experts_reference, experts_triton, fuse_experts, moe_experts, route, unfuse_experts
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.torch.configs import small_diffusion_gemma_config

EXPERTS, TOP_K = 8, 3


def per_token_loop(hidden, top_k_index, top_k_weights, gate_up, down):
    """Σ_k w[t,k] · down_e(gelu_tanh(gate_e · x_t) ⊙ (up_e · x_t)) token by token, in float64."""
    width = down.shape[-1]
    out = torch.zeros(hidden.shape, dtype=torch.float64)
    for t in range(hidden.shape[0]):
        x = hidden[t].double()
        for k in range(top_k_index.shape[1]):
            e = int(top_k_index[t, k])
            gate = gate_up[e, :width].double() @ x
            up = gate_up[e, width:].double() @ x
            out[t] += float(top_k_weights[t, k]) * (down[e].double() @ (F.gelu(gate, approximate="tanh") * up))
    return out


def random_routing(tokens: int, experts: int = EXPERTS, top_k: int = TOP_K, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    index = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=generator)
    return index, weights / weights.sum(-1, keepdim=True)


@pytest.fixture(scope="module")
def model() -> DiffusionGemmaForBlockDiffusion:
    torch.manual_seed(0)
    config = small_diffusion_gemma_config(vocab_size=128, canvas_length=12, num_experts=EXPERTS, top_k_experts=TOP_K)
    return DiffusionGemmaForBlockDiffusion(config).eval()


def test_route_sorts_pairs_by_expert_hand_worked():
    # pairs (token·K + k): 0→expert 2, 1→0, 2→1, 3→3; in expert order: pairs 1, 2, 0, 3
    order, position, offsets = route(torch.tensor([[2, 0], [1, 3]]), num_experts=5)
    assert order.tolist() == [1, 2, 0, 3]
    assert position.tolist() == [2, 0, 1, 3]  # pair p sits at row position[p]
    assert offsets.tolist() == [1, 2, 3, 4, 4]  # expert 4 has no rows
    assert offsets.dtype == torch.int32


def test_route_counts_repeated_experts():
    order, position, offsets = route(torch.tensor([[1, 0], [1, 2], [0, 1]]), num_experts=3)
    experts = torch.tensor([1, 0, 1, 2, 0, 1])
    assert experts[order].tolist() == [0, 0, 1, 1, 1, 2]
    assert torch.equal(order[position], torch.arange(6))
    assert offsets.tolist() == [2, 5, 6]


def test_op_matches_a_per_token_loop(model):
    experts = model.model.decoder.layers[0].experts
    hidden = torch.randn(40, experts.hidden_dim)
    index, weights = random_routing(40)
    with torch.no_grad():
        got = moe_experts(hidden, index, weights, experts.gate_up_proj, experts.down_proj, "gelu_pytorch_tanh")
    expected = per_token_loop(hidden, index, weights, experts.gate_up_proj.detach(), experts.down_proj.detach())
    assert got.dtype == hidden.dtype and got.shape == hidden.shape
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("implementation", ["grouped_mm", "eager"])
def test_op_matches_transformers_experts(model, dtype, implementation):
    module = copy.deepcopy(model.model.decoder.layers[1].experts).to(dtype)
    module.config = copy.copy(module.config)
    module.config._experts_implementation = implementation
    hidden = torch.randn(64, module.hidden_dim).to(dtype)
    index, weights = random_routing(64, seed=1)
    with torch.no_grad():
        theirs = module(hidden, index, weights)
        ours = moe_experts(hidden, index, weights, module.gate_up_proj, module.down_proj, "gelu_pytorch_tanh")
    if dtype == torch.float32:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    elif implementation == "grouped_mm":  # same bf16 ops; the float32 sum's order may differ: ≤ 1 ulp
        ulps = (ours.view(torch.int16).int() - theirs.view(torch.int16).int()).abs()
        assert int(ulps.max()) <= 1
        assert float((ulps > 0).float().mean()) < 0.01
    else:  # the loop accumulates in bf16 (index_add_): bf16-sized differences
        scale = float(theirs.float().abs().max())
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=0.02, atol=0.02 * scale)


def test_fuse_routes_the_layers_through_the_op_and_unfuse_restores(model, monkeypatch):
    fused = copy.deepcopy(model)
    calls = []
    reference = experts_reference

    def counting(*args):
        calls.append(args[0].shape)
        return reference(*args)

    monkeypatch.setattr("petri.engine.cuda.fused.fused_experts.experts_reference", counting)
    layer = fused.model.decoder.layers[0].experts
    hidden = torch.randn(5, layer.hidden_dim)
    index, weights = random_routing(5)
    with torch.no_grad():
        assert fuse_experts(fused) is None
        fused_out = layer(hidden, index, weights)
        assert calls == [hidden.shape]  # the op ran, once
        unfuse_experts(fused)
        assert "forward" not in vars(layer)
        plain_out = layer(hidden, index, weights)
        assert len(calls) == 1  # the layer's own forward again
    torch.testing.assert_close(fused_out, plain_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(plain_out, model.model.decoder.layers[0].experts(hidden, index, weights))


def test_fused_model_samples_like_the_plain_one(tmp_path):
    from petri.core.trajectory import AnchorSpan, SamplerSettings
    from petri.engine.torch.sampler import run_sampler
    from petri.engine.torch.tiny import tiny_random_model

    lm = tiny_random_model(seed=3)
    layouts = [[AnchorSpan(concept="x", start=2, token_ids=(7,))], []]
    settings = SamplerSettings(max_denoising_steps=6, stability_threshold=None, confidence_threshold=None)
    plain = run_sampler(lm, [3, 4, 5], layouts, settings, seed=11)
    assert fuse_experts(lm.model) is None
    try:
        fused = run_sampler(lm, [3, 4, 5], layouts, settings, seed=11)
    finally:
        unfuse_experts(lm.model)
    assert (fused.argmax == plain.argmax).all()
    assert (fused.accepted == plain.accepted).all()
    torch.testing.assert_close(torch.from_numpy(fused.entropy), torch.from_numpy(plain.entropy), rtol=1e-5, atol=1e-5)


def test_fuse_refuses_other_layouts_and_leaves_the_model_alone(model):
    other = copy.deepcopy(model)
    for layer in other.model.decoder.layers:
        layer.experts.config = copy.copy(layer.experts.config)
        layer.experts.config.hidden_activation = "relu"
    reason = fuse_experts(other)
    assert reason is not None and "'relu'" in reason
    assert all("forward" not in vars(layer.experts) for layer in other.model.decoder.layers)
    other.model.decoder.layers[0].experts.has_bias = True
    assert "has_bias" in fuse_experts(other)


def test_the_op_compiles_without_a_graph_break(model):
    experts = model.model.decoder.layers[0].experts
    hidden = torch.randn(16, experts.hidden_dim)
    index, weights = random_routing(16)

    def block(x):
        return moe_experts(torch.nn.functional.rms_norm(x, (x.shape[-1],)), index, weights,
                           experts.gate_up_proj, experts.down_proj, "gelu_pytorch_tanh") * 2

    with torch.no_grad():
        compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(hidden), block(hidden))


@pytest.mark.parametrize("op", [moe_experts, moe_experts_small_batch], ids=["moe_experts", "moe_experts_small_batch"])
def test_both_experts_ops_pass_torchs_opcheck(model, op):
    """Both ops come from one factory (``experts_op``): torch's own check of a custom op (its schema,
    its fake against the real output's shape and dtype, autograd registration, AOT dispatch)."""
    experts = model.model.decoder.layers[0].experts
    hidden = torch.randn(6, experts.hidden_dim)
    index, weights = random_routing(6)
    args = (hidden, index, weights, experts.gate_up_proj.detach(), experts.down_proj.detach(), "gelu_pytorch_tanh")
    torch.library.opcheck(op, args)
    torch.testing.assert_close(op(*args), experts_reference(*args))


@pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TRITON), reason="the Triton kernels need CUDA")
@pytest.mark.parametrize("tokens,hidden,experts,top_k,width", [(300, 192, 16, 4, 64), (3072, 2816, 128, 8, 704)])
def test_triton_kernels_equal_the_torch_path_on_the_gpu(tokens, hidden, experts, top_k, width):
    torch.manual_seed(0)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    scores = torch.randn(tokens, experts, device="cuda").softmax(-1)
    weights, index = scores.topk(top_k, dim=-1)
    gate_up = (torch.randn(experts, 2 * width, hidden, device="cuda") * hidden**-0.5).to(torch.bfloat16)
    down = (torch.randn(experts, hidden, width, device="cuda") * width**-0.5).to(torch.bfloat16)
    ours = experts_triton(x, index, weights, gate_up, down, "gelu_pytorch_tanh")
    reference = experts_reference(x, index, weights, gate_up, down, "gelu_pytorch_tanh")
    assert torch.equal(ours, reference)


def every_bfloat16(device: str) -> torch.Tensor:
    """All 65,536 bf16 bit patterns but the NaNs, as (256, 255)-ish rows: (R, W) bf16."""
    values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    values = values[~torch.isnan(values)]
    return values[: (values.numel() // 256) * 256].view(-1, 256).to(device)


def test_gated_activation_torch_path_is_transformers_gate():
    gate, up = torch.randn(7, 16).to(torch.bfloat16), torch.randn(7, 16).to(torch.bfloat16)
    from petri.engine.cuda.fused.fused_experts import gated_activation

    got = gated_activation(torch.cat([gate, up], dim=1), "gelu_pytorch_tanh")
    assert torch.equal(got, F.gelu(gate, approximate="tanh") * up)


@pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TRITON), reason="the Triton kernels need CUDA")
def test_gelu_gate_kernel_equals_torch_on_every_bfloat16_input():
    from petri.engine.cuda.fused.fused_experts import gated_activation

    gate = every_bfloat16("cuda")
    ones = torch.ones_like(gate)
    got = gated_activation(torch.cat([gate, ones], dim=1), "gelu_pytorch_tanh")
    expected = F.gelu(gate, approximate="tanh")
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16)), int((got != expected).sum())
    up = torch.randn_like(gate, dtype=torch.float32).to(torch.bfloat16)
    got = gated_activation(torch.cat([gate, up], dim=1), "gelu_pytorch_tanh")
    torch.testing.assert_close(got, expected * up, rtol=0, atol=0, equal_nan=True)  # gelu(-inf) is NaN


@pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TRITON), reason="the Triton kernels need CUDA")
def test_gelu_gate_kernel_skipping_padding_rows_writes_the_same_used_rows():
    """``pairs`` (the small-batch layout's pair of each row, -1 for padding): the used rows equal the
    kernel's output without it, bit for bit; padding rows are whatever the buffer held."""
    from petri.engine.cuda.fused.fused_experts import gated_activation

    torch.manual_seed(3)
    projected = torch.randn(96, 2 * 704, device="cuda").bfloat16() * 3
    pairs = torch.where(torch.rand(96, device="cuda") < 0.6, torch.arange(96, device="cuda"), -1).to(torch.int32)
    used = pairs >= 0
    got = gated_activation(projected, "gelu_pytorch_tanh", pairs=pairs)
    want = gated_activation(projected, "gelu_pytorch_tanh")
    assert 0 < int(used.sum()) < 96
    assert torch.equal(got[used].view(torch.int16), want[used].view(torch.int16))
