"""The small-batch experts (petri.engine.cuda.fused.batch1_experts): the block alignment against a hand-worked
case, the reference GEMM against a per-row loop, the opt-in wiring in the compiled tier, and on a
GPU (skipped elsewhere) the Triton grouped GEMM against the reference and the whole block against
the fused experts op's plain-torch path."""

from __future__ import annotations

import pytest
import torch

from petri.engine.cuda.fused.batch1_experts import (
    MAX_PAIRS,
    GemmConfig,
    align_blocks,
    align_blocks_torch,
    align_blocks_triton,
    experts_small_batch,
    grouped_gemm,
    grouped_gemm_reference,
)
from petri.engine.cuda.fused.fused_experts import experts_reference
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON

CUDA = torch.cuda.is_available() and HAVE_TRITON


def test_align_blocks_hand_worked():
    # pairs (token·K + k): 0→e2, 1→e0, 2→e0, 3→e3, 4→e2, 5→e0; blocks of 2 rows, 4 experts
    # sorted by expert: e0: 1, 2, 5 (3 rows → 4 padded), e1: none, e2: 0, 4 (2), e3: 3 (1 → 2)
    rows, block_expert, position = align_blocks(torch.tensor([[2, 0], [0, 3], [2, 0]]), num_experts=4, block_m=2)
    # R = 6 + 4·(2−1) = 10 rows, 5 blocks; used: 8 rows
    assert rows.tolist() == [1, 2, 5, -1, 0, 4, 3, -1, -1, -1]
    assert block_expert.tolist() == [0, 0, 2, 3, -1]
    assert position.tolist() == [4, 0, 1, 6, 5, 2]


def test_grouped_gemm_reference_against_a_row_loop():
    torch.manual_seed(0)
    tokens, top_k, experts, n, k = 9, 2, 3, 8, 16
    index = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    a = torch.randn(tokens, k)
    weight = torch.randn(experts, n, k)
    rows, block_expert, position = align_blocks(index, experts, block_m=4)
    out = grouped_gemm_reference(a, weight, rows, block_expert, top_k, gather=True, block_m=4)
    for pair in range(tokens * top_k):
        token, expert = pair // top_k, int(index.reshape(-1)[pair])
        torch.testing.assert_close(out[position[pair]], weight[expert] @ a[token])
    padding = rows < 0
    assert bool((out[padding] == 0).all())


def test_small_batch_experts_are_on_by_default_in_the_compiled_tier_and_named(tiny_lm):
    from petri.engine.cuda.compiled_tier import uncompile_regions
    from petri.engine.torch.model import compile_for_sampling

    compile_for_sampling(tiny_lm, backend="eager", small_batch_experts=False)
    assert not tiny_lm.fast_tier.small_batch_experts_used(1)
    compile_for_sampling(tiny_lm, backend="eager")
    top_k = tiny_lm.model.config.text_config.top_k_experts
    assert tiny_lm.fast_tier.small_batch_experts_used(1)
    assert not tiny_lm.fast_tier.small_batch_experts_used(MAX_PAIRS // (tiny_lm.canvas_length * top_k) + 1)
    uncompile_regions(tiny_lm)
    assert not tiny_lm.fast_tier.small_batch_experts_used(1)


#: the kernel's launch configurations tested: the default (by precision and gather) and its two
#: forms, token rows as the matrix units' left operand and the weight slice (swap)
FORMS = {"default": None, "rows-left": GemmConfig(False, 64, 128, 4, 4), "swap": GemmConfig(True, 128, 128, 4, 3)}


def _gpu_case(seed: int, tokens: int = 256, top_k: int = 8, experts: int = 128, hidden: int = 2816, width: int = 704):
    """One decoder layer's experts at the full-size shapes on the GPU: routing (T, K), routing
    weights (T, K), hidden rows (T, H) bf16, gate/up (E, 2·I, H) and down (E, H, I) bf16."""
    torch.manual_seed(seed)
    index = torch.rand(tokens, experts, device="cuda").argsort(-1)[:, :top_k]
    weights = torch.rand(tokens, top_k, device="cuda")
    x = torch.randn(tokens, hidden, device="cuda").bfloat16()
    gate_up = (torch.randn(experts, 2 * width, hidden, device="cuda") / hidden**0.5).bfloat16()
    down = (torch.randn(experts, hidden, width, device="cuda") / width**0.5).bfloat16()
    return index, weights / weights.sum(-1, keepdim=True), x, gate_up, down


def _used_rows_error(got: torch.Tensor, reference: torch.Tensor, rows: torch.Tensor) -> float:
    """‖got − reference‖ / ‖reference‖ over the padded rows that hold a pair (``rows`` ≥ 0)."""
    used = (rows >= 0).nonzero().squeeze(1)
    return float((got[used] - reference[used]).norm() / reference[used].norm())


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_small_batch_experts_block_equals_the_fused_op_within_rounding_on_gpu():
    index, weights, x, gate_up, down = _gpu_case(2)
    got = experts_small_batch(x, index, weights, gate_up, down, "gelu_pytorch_tanh").float()
    reference = experts_reference(x, index, weights, gate_up, down, "gelu_pytorch_tanh").float()
    assert float((got - reference).norm() / reference.norm()) < 1e-2


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("gather", [True, False], ids=["gather", "rows"])
def test_each_kernel_form_equals_the_reference_on_gpu(form, gather):
    index, _, x, gate_up, down = _gpu_case(3)
    rows, block_expert, _ = align_blocks(index, gate_up.shape[0])
    a, weight = (x, gate_up) if gather else (torch.randn(rows.shape[0], down.shape[2], device="cuda").bfloat16(), down)
    got = grouped_gemm(a, weight, rows, block_expert, 8, gather=gather, config=FORMS[form]).float()
    reference = grouped_gemm_reference(a, weight, rows, block_expert, 8, gather=gather).float()
    assert _used_rows_error(got, reference, rows) < 4e-3  # bf16 output rounding


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("fast_accum", [False, True], ids=["fp32-slices", "fast-accum"])
def test_scaled_kernel_equals_the_dequantized_reference_on_gpu(form, fast_accum):
    from petri.engine.cuda.fp8_tier.fp8 import dequantize, quantize_rows

    index, _, x, gate_up, _ = _gpu_case(4)
    rows, block_expert, _ = align_blocks(index, gate_up.shape[0])
    (xq, x_scale), (wq, w_scale) = quantize_rows(x), quantize_rows(gate_up)
    got = grouped_gemm(xq, wq, rows, block_expert, 8, gather=True, a_scale=x_scale, weight_scale=w_scale,
                       fast_accum=fast_accum, config=FORMS[form]).float()
    reference = grouped_gemm_reference(dequantize(xq, x_scale), dequantize(wq, w_scale), rows, block_expert, 8,
                                       gather=True).float()
    assert bool(torch.isfinite(got[rows >= 0]).all())
    assert _used_rows_error(got, reference, rows) < (1e-2 if fast_accum else 4e-3)


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_fp8_small_batch_block_equals_the_fp8_op_on_gpu():
    from petri.engine.cuda.fp8_tier.fp8 import experts_fp8, experts_fp8_small_batch, quantize_rows

    index, weights, x, gate_up, down = _gpu_case(5)
    quantized = (*quantize_rows(gate_up), *quantize_rows(down))
    op = experts_fp8(x, index, weights, *quantized, "gelu_pytorch_tanh").float()
    small = experts_fp8_small_batch(x, index, weights, *quantized, "gelu_pytorch_tanh").float()
    bf16 = experts_reference(x, index, weights, gate_up, down, "gelu_pytorch_tanh").float()
    # the same quantization; only the order of the float32 sums and so an occasional e4m3 rounding differ
    assert float((small - op).norm() / op.norm()) < 2e-2
    assert abs(float((small - bf16).norm() / bf16.norm()) - float((op - bf16).norm() / bf16.norm())) < 5e-3


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("tokens, top_k, experts, block_m", [(256, 8, 128, 32), (37, 3, 7, 16), (512, 8, 128, 32)])
def test_triton_alignment_places_the_pairs_as_the_torch_one_on_gpu(tokens, top_k, experts, block_m):
    torch.manual_seed(6)
    index = torch.rand(tokens, experts, device="cuda").argsort(-1)[:, :top_k]
    rows, block_expert, position = align_blocks_triton(index, experts, block_m)
    rows_t, block_expert_t, _ = align_blocks_torch(index, experts, block_m)
    assert block_expert.tolist() == block_expert_t.tolist()
    pairs = torch.arange(tokens * top_k, device="cuda")
    assert bool((rows[position] == pairs).all()) and int((rows >= 0).sum()) == tokens * top_k
    expert_of_row = block_expert.repeat_interleave(block_m)
    for expert in range(experts):  # each expert's rows hold its pairs (in any order)
        mine, mine_t = rows[(expert_of_row == expert) & (rows >= 0)], rows_t[(expert_of_row == expert) & (rows_t >= 0)]
        assert sorted(mine.tolist()) == sorted(mine_t.tolist())


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_the_experts_blocks_are_bit_equal_with_either_alignment_on_gpu(monkeypatch):
    import petri.engine.cuda.fp8_tier.fp8 as fp8
    import petri.engine.cuda.fused.batch1_experts as batch1

    index, weights, x, gate_up, down = _gpu_case(7)
    quantized = (*fp8.quantize_rows(gate_up), *fp8.quantize_rows(down))
    bf16 = experts_small_batch(x, index, weights, gate_up, down, "gelu_pytorch_tanh")
    fp8_out = fp8.experts_fp8_small_batch(x, index, weights, *quantized, "gelu_pytorch_tanh")
    monkeypatch.setattr(batch1, "align_blocks", align_blocks_torch)
    monkeypatch.setattr(fp8, "align_blocks", align_blocks_torch)
    assert torch.equal(bf16, experts_small_batch(x, index, weights, gate_up, down, "gelu_pytorch_tanh"))
    assert torch.equal(fp8_out, fp8.experts_fp8_small_batch(x, index, weights, *quantized, "gelu_pytorch_tanh"))
