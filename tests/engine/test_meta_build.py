"""The meta-device build (petri.engine.torch.meta_build, issue 62) against a normal build of the same
small DiffusionGemma config: same parameters, same buffers, ties kept, weights initialised."""

from __future__ import annotations

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from petri.engine.torch.configs import small_diffusion_gemma_config
from petri.engine.torch.meta_build import build_random_on_device

# six layers: five sliding and one full-attention (a global head dimension of its own), as the real model mixes them
CONFIG = dict(vocab_size=384, canvas_length=16, num_layers=6, global_head_dim=64)


@pytest.fixture(scope="module")
def pair():
    config = small_diffusion_gemma_config(**CONFIG)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # how experiments/bench.py built it before: default dtype bf16
    try:
        torch.manual_seed(0)
        normal = DiffusionGemmaForBlockDiffusion(config).eval()
    finally:
        torch.set_default_dtype(previous)
    torch.manual_seed(1)
    return normal, build_random_on_device(config, "cpu", torch.bfloat16)


def test_same_parameters_names_shapes_and_dtypes(pair):
    normal, meta = pair
    expected = [(name, tuple(p.shape), p.dtype) for name, p in normal.named_parameters()]
    assert [(name, tuple(p.shape), p.dtype) for name, p in meta.named_parameters()] == expected
    assert all(p.device.type == "cpu" for p in meta.parameters())
    assert not meta.training


def test_same_buffers(pair):
    """inv_freq (per layer type), embed_scale and every layer's layer_scalar equal a normal build's
    (to_empty leaves them as garbage; layer_scalar is the one init_weights does not restore)."""
    normal, meta = pair
    normal_buffers, meta_buffers = dict(normal.named_buffers()), dict(meta.named_buffers())
    assert set(meta_buffers) == set(normal_buffers)
    names = [name for name in normal_buffers if name.endswith(("inv_freq", "embed_scale", "layer_scalar"))]
    assert any(n.endswith("layer_scalar") for n in names) and any(n.endswith("inv_freq") for n in names)
    for name, buffer in normal_buffers.items():
        assert meta_buffers[name].dtype == buffer.dtype, name
        assert torch.equal(meta_buffers[name], buffer), name
    scalars = [b for n, b in meta_buffers.items() if n.endswith("layer_scalar")]
    assert len(scalars) >= CONFIG["num_layers"] and all(float(b) == 1.0 for b in scalars)


def test_ties_kept(pair):
    """The LM head is the token embedding (one tensor), as in a normal build."""
    normal, meta = pair
    assert normal.get_output_embeddings().weight is normal.get_input_embeddings().weight
    assert meta.get_output_embeddings().weight is meta.get_input_embeddings().weight
    assert len(list(meta.parameters())) == len(list(normal.parameters()))


def test_weights_initialised_like_a_normal_build(pair):
    """Every parameter is initialised as a normal build's: the deterministic ones (norm weights and
    the like) equal, the random ones finite with the same spread (within 25 %: different draws)."""
    normal, meta = pair
    meta_parameters = dict(meta.named_parameters())
    for name, expected in normal.named_parameters():
        got = meta_parameters[name].detach().float()
        expected = expected.detach().float()
        assert torch.isfinite(got).all(), name
        if expected.numel() < 2 or float(expected.std()) == 0.0:
            assert torch.equal(got, expected), name
        else:
            assert float(got.std()) == pytest.approx(float(expected.std()), rel=0.25), name
            assert not torch.equal(got, expected), name


def test_forward_runs_and_is_finite(pair):
    _, meta = pair
    ids = torch.randint(4, CONFIG["vocab_size"], (1, 8))
    with torch.no_grad():
        logits = meta(input_ids=ids, decoder_input_ids=torch.randint(4, CONFIG["vocab_size"], (1, 16))).logits
    assert logits.shape[-1] == CONFIG["vocab_size"] and torch.isfinite(logits.float()).all()


def test_materialise_keeps_a_shared_parameter_one_tensor():
    """A parameter held by two modules (DiffusionGemma's decoder holds the encoder's weights) gets one
    storage: ``Module.to_empty`` gives each holder its own copy (the full-size model then needed
    78.5 GiB instead of 47 GiB on an H100)."""
    import torch

    from petri.engine.torch.meta_build import materialise

    with torch.device("meta"):
        first, second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    second.weight = first.weight
    model = torch.nn.Sequential(first, second)
    materialise(model, torch.device("cpu"))
    assert model[0].weight is model[1].weight
    assert model[0].weight.device.type == "cpu" and model[1].bias is not model[0].bias
    storages = {p.untyped_storage().data_ptr() for m in model for p in (m.weight, m.bias)}
    assert len(storages) == 3
