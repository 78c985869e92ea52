"""The global layers' attention (petri.engine.cuda.attention.split_attention), both methods: the folded and split
computation and the two products against plain softmax attention with the key/value heads repeated
(the reference, transformers' ``repeat_kv`` order), a hand-worked product, hand-worked chunk
choices and score budget, the install and undo on a model by method (where it does not apply, the
library's SDPA runs: the same logits), and on a GPU (skipped elsewhere) each method against
PyTorch's SDPA at the full-size shapes and inside the compiled tier."""

from __future__ import annotations

import pytest
import torch

import petri.engine.cuda.attention.split_attention as split_module
from attention_support import check_against_sdpa, tiny_decoder
from petri.engine.cuda.attention.sliding_attention import NAME as FLASH_NAME
from petri.engine.cuda.attention.split_attention import (
    NAME,
    NAMES,
    PRODUCTS_NAME,
    attend_reference,
    chunks_for,
    drop_split_attention,
    method_for,
    petri_products_attention,
    petri_split_sdpa,
    products_attention,
    split_attention,
    use_split_attention,
)
from petri.engine.torch.tiny import tiny_random_model

CUDA = torch.cuda.is_available()


def plain_attention(query, key, value, scale):
    """softmax(s·q kᵀ) v with each key/value head repeated for its group, in float64."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    logits = torch.einsum("bhqd,bhkd->bhqk", query.double(), key.double()) * scale
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(logits, dim=-1), value.double())


def test_chunks_hand_worked():
    assert chunks_for(1, 1856) == 4  # 1,600-token prompt + 256 canvas
    assert chunks_for(1, 201 + 256) == 1  # 457 is prime
    assert chunks_for(2, 3 * 151) == 3
    assert chunks_for(1, 2 * 229) == 2
    assert chunks_for(12, 1856) == 1  # tiles enough


@pytest.mark.parametrize("chunks", [1, 2, 4])
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (4, 4)])
def test_split_attention_is_softmax_attention(chunks, heads, kv_heads):
    torch.manual_seed(chunks + heads)
    batch, queries, keys, dim = 2, 5, 12, 16
    query = torch.randn(batch, queries, heads, dim, dtype=torch.float64).transpose(1, 2)  # as transformers hands it
    key = torch.randn(batch, kv_heads, keys, dim, dtype=torch.float64) * 2
    value = torch.randn(batch, kv_heads, keys, dim, dtype=torch.float64)
    got = split_attention(query, key, value, 0.7, chunks, attend=attend_reference)
    want = plain_attention(query, key, value, 0.7)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_chunks_must_divide_the_keys():
    q, k = torch.zeros(1, 2, 3, 4), torch.zeros(1, 1, 10, 4)
    with pytest.raises(ValueError, match="3 chunks do not divide 10 keys"):
        split_attention(q, k, k, 1.0, 3, attend=attend_reference)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("heads, kv_heads", [(1, 1), (4, 2), (16, 2)])
def test_products_are_softmax_attention(heads, kv_heads, dtype, tolerance):
    torch.manual_seed(heads)
    query = torch.randn(2, heads, 5, 8, dtype=dtype)
    key, value = torch.randn(2, kv_heads, 7, 8, dtype=dtype), torch.randn(2, kv_heads, 7, 8, dtype=dtype)
    got = products_attention(query, key, value, 0.7)
    assert got.shape == query.shape and got.dtype == query.dtype
    torch.testing.assert_close(got.double(), plain_attention(query, key, value, 0.7), rtol=tolerance, atol=tolerance / 10)


def test_products_hand_worked():
    # one query (1, 0) against keys (1, 0) and (0, 1): logits 1 and 0, weights e/(e+1) and 1/(e+1)
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    v = torch.tensor([[[[2.0, 0.0], [0.0, 4.0]]]])
    e = torch.tensor(1.0).exp()
    torch.testing.assert_close(products_attention(q, k, v, 1.0), torch.tensor([[[[2 * e / (e + 1), 4 / (e + 1)]]]]))
    # bf16 inputs: bf16 weights times bf16 values, bf16 out (2e/(e+1) = 1.4621 → 1.4609, 4/(e+1) = 1.0758 → 1.0781)
    got = products_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 1.0)
    assert got.dtype == torch.bfloat16 and got.flatten().tolist() == [1.4609375, 1.078125]


def test_a_call_past_the_score_budget_takes_the_chunks(monkeypatch):
    query, key = torch.zeros(1, 16, 256, 512), torch.zeros(1, 2, 1856, 512)
    # 16 · 256 · 1,856 float32 scores: 30.4 MB, within the 1 GiB budget
    assert method_for("products", query, key) == "products"
    monkeypatch.setattr(split_module, "MAX_SCORES_BYTES", 16 * 256 * 1856 * 4 - 1)
    assert method_for("products", query, key) == "chunks"
    assert method_for("chunks", query, key) == "chunks"


def test_attend_reference_returns_the_log_sum_exp():
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])  # logits 1 and 0
    v = torch.tensor([[[[2.0, 0.0], [0.0, 4.0]]]])
    out, lse = attend_reference(q, k, v, 1.0)
    e = torch.tensor(1.0).exp()
    torch.testing.assert_close(lse, torch.log(e + 1).reshape(1, 1, 1))
    torch.testing.assert_close(out, torch.tensor([[[[2 * e / (e + 1), 4 / (e + 1)]]]]))


@pytest.mark.parametrize("method", ["products", "chunks"])
def test_installed_on_a_model_it_leaves_its_outputs_and_undoes_cleanly(method):
    """On the CPU the function hands every call to the library's SDPA: the logits are the
    library's, bit for bit; the global layers (and only they) get the shared config copy."""
    model, layers, ids, canvas = tiny_decoder(num_layers=6, seed=2, prompt_length=9)
    with torch.no_grad():
        want = model(input_ids=ids, decoder_input_ids=canvas).logits
        assert use_split_attention(layers, widest_fast_head=0, method=method) == 6
        configs = {id(layer.self_attn.config) for layer in layers}
        assert len(configs) == 1 and layers[0].self_attn.config._attn_implementation == NAMES[method]
        assert model.config.get_text_config()._attn_implementation == "sdpa"  # the masks' config is untouched
        got = model(input_ids=ids, decoder_input_ids=canvas).logits
        drop_split_attention(layers)
    assert torch.equal(got, want)
    assert all(layer.self_attn.config._attn_implementation == "sdpa" for layer in layers)
    assert use_split_attention(layers) == 0  # the tiny model's heads (32) are within the fast kernels' range
    with pytest.raises(ValueError, match="global attention method must be one of products, chunks, got 'flash'"):
        use_split_attention(layers, method="flash")


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("batch", [1, 12])
@pytest.mark.parametrize("function", [petri_products_attention, petri_split_sdpa])
def test_each_method_equals_sdpa_at_the_full_size_global_shape_on_gpu(batch, function):
    """Global layer of the full-size architecture: 2 key/value heads, head dim 512, 1,856 keys."""
    check_against_sdpa(function, batch, kv_heads=2, keys=1856, dim=512)


def test_the_compiled_tier_installs_it_unless_told_not_to_and_undoes_it():
    from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions

    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=2)
    attention = lm.model.model.decoder.layers[-1].self_attn
    attention.head_dim = 512  # as the full-size model's global layers (only the install reads it here)
    compile_regions(lm, backend="eager", split_attention=False)
    assert attention.config._attn_implementation == "sdpa"
    compile_regions(lm, backend="eager")  # on by default, the products method
    assert attention.config._attn_implementation == PRODUCTS_NAME
    assert lm.model.model.decoder.layers[0].self_attn.config._attn_implementation == FLASH_NAME  # the other layer
    compile_regions(lm, backend="eager", global_attention="chunks", flash_sliding=False)
    assert lm.model.model.decoder.layers[0].self_attn.config._attn_implementation == "sdpa"
    assert attention.config._attn_implementation == NAME
    with pytest.raises(ValueError, match="got 'flash'"):  # named before anything changes, the split on or off
        compile_regions(lm, backend="eager", split_attention=False, global_attention="flash")
    assert attention.config._attn_implementation == NAME
    uncompile_regions(lm)
    assert attention.config._attn_implementation == "sdpa" and "_petri_config" not in vars(attention)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("method, flash_sliding", [("products", True), ("chunks", True), ("products", False)])
def test_compiled_layers_with_the_split_give_the_librarys_logits_on_gpu(method, flash_sliding):
    """A tiny bf16 model whose global layer has head dim 512 (so the split applies), the compiled
    tier with ``split_attention=True`` (Inductor, the aten kernel inside the compiled layer) and its
    sliding layer through the flash kernel or SDPA (``petri.engine.cuda.attention.sliding_attention``) against the
    uncompiled library model: logits within bf16 rounding."""
    from dataclasses import replace

    from transformers import DiffusionGemmaForBlockDiffusion

    from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions
    from petri.engine.torch.configs import small_diffusion_gemma_config
    from petri.engine.torch.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    config = small_diffusion_gemma_config(vocab_size=len(tokenizer), canvas_length=16, num_layers=2, num_heads=4,
                                          num_kv_heads=2, global_head_dim=512)
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(config).eval().to("cuda", torch.bfloat16)
    lm = replace(tiny_random_model(canvas_length=16), model=model, device=torch.device("cuda"), dtype=torch.bfloat16)
    assert model.model.decoder.layers[-1].self_attn.head_dim == 512
    ids = torch.randint(3, lm.vocab_size, (1, 40), device="cuda")
    canvas = torch.randint(3, lm.vocab_size, (1, 16), device="cuda")
    with torch.no_grad():
        want = model(input_ids=ids, decoder_input_ids=canvas).logits.float()
        compile_regions(lm, split_attention=True, global_attention=method, flash_sliding=flash_sliding)
        try:
            assert model.model.decoder.layers[-1].self_attn.config._attn_implementation == NAMES[method]
            sliding = model.model.decoder.layers[0].self_attn.config._attn_implementation
            assert sliding == (FLASH_NAME if flash_sliding else "sdpa")
            got = model(input_ids=ids, decoder_input_ids=canvas).logits.float()
        finally:
            uncompile_regions(lm)
    error = (got - want).norm() / want.norm()
    assert float(error) < 0.05, float(error)
