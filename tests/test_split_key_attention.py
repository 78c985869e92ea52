"""The split-key attention (petri.engine.split_key_attention, issue 25; opt-in): the split choice and
the reference against hand-worked cases and the errors on the CPU; the kernel's logic (slices of the
keys, empty slices, the last arrival merging them in order, the counters left at zero) in Triton's
interpreter where Triton is installed; the compiled tier's wiring (the sliding layers get the
function and their counters before the flash kernel's, the global ones keep theirs, the name says it
at one sample, uncompiling takes it back; refused off CUDA: tests/test_fast_tier.py). On a GPU
(skipped elsewhere): the kernel at the full-size sliding layers' one-sample shape against float32
attention and within bf16 rounding of the flash kernel, bit-equal over repeated and captured calls;
and a model's logits with the lever within bf16 rounding of those with the flash kernel."""

from __future__ import annotations

import math
import pytest
import torch

from petri.engine.compiled_tier import uncompile_regions
from petri.engine.fused_logits import HAVE_TRITON
from petri.engine.split_key_attention import (
    MIN_BLOCKS,
    NAME,
    KeySplit,
    attend_split_keys,
    attention_reference,
    choose_split,
    split_key_attention_op,
)
from petri.engine.tiny import tiny_random_model
from petri.engine.torch_model import compile_for_sampling
from kernel_support import assert_repeats_bit_for_bit, compiled_logits, distance, on_cuda, run_interpreted

CUDA = torch.cuda.is_available() and HAVE_TRITON


@pytest.mark.parametrize("samples, kv_heads, queries, keys, split", [
    (1, 8, 512, 1279, 2),   # one canvas, sliding layer: 8 heads × 8 blocks of 64 queries = 64 tiles
    (2, 8, 512, 1279, 1),   # two canvases: 128 tiles fill the chip
    (1, 2, 512, 1279, 5),   # 16 tiles: 132 // 16 = 8 slices, but 20 blocks of keys // MIN_BLOCKS = 5
    (1, 8, 512, 200, 1),    # 4 blocks of keys: one slice of MIN_BLOCKS
])
def test_the_split_fills_the_chip_and_keeps_slices_long(samples, kv_heads, queries, keys, split):
    assert MIN_BLOCKS == 4
    assert choose_split(samples, kv_heads, queries, keys, multiprocessors=132).split == split


def test_slices_hand_worked():
    config = KeySplit(block_m=64, block_n=64, split=2)
    assert config.tiles(1, 8, 512) == 64 and config.tiles(1, 8, 500) == 64 and config.tiles(3, 2, 65) == 12
    assert config.keys_per_split(1279) == 640  # 20 blocks: 10 and 10, the last partial
    assert KeySplit(block_n=64, split=3).keys_per_split(1279) == 448  # 7, 7 and 6 blocks


def test_reference_hand_worked():
    # one query, two keys with scores 0 and ln 3 (scale 1): weights 1/4 and 3/4
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[0.0, 5.0], [math.log(3.0), 1.0]]]])
    v = torch.tensor([[[[4.0, 8.0], [0.0, -4.0]]]])
    out, lse = attention_reference(q, k, v, 1.0)
    torch.testing.assert_close(out, torch.tensor([[[[1.0, -1.0]]]]))
    torch.testing.assert_close(lse, torch.tensor([[[math.log(4.0)]]]))


@pytest.mark.parametrize("change, field", [
    (lambda a: dict(a, v=torch.zeros(1, 2, 9, 16)), "k and v"),
    (lambda a: dict(a, q=torch.zeros(1, 2, 5, 24), k=torch.zeros(1, 2, 8, 24), v=torch.zeros(1, 2, 8, 24)), "q, k, v"),
    (lambda a: dict(a, counters=torch.zeros(1, dtype=torch.int32)), "counters"),
])
def test_a_bad_operand_is_named_before_any_launch(change, field):
    arguments = {"q": torch.zeros(1, 2, 5, 16), "k": torch.zeros(1, 2, 8, 16), "v": torch.zeros(1, 2, 8, 16),
                 "counters": torch.zeros(4, dtype=torch.int32)}
    with pytest.raises(ValueError, match=f"^{field}"):
        _attend(**change(arguments), config=KeySplit(block_m=16, block_n=16, split=2))


def _attend(q, k, v, counters, config):
    return attend_split_keys(q, k, v, 0.25, counters, config)


def test_the_op_s_cpu_form_is_the_reference_and_its_fake_matches():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 16)
    out, lse = split_key_attention_op(q, k, v, torch.zeros(4, dtype=torch.int32), 0.25)
    want_out, want_lse = attention_reference(q, k, v, 0.25)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    torch.library.opcheck(split_key_attention_op, (q.bfloat16(), k.bfloat16(), v.bfloat16(),
                                                   torch.zeros(4, dtype=torch.int32), 0.25))


INTERPRETED = """
import torch
from petri.engine.split_key_attention import KeySplit, attend_split_keys
torch.manual_seed(0)
samples, heads, queries, keys, dim = 2, 2, 40, 150, 16     # query tiles of 16: 3 per head, the last partial
q, k, v = (torch.randn(samples, heads, n, dim) for n in (queries, keys, keys))
k = k.transpose(1, 2).contiguous().transpose(1, 2)  # keys laid out (N, K, Hkv, D): other strides
scores = (q.double() @ k.double().transpose(-1, -2)) * 0.25
want_out, want_lse = torch.softmax(scores, -1) @ v.double(), torch.logsumexp(scores, -1)
for split in (1, 2, 3, 7):                                  # 10 blocks of 16 keys; 7: slices of 2, the last two empty
    config = KeySplit(block_m=16, block_n=16, split=split, num_warps=4, num_stages=1)
    counters = torch.zeros(config.tiles(samples, heads, queries), dtype=torch.int32)
    for call in range(2):                                   # the second call finds the counters the first left
        out, lse = attend_split_keys(q, k, v, 0.25, counters, config)
        assert int(counters.count_nonzero()) == 0, (split, counters)
        assert float((out.double() - want_out).abs().max()) < 1e-5, (split, call)
        assert float((lse.double() - want_lse).abs().max()) < 1e-5, (split, call)
print("ok")
"""


@pytest.mark.skipif(not HAVE_TRITON, reason="needs Triton (its interpreter runs on the CPU)")
def test_the_kernels_logic_in_tritons_interpreter():
    assert run_interpreted(INTERPRETED).split() == ["ok"]


def test_the_sliding_layers_get_the_function_and_give_it_back(monkeypatch):
    """As on CUDA (the refusal stood in: on the CPU every call goes to SDPA, which the function falls back to)."""
    monkeypatch.setattr("petri.engine.compiled_tier.split_reason", lambda device, lever="": None)
    lm = tiny_random_model(canvas_length=16, num_layers=3, seed=1, dtype=torch.bfloat16, global_head_dim=512)
    layers = lm.model.model.decoder.layers
    try:
        compile_for_sampling(lm, backend="eager", split_key_attention=True)
        names = [layer.self_attn.config._attn_implementation for layer in layers]
        assert names[:-1] == [NAME, NAME] and names[-1] != NAME  # the last layer is global (head dim 512)
        assert all(isinstance(vars(layer.self_attn).get("_petri_attention_counters"), torch.Tensor) for layer in layers[:-1])
        assert lm.fast_tier.fast_name(1).endswith("+split-keys") and "+split-keys" not in lm.fast_tier.fast_name(2)
        uncompile_regions(lm)
        assert not lm.fast_tier.split_key_attention and "+split-keys" not in lm.fast_tier.fast_name(1)
        assert all(layer.self_attn.config._attn_implementation == "sdpa" for layer in layers)
        assert not any("_petri_attention_counters" in vars(layer.self_attn) for layer in layers)
        compile_for_sampling(lm, backend="eager")  # the flash kernel's function again, not this one
        assert [layer.self_attn.config._attn_implementation for layer in layers][:-1] == ["petri_flash_sliding"] * 2
    finally:
        uncompile_regions(lm)


# ---- on a GPU ----------------------------------------------------------------------------------------

@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_the_one_sample_sliding_shape_matches_float32_and_the_flash_kernel_and_repeats_bit_for_bit():
    from petri.engine.sliding_attention import attend_flash
    from petri.engine.split_products import tier_counters

    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 256, device="cuda", generator=generator).bfloat16() for n in (512, 1279, 1279))
    scale = 256 ** -0.5
    counters = tier_counters(q.device)
    assert choose_split(1, 8, 512, 1279, counters.numel()).split > 1
    out, lse = attend_split_keys(q, k, v, scale, counters)
    exact_out, exact_lse = attention_reference(q.double(), k.double(), v.double(), scale)
    flash_out, _ = attend_flash(q, k, v, scale)
    ours = float((out.double() - exact_out).abs().max())
    assert ours < 1e-2 and float((lse.double() - exact_lse).abs().max()) < 1e-3
    assert ours <= 2 * float((flash_out.double() - exact_out).abs().max()) + 1e-3
    assert int(counters.count_nonzero()) == 0
    assert_repeats_bit_for_bit(lambda: attend_split_keys(q, k, v, scale, counters), out, counters)


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_a_models_logits_with_the_lever_stay_within_bf16_rounding_of_the_flash_kernels_on_gpu(monkeypatch):
    from petri.engine import split_key_attention

    lm = on_cuda(tiny_random_model(canvas_length=256, seed=4, dtype=torch.bfloat16, num_layers=3, num_heads=4,
                                   num_kv_heads=2, head_dim=256, global_head_dim=512, hidden_size=256))
    generator = torch.Generator(device="cuda").manual_seed(0)
    canvas = torch.randint(4, lm.vocab_size, (1, 256), device="cuda", generator=generator)
    prompt = torch.randint(4, lm.vocab_size, (1, 300), device="cuda", generator=generator)
    calls = []
    kernel = split_key_attention.attend_split_keys
    monkeypatch.setattr(split_key_attention, "attend_split_keys", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    cudnn = compiled_logits(lm, canvas, prompt, flash_sliding=False)
    flash = compiled_logits(lm, canvas, prompt)
    assert calls == []
    ours = compiled_logits(lm, canvas, prompt, split_key_attention=True)
    assert len(calls) >= 2  # the two sliding layers (the global one has head dim 512)
    assert distance(ours, flash) < 3 * distance(flash, cudnn) + 1e-3  # as far as two library kernels are apart
