"""The split-reduction products (petri.engine.split_products, issue 25; opt-in): the configuration
choice and the reference against hand-worked cases and the errors on the CPU; the kernel's logic
(slices, the last arrival adding them in order, the counters left at zero) in Triton's interpreter
where Triton is installed; the compiled tier's wiring (refused off CUDA: tests/test_fast_tier.py;
the decoder's dense linears get counters and the lever's bf16 forward, keep the counters under the
FP8 tier's forward and get theirs back after it, the encoder's never, the name says it, uncompiling
takes it all back; a bf16 linear and :func:`petri.engine.fp8.scaled_matmul` send exactly the products
:func:`splits` names to the ops). On a GPU (skipped elsewhere): the kernel at the full-size
architecture's one-canvas shapes against the float32 product and the library's, bit-equal over
repeated and captured calls; and a model's logits with the lever, in bf16 and fp8-fast, as close to
without it as rounding allows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from petri.engine import fp8, split_products
from petri.engine.compiled_tier import uncompile_regions
from petri.engine.fp8 import dense_targets, encoder_targets, quantize_rows, scaled_matmul, scaled_matmul_reference
from petri.engine.fused_logits import HAVE_TRITON
from petri.engine.split_products import (
    MIN_STEPS,
    SplitConfig,
    choose_config,
    counters_for,
    split_product,
    split_product_reference,
    split_scaled_product,
    splits,
)
from petri.engine.tiny import tiny_random_model
from petri.engine.torch_model import compile_for_sampling
from tiny_support import tiny_logits
from kernel_support import assert_repeats_bit_for_bit, compiled_logits, distance, on_cuda, run_interpreted

CUDA = torch.cuda.is_available() and HAVE_TRITON
HOPPER = CUDA and torch.cuda.get_device_capability() >= (9, 0)


@pytest.mark.parametrize("rows, columns, depth, fp8, split", [
    (256, 2816, 4096, True, 3),   # o projection: 2 × 22 tiles, 32 steps → 132 // 44
    (256, 4224, 2816, True, 2),   # the MLP's gate/up: 2 × 33 = 66 tiles
    (256, 2816, 2112, True, 3),   # down: 17 steps of 128 (the last one partial), 44 tiles
    (256, 8192, 2816, True, 1),   # stacked q/k/v: 128 tiles fill the chip
    (3072, 2816, 4096, True, 1),  # twelve canvases: 528 tiles
    (256, 2816, 2112, False, 3),  # bf16: steps of 64, 33 of them
    (256, 2816, 768, True, 1),    # 6 steps: a slice of 3 would be shorter than MIN_STEPS
    (256, 2816, 1024, True, 2),   # 8 steps: two slices of MIN_STEPS
])
def test_the_split_fills_the_chip_and_keeps_slices_long(rows, columns, depth, fp8, split):
    config = choose_config(rows, columns, depth, fp8, multiprocessors=132)
    assert MIN_STEPS == 4
    assert (config.block_m, config.block_n, config.block_k) == (128, 128, 128 if fp8 else 64)
    assert config.split == split


def test_slices_and_tiles_hand_worked():
    config = SplitConfig(block_m=128, block_n=128, block_k=128, split=3)
    assert config.tiles(256, 2816) == 44
    assert config.tiles(300, 2816) == 66  # 3 row tiles, the last partial
    assert config.steps_per_slice(2112) == 6  # 17 steps: 6, 6, 5
    assert config.steps_per_slice(4096) == 11  # 32 steps: 11, 11, 10
    counters = counters_for(256, 2816, "cpu")
    assert counters.dtype == torch.int32 and counters.tolist() == [0] * 44


def test_reference_hand_worked():
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
    w = torch.tensor([[1.0, 1.0], [0.5, -2.0], [0.0, 4.0]])
    assert split_product_reference(x, w).tolist() == [[3.0, -3.5, 8.0], [2.0, 3.5, -4.0]]
    scaled = split_product_reference(x, w, torch.tensor([2.0, 0.5]), torch.tensor([1.0, 0.25, 4.0]))
    # row m times 2 or 0.5, column n times 1, 0.25 or 4
    assert scaled.tolist() == [[6.0, -1.75, 64.0], [1.0, 0.4375, -8.0]]
    assert scaled.dtype == torch.bfloat16


@pytest.mark.parametrize("change, field", [
    (lambda a: dict(a, weight=torch.zeros(8, 24)), "weight"),
    (lambda a: dict(a, x_scale=torch.ones(4)), "x_scale and weight_scale"),
    (lambda a: dict(a, x=torch.zeros(16, 4).T), "x and weight"),
    (lambda a: dict(a, counters=torch.zeros(1, dtype=torch.int32)), "counters"),
    (lambda a: dict(a, counters=torch.zeros(8, dtype=torch.int64)), "counters"),
])
def test_a_bad_operand_is_named_before_any_launch(change, field):
    arguments = {"x": torch.zeros(4, 16), "weight": torch.zeros(8, 16), "counters": torch.zeros(8, dtype=torch.int32)}
    config = SplitConfig(block_m=16, block_n=4, block_k=16, split=2)
    with pytest.raises(ValueError, match=f"^{field}"):
        split_product(**change(arguments), config=config)


INTERPRETED = """
import torch
from petri.engine.split_products import SplitConfig, counters_for, split_product
torch.manual_seed(0)
rows, columns, depth = 40, 72, 200          # tiles of 16 × 32: 3 × 3, the last row and column tiles partial
x, w = torch.randn(rows, depth), torch.randn(columns, depth)
x_scale, w_scale = torch.rand(rows) + 0.5, torch.rand(columns) + 0.5
exact = (x.double() * x_scale.double()[:, None]) @ (w.double() * w_scale.double()[:, None]).T
results = []
for split in (1, 2, 3, 5, 13):                # 13 steps of 16: slices of 1 step; 5: the last slice empty
    config = SplitConfig(block_m=16, block_n=32, block_k=16, split=split, num_warps=4, num_stages=2)
    counters = counters_for(rows, columns, "cpu", config)
    for call in range(2):                     # the second call finds the counters the first left
        out = split_product(x, w, counters, x_scale, w_scale, config=config)
        assert int(counters.count_nonzero()) == 0, (split, counters)
        error = float(((out.double() - exact).abs() / exact.abs().clamp(min=1.0)).max())
        assert error < 2 ** -7, (split, call, error)  # bf16 rounding of float32 sums
    results.append(out)
print("ok", len(results))
"""


@pytest.mark.skipif(not HAVE_TRITON, reason="needs Triton (its interpreter runs on the CPU)")
def test_the_kernels_logic_in_tritons_interpreter():
    assert run_interpreted(INTERPRETED).split() == ["ok", "5"]


def _counters(module):
    return vars(module).get("_petri_split_counters")


def _split_forward(module) -> bool:
    return getattr(vars(module).get("forward"), "__func__", None) is split_products._split_linear_forward


def test_the_decoder_linears_get_counters_in_both_precisions_and_give_them_back(monkeypatch):
    """As on CUDA (the refusal stood in: on the CPU the counters are empty, so nothing splits)."""
    monkeypatch.setattr("petri.engine.compiled_tier.split_reason", lambda device: None)
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=1, dtype=torch.bfloat16)
    want = tiny_logits(lm)
    try:
        compile_for_sampling(lm, backend="eager", split_products=True)
        decoder = [m for _, m in dense_targets(lm.model)]
        assert all(_split_forward(m) and _counters(m).numel() == 0 for m in decoder)  # bf16: the lever's forward
        embedding = lm.model.model.decoder.embed_tokens
        assert _counters(embedding) is not None and not _split_forward(embedding)  # the self-conditioning product's
        assert lm.fast_tier.split_products and "+split-products" in lm.fast_tier.fast_name(1)
        assert torch.equal(tiny_logits(lm), want)  # nothing splits on the CPU: F.linear, as uncompiled
        fp8.set_precision(lm, "fp8-fast", fp8_encoder=True)
        encoder = [m for _, m in encoder_targets(lm.model)]
        assert encoder and all("_petri_fp8_weight" in vars(m) and _counters(m) is None for m in encoder)  # never split
        assert all(not _split_forward(m) and _counters(m) is not None for m in decoder)  # the FP8 forward, same counters
        assert lm.fast_tier.fast_name(1).endswith("+split-products+enc-fp8+fp8-fast")
        fp8.set_precision(lm, "bf16")
        assert all(_split_forward(m) and _counters(m) is not None for m in decoder)  # given back
        fp8.set_precision(lm, "fp8")
        uncompile_regions(lm)  # the FP8 tier stays, without the lever
        assert not lm.fast_tier.split_products and fp8.precision_of(lm) == "fp8"
        assert "+split-products" not in lm.fast_tier.fast_name(1)
        assert all(_counters(m) is None and "_petri_fp8_weight" in vars(m) for _, m in dense_targets(lm.model))
        assert _counters(embedding) is None
        fp8.set_precision(lm, "bf16")
        assert all("forward" not in vars(m) for _, m in dense_targets(lm.model))  # the class's own again
    finally:
        uncompile_regions(lm)


def test_the_fp8_self_conditioning_product_takes_the_embeddings_counters(monkeypatch):
    from petri.engine import fast_sampler
    from petri.engine.fast_sampler import FastOptions, run_sampler_fast
    from petri.trajectory import AnchorSpan, SamplerSettings

    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=1, dtype=torch.bfloat16)
    embedding = lm.model.model.decoder.embed_tokens
    seen = []
    product = fast_sampler.scaled_matmul
    monkeypatch.setattr(fast_sampler, "scaled_matmul", lambda *a: seen.append(a[6]) or product(*a))
    fp8.set_precision(lm, "fp8")
    embedding._petri_split_counters = torch.zeros(0, dtype=torch.int32)  # what the lever gives it on the CPU
    options = FastOptions(graph=False, fused=False, softmax_self_conditioning=True, fp8_self_conditioning=True)
    settings = SamplerSettings(max_denoising_steps=3, stability_threshold=None, confidence_threshold=None)
    run_sampler_fast(lm, [5, 9, 17, 33], [[AnchorSpan("a", 2, (11,))]], settings, seed=3, options=options)
    assert len(seen) == 3 and all(counters is embedding._petri_split_counters for counters in seen)


def test_a_bf16_linear_sends_the_products_splits_names_to_the_op(monkeypatch):
    torch.manual_seed(0)
    linear, embedding = torch.nn.Linear(1024, 1024, bias=False).bfloat16(), torch.nn.Embedding(8, 4)
    split_products.use_split_products([linear], embedding)
    assert "forward" not in vars(embedding) and vars(embedding)["_petri_split_counters"].dtype == torch.int32
    linear._petri_split_counters = torch.zeros(132, dtype=torch.int32)  # as an H200's: 16 tiles, 16 steps of 64
    calls = []
    op = split_products.split_bf16_product
    monkeypatch.setattr(split_products, "split_bf16_product", lambda *a: calls.append(a[0].shape) or op(*a))
    x = torch.randn(2, 128, 1024).bfloat16()
    out = linear(x)
    assert calls == [(256, 1024)]
    assert torch.equal(out, split_product_reference(x.reshape(256, 1024), linear.weight).view(2, 128, 1024))
    linear(torch.randn(3072, 1024).bfloat16())  # twelve canvases: 24 × 8 tiles fill the chip
    linear(torch.randn(256, 2048).bfloat16()[:, ::2])  # a strided reduction axis: F.linear
    assert len(calls) == 1
    split_products.drop_split_products([linear], embedding)
    assert not any(name in vars(m) for m in (linear, embedding) for name in ("forward", "_petri_split_counters"))
    torch.library.opcheck(op, (x.reshape(256, 1024), linear.weight.detach(), torch.zeros(132, dtype=torch.int32)),
                          test_utils=("test_schema", "test_faketensor"))


def test_scaled_matmul_sends_the_products_splits_names_to_the_op(monkeypatch):
    torch.manual_seed(0)
    xq, x_scale = quantize_rows(torch.randn(256, 1024).bfloat16())
    wq, w_scale = quantize_rows(torch.randn(1024, 1024).bfloat16())
    calls = []

    def spy(*args):
        calls.append(args[4].numel())
        return split_scaled_product(*args)

    monkeypatch.setattr(fp8, "split_scaled_product", spy)
    chip = torch.zeros(132, dtype=torch.int32)  # as an H200's: 16 tiles, 8 steps of 128 → two slices
    assert splits(256, 1024, 1024, chip) and not splits(256, 1024, 1024, torch.zeros(0, dtype=torch.int32))
    out = scaled_matmul(xq, x_scale, wq, w_scale, counters=chip)
    assert calls == [132]
    assert torch.equal(out, scaled_matmul_reference(xq, x_scale, wq, w_scale))  # the op's CPU form: the reference
    for counters in (None, torch.zeros(0, dtype=torch.int32)):
        scaled_matmul(xq, x_scale, wq, w_scale, counters=counters)
    scaled_matmul(xq[:, :256], x_scale, wq[:, :256], w_scale, counters=chip)  # 2 steps: not split
    scaled_matmul(xq, x_scale, wq, w_scale, torch.float32, counters=chip)  # the op writes bf16 only
    assert calls == [132]
    linear = SimpleNamespace(_petri_fp8_weight=wq, _petri_fp8_scale=w_scale, _petri_fp8_fast=False)
    fp8.linear_product(linear, xq, x_scale)  # an FP8 linear without the lever
    linear._petri_split_counters = chip
    assert torch.equal(fp8.linear_product(linear, xq, x_scale), out)  # with it: its counters reach the op
    assert calls == [132, 132]
    # (opcheck's schema test multiplies its inputs, which torch's CPU kernels cannot in e4m3)
    torch.library.opcheck(split_scaled_product, (xq, x_scale, wq, w_scale, chip, False), test_utils=("test_faketensor",))


def _fp8_operands(rows, columns, depth, generator):
    x = torch.randn(rows, depth, device="cuda", generator=generator).bfloat16()
    w = (torch.randn(columns, depth, device="cuda", generator=generator) / depth**0.5).bfloat16()
    return quantize_rows(x) + quantize_rows(w)


@pytest.mark.skipif(not HOPPER, reason="needs a GPU of compute capability 9.0 (e4m3 matrix units) and Triton")
@pytest.mark.parametrize("columns, depth", [(2816, 4096), (4224, 2816), (2816, 2112)])
@pytest.mark.parametrize("fast_accum", [False, True])
def test_fp8_products_match_the_float32_product_and_repeat_bit_for_bit(columns, depth, fast_accum):
    generator = torch.Generator(device="cuda").manual_seed(0)
    xq, x_scale, wq, w_scale = _fp8_operands(256, columns, depth, generator)
    config = choose_config(256, columns, depth, True, torch.cuda.get_device_properties(0).multi_processor_count)
    assert config.split > 1
    counters = counters_for(256, columns, xq.device)
    out = split_product(xq, wq, counters, x_scale, w_scale, fast_accum=fast_accum)
    exact = (xq.float() * x_scale[:, None]) @ (wq.float() * w_scale[:, None]).T
    library = scaled_matmul(xq, x_scale, wq, w_scale, torch.bfloat16, fast_accum)
    relative = float((out.float() - exact).norm() / exact.norm())
    assert relative < (4e-3 if fast_accum else 3e-3)  # bf16 output rounding is about 2e-3 of each element
    assert relative < 1.5 * float((library.float() - exact).norm() / exact.norm()) + 1e-4
    assert int(counters.count_nonzero()) == 0
    assert_repeats_bit_for_bit(lambda: split_product(xq, wq, counters, x_scale, w_scale, fast_accum=fast_accum), out,
                               counters)


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_bf16_products_match_the_float32_product_at_every_split():
    generator = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(256, 2112, device="cuda", generator=generator).bfloat16()
    w = (torch.randn(2816, 2112, device="cuda", generator=generator) / 46).bfloat16()
    exact = x.float() @ w.float().T
    counters = counters_for(256, 2816, x.device)
    for split in (1, 2, 3, 8):
        out = split_product(x, w, counters, config=SplitConfig(block_k=64, split=split))
        assert float((out.float() - exact).norm() / exact.norm()) < 3e-3, split
        assert int(counters.count_nonzero()) == 0


@pytest.mark.skipif(not HOPPER, reason="needs a GPU of compute capability 9.0 (e4m3 matrix units) and Triton")
def test_a_models_logits_with_split_products_stay_within_rounding_on_gpu(monkeypatch):
    """A two-layer model wide enough that every decoder product at one canvas is split (hidden,
    heads × head dim, MLP 1,024: 8 steps of 128, 16 to 20 tiles), compiled tier in fp8-fast and in
    bf16: the logits with the lever differ from those without by far less than FP8 differs from bf16."""
    from petri.engine import split_products

    lm = on_cuda(tiny_random_model(canvas_length=256, seed=3, dtype=torch.bfloat16, hidden_size=1024, num_heads=8,
                                   num_kv_heads=1, head_dim=128, intermediate_size=1024, expert_size=64))
    generator = torch.Generator(device="cuda").manual_seed(0)
    canvas = torch.randint(4, lm.vocab_size, (1, 256), device="cuda", generator=generator)
    prompt = torch.tensor([[5, 9, 17, 33]], device="cuda")
    calls = []
    kernel = split_products.split_product
    monkeypatch.setattr(split_products, "split_product", lambda *a, **k: calls.append(a[0].shape) or kernel(*a, **k))
    bf16 = compiled_logits(lm, canvas, prompt)
    plain = compiled_logits(lm, canvas, prompt, "fp8-fast")
    assert calls == []
    split = compiled_logits(lm, canvas, prompt, "fp8-fast", split_products=True)
    assert len(calls) >= 4 * 2  # q/k/v, o, gate/up, down in each of the two layers (and the heads' products)
    assert distance(split, plain) < 0.25 * distance(plain, bf16)
    calls.clear()
    split_bf16 = compiled_logits(lm, canvas, prompt, split_products=True)
    assert len(calls) >= 4 * 2
    assert distance(split_bf16, bf16) < 0.25 * distance(plain, bf16)
