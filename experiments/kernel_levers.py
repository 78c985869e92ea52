"""Issue 25's small kernel levers, each timed side by side with what it replaces, in one process on
one GPU, at the full-size architecture's shapes. One JSON object on stdout.

- ``align``: the small-batch experts' alignment (``petri.engine.cuda.fused.batch1_experts._align_kernel``) as
  it is, at 4, 8 and 16 warps, against the baseline's kernel (one layer at one sample: 256 tokens,
  top-8 of 128 experts, random routing); the two must give the same blocks and each pair's place;
- ``activation``: the experts' ``gelu(gate)·up`` over the padded rows of that layout, every row
  against the used rows only (``pairs``), in bf16 and with the FP8 tier's quantization;
- ``passes``: the sampler's logits passes (``triton_logit_pass``: softcap, probabilities for the
  self-conditioning, inverse-CDF draw) at 256 and 3,072 rows of 262,144, with the baseline's two
  kernels against this one's (since 2026-12-02 the first kernel's tile max and argmax come from one
  reduction and the bf16 max is the rounded max); the sampled tokens, entropies and probabilities
  must be identical; and the pass writing the probabilities in e4m3 (the opt-in FP8
  self-conditioning);
- ``router``: the routers' softmax, top-k, renormalisation and scale (``petri.engine.cuda.fused.fused_router``)
  against transformers' ops eager and compiled by Inductor (what the compiled tier ran before),
  at 256 and 3,072 tokens;
- ``attention``: a global layer's attention (16 query heads, 2 key/value heads, head dim 512,
  256 canvas queries per sample, 1,856 keys) through ``petri.engine.cuda.attention.split_attention`` against what
  transformers' SDPA path runs (the key/value heads repeated, then the memory-efficient kernel), at
  1 and 12 samples, with the relative difference of the outputs;
- ``dense``: the decoder's projections that read one input (a sliding layer's q, k, v; a global
  layer's q, k; the MLP's gate and up) as separate products against one product with the weights
  stacked, at 256 and 3,072 rows, in bf16 (``F.linear``) and FP8 (one row-wise quantization of
  the input, ``torch._scaled_mm`` per weight or once), with the per-step total over the 30 layers;
- ``self_conditioning``: the decoder's soft embedding, probabilities (rows, 262,144) times the
  embedding matrix, in bf16 against FP8 (the probabilities scaled per row, the matrix per column),
  at 256 and 3,072 rows, with the relative difference of the products;
- ``launch``: the launch shapes of the FP8 tier's row kernels (``petri.engine.cuda.fp8_tier.fp8_kernels``: the
  experts' ``gelu(gate)·up`` quantized, over 24,576 rows at 12 samples and the small-batch layout at
  one; the per-row quantization of 3,072 and 256 rows of 2,816), rows per program × warps, each
  checked bit-equal to the default launch (``default_ms``: ``fp8_kernels._launch_shape``'s); and the
  logits passes' tile width × warps at 256 and 3,072 rows, with the e4m3 probabilities and with
  bf16 ones, each with how many draws and probabilities differ from the launch of before this
  lever's (2,048-wide tiles, 8 warps: ``default_ms``) and the largest entropy difference (the
  passes' running sums are summed per tile, so another launch rounds them otherwise).
- ``norms``: a decoder layer's norms around its feed-forward blocks (``petri.engine.cuda.fused.fused_norms``:
  the feed-forward inputs, bf16 and with the FP8 tier's quantization of the MLP's and the experts'
  inputs, and the layer's output) at 256 and 3,072 rows of 2,816, the Triton kernels at 4, 8 and
  16 warps against the library's ops compiled by Inductor (what the compiled tier ran before:
  ``feedforward_inputs_reference`` with ``quantize_rows_torch`` of the two inputs,
  ``layer_output_reference``), with the largest difference from the eager ops (over its row's
  root mean square, in bf16 steps of it) and the fraction of outputs not equal to theirs.
- ``quantize``: where the time of a per-row e4m3 quantization goes (3,072 rows of 2,816 bf16, one
  row a program): the library's kernel (``fp8_kernels._quantize_rows_kernel``: amax, IEEE
  division ``div_rn``, e4m3) against variants of it, each one change: Triton's ``/``, a multiply by
  the row's reciprocal scale, a fixed scale (no amax), bf16 out (no e4m3 conversion), and a plain
  bf16 copy (the bandwidth reference); with how many e4m3 values each variant changes against
  ``quantize_rows_torch``.
- ``mlp_activation``: the dense MLP's ``gelu(gate)·up`` and the down product's row quantization in
  the FP8 tier (``petri::gelu_gate_quantized``, the fused norms' quantized MLP path since
  2026-12-03), at 256 and 3,072 rows of 2 × 2,112: the Triton kernel (its default launch, and 1
  row a program at 4, 8 and 16 warps) against the MLP's torch ops compiled by Inductor (what the
  compiled tier ran before), with how many e4m3 values each differs from the eager ops by.
- ``attention_inputs``: the decoder attention's q, k, v norms, rotary embedding and appending to the
  prompt's keys and values (``petri.engine.cuda.attention.attention_inputs``, the compiled tier's fused attention
  inputs) for a sliding layer (8 key/value heads of 256) and a global one (2 of 512, values from the
  keys), 16 query heads, 256 canvas positions, at one sample (the prompt's 1,023 and 1,600 positions
  a layer holds after a 1,600-token prompt) and at twelve (200): the Triton kernel (its default
  launch, and 1, 2, 4 or 8 heads a program at 1, 2 or 4 warps, each with how many outputs differ
  from the default launch's) against the library's ops compiled by Inductor (what the compiled tier
  ran before), with the per-step totals over the 25 sliding and 5 global layers and the
  differences from the eager ops.

The baseline kernels come from ``--baseline`` (a folder holding the library files of the commit to
compare with, e.g. ``git show BASE:petri/engine/cuda/fused/fused_logits.py``): each kernel named is taken from
that file's source and run in place of today's through the same launcher (their signatures are
the same; since the FP8 self-conditioning, ``_second_pass_kernel`` takes two arguments more, so
``passes`` needs a baseline from that commit on). Timing: ``triton.testing.do_bench_cudagraph`` (median, launches inside a CUDA graph).

    mkdir -p .baseline && for f in fused_logits batch1_experts; do git show HEAD:petri/engine/$f.py > .baseline/$f.py; done
    python experiments/kernel_levers.py --baseline .baseline > experiments/results/kernel_levers_h200.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import re
import sys
import tempfile
import textwrap
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

import petri.engine.cuda.fp8_tier.fp8_kernels as fp8_kernels  # noqa: E402
import petri.engine.cuda.fused.batch1_experts as batch1  # noqa: E402
import petri.engine.cuda.fused.fused_logits as fused_logits  # noqa: E402
from petri.engine.cuda.attention.split_attention import petri_split_sdpa  # noqa: E402
from petri.engine.cuda.fp8_tier.fp8 import FP8_MAX, INV_FP8_MAX, MIN_SCALE, activation_quantized  # noqa: E402
from petri.engine.cuda.fused.fused_experts import gated_activation  # noqa: E402
from petri.engine.cuda.fused.fused_router import route_top_k_reference, route_top_k_triton  # noqa: E402

EXPERTS, TOP_K, HIDDEN, WIDTH, VOCAB = 128, 8, 2816, 704, 262_144


def baseline_kernel(module, name: str, folder: Path):
    """Kernel ``name`` as the file ``folder/<module's file name>`` defines it, run with the module's
    own globals (its helpers and constants): the kernel of the commit compared with. (Triton reads a
    kernel's source from its file, so the kernel is written to one of its own first.)"""
    source = (folder / Path(module.__file__).name).read_text()
    match = re.search(rf"( *)@triton\.jit\n\1def {name}\(.*?(?=\n\1@triton\.jit|\n\S|\Z)", source, re.S)
    if match is None:
        raise SystemExit(f"{name} not found in {folder}")
    path = Path(tempfile.mkdtemp()) / f"baseline_{name}.py"
    path.write_text(textwrap.dedent(match.group(0)) + "\n")
    spec = importlib.util.spec_from_file_location(f"baseline_{name}", path)
    baseline = importlib.util.module_from_spec(spec)
    baseline.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    spec.loader.exec_module(baseline)
    return getattr(baseline, name)


@contextlib.contextmanager
def swapped(module, name: str, kernel):
    """``module.name`` is ``kernel`` while open."""
    current = getattr(module, name)
    setattr(module, name, kernel)
    try:
        yield
    finally:
        setattr(module, name, current)


def ms(fn) -> float:
    return round(do_bench_cudagraph(fn), 5)


def routing(tokens: int, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.rand(tokens, EXPERTS, device="cuda").argsort(-1)[:, :TOP_K].contiguous()


def align_part(folder: Path) -> dict:
    index = routing(256)
    old = baseline_kernel(batch1, "_align_kernel", folder)
    with swapped(batch1, "_align_kernel", old):
        want = batch1.align_blocks_triton(index, EXPERTS)
        result = {"baseline_ms": ms(lambda: batch1.align_blocks_triton(index, EXPERTS))}
    for warps in (4, 8, 16):
        got = batch1.align_blocks_triton(index, EXPERTS, num_warps=warps)
        same = torch.equal(got[1], want[1]) and torch.equal(got[2] // batch1.BLOCK_M, want[2] // batch1.BLOCK_M)
        same = same and torch.equal(got[0][got[2]].long(), torch.arange(index.numel(), device="cuda"))
        result[f"warps{warps}_ms"] = ms(lambda: batch1.align_blocks_triton(index, EXPERTS, num_warps=warps))
        result[f"warps{warps}_same_blocks"] = bool(same)
    return result


def activation_part() -> dict:
    rows, _, _ = batch1.align_blocks(routing(256), EXPERTS)
    torch.manual_seed(1)
    projected = torch.randn(rows.shape[0], 2 * WIDTH, device="cuda").bfloat16()
    used = rows >= 0
    skip, every = gated_activation(projected, "gelu_pytorch_tanh", pairs=rows), gated_activation(projected, "gelu_pytorch_tanh")
    q_skip, s_skip = activation_quantized(projected, "gelu_pytorch_tanh", pairs=rows)
    q_every, s_every = activation_quantized(projected, "gelu_pytorch_tanh")
    return {
        "rows": rows.shape[0], "used_rows": int(used.sum()),
        "bf16_every_row_ms": ms(lambda: gated_activation(projected, "gelu_pytorch_tanh")),
        "bf16_used_rows_ms": ms(lambda: gated_activation(projected, "gelu_pytorch_tanh", pairs=rows)),
        "bf16_used_rows_equal": bool(torch.equal(skip[used], every[used])),
        "fp8_every_row_ms": ms(lambda: activation_quantized(projected, "gelu_pytorch_tanh")),
        "fp8_used_rows_ms": ms(lambda: activation_quantized(projected, "gelu_pytorch_tanh", pairs=rows)),
        "fp8_used_rows_equal": _same_bits((q_skip, s_skip), (q_every, s_every), used),
    }


def passes_part(folder: Path) -> dict:
    old_first = baseline_kernel(fused_logits, "_logit_pass_kernel", folder)
    old = baseline_kernel(fused_logits, "_second_pass_kernel", folder)
    result = {}
    for rows in (256, 3072):
        torch.manual_seed(rows)
        raw = (torch.randn(rows, VOCAB, device="cuda") * 4).bfloat16()
        uniforms = torch.rand(rows, device="cuda")
        sc = torch.empty(rows, VOCAB, device="cuda", dtype=torch.bfloat16)
        inv_t = torch.tensor([1 / 0.8], device="cuda")

        def run():
            return fused_logits.triton_logit_pass(raw, None, inv_t, softcap=30.0, self_conditioning_out=sc,
                                                  probabilities=True, uniforms=uniforms)

        with swapped(fused_logits, "_logit_pass_kernel", old_first), swapped(fused_logits, "_second_pass_kernel", old):
            want, want_sc = run(), sc.clone()
            baseline = ms(run)
        got = run()
        fp8_sc, fp8_scale = torch.empty(rows, VOCAB, device="cuda", dtype=torch.float8_e4m3fn), torch.empty(rows, device="cuda")

        def run_fp8():  # the opt-in FP8 self-conditioning: e4m3 probabilities and a row scale
            return fused_logits.triton_logit_pass(raw, None, inv_t, softcap=30.0, self_conditioning_out=fp8_sc,
                                                  self_conditioning_scale=fp8_scale, probabilities=True, uniforms=uniforms)

        result[f"rows{rows}"] = {
            "baseline_ms": baseline, "ms": ms(run),
            "sampled_identical": bool(torch.equal(got.sampled, want.sampled)),
            "argmax_entropy_identical": bool(torch.equal(got.argmax, want.argmax) and torch.equal(got.entropy, want.entropy)),
            "probabilities_identical": bool(torch.equal(sc, want_sc)),
            "fp8_probabilities_ms": ms(run_fp8),
        }
    return result


def router_part() -> dict:
    compiled = torch.compile(route_top_k_reference)
    scale = torch.rand(EXPERTS, device="cuda").bfloat16() + 0.5
    result = {}
    for tokens in (256, 3072):
        scores = torch.randn(tokens, EXPERTS, device="cuda").bfloat16()
        compiled(scores, TOP_K, scale)
        result[f"tokens{tokens}"] = {
            "torch_eager_ms": ms(lambda: route_top_k_reference(scores, TOP_K, scale)),
            "torch_compiled_ms": ms(lambda: compiled(scores, TOP_K, scale)),
            "triton_ms": ms(lambda: route_top_k_triton(scores, TOP_K, scale)),
        }
    return result


def attention_part() -> dict:
    class Attention(torch.nn.Module):
        num_key_value_groups, is_causal = 8, False

    module = Attention()
    result = {}
    for batch in (1, 12):
        torch.manual_seed(batch)
        query = (torch.randn(batch, 256, 16, 512, device="cuda") * 0.1).bfloat16().transpose(1, 2)
        key = (torch.randn(batch, 2, 1856, 512, device="cuda") * 0.1).bfloat16()
        value = torch.randn(batch, 2, 1856, 512, device="cuda").bfloat16()

        def library():
            k, v = key.repeat_interleave(8, dim=1), value.repeat_interleave(8, dim=1)
            return torch.nn.functional.scaled_dot_product_attention(query, k, v, scale=1.0).transpose(1, 2).contiguous()

        got, _ = petri_split_sdpa(module, query, key, value, None, scaling=1.0)
        want = library()
        result[f"batch{batch}"] = {
            "library_ms": ms(library), "split_ms": ms(lambda: petri_split_sdpa(module, query, key, value, None, scaling=1.0)),
            "relative_difference": float((got.float() - want.float()).norm() / want.float().norm()),
        }
    return result


def dense_part() -> dict:
    from petri.engine.cuda.fp8_tier.fp8 import quantize_rows

    groups = {  # the stacked outputs of each group: (sliding layers' widths, global layers' widths)
        "qkv": ([4096, 2048, 2048], [8192, 1024]),
        "gate_up": ([2112, 2112], [2112, 2112]),
    }
    layers = {0: 25, 1: 5}  # 25 sliding and 5 global layers
    result = {}
    for rows in (256, 3072):
        torch.manual_seed(rows)
        x = torch.randn(rows, HIDDEN, device="cuda").bfloat16()
        for group, shapes in groups.items():
            entry = {}
            for kind, widths in enumerate(shapes):
                weights = [(torch.randn(w, HIDDEN, device="cuda") * 0.02).bfloat16() for w in widths]
                stacked = torch.cat(weights)
                quantized = [quantize_rows(w) for w in weights]
                stacked_q = quantize_rows(stacked)

                def bf16_separate():
                    return [torch.nn.functional.linear(x, w) for w in weights]

                def fp8_separate():
                    xq, xs = quantize_rows(x)
                    return [torch._scaled_mm(xq, wq.T, scale_a=xs[:, None], scale_b=ws[None], out_dtype=torch.bfloat16)
                            for wq, ws in quantized]

                def fp8_stacked():
                    xq, xs = quantize_rows(x)
                    return torch._scaled_mm(xq, stacked_q[0].T, scale_a=xs[:, None], scale_b=stacked_q[1][None],
                                            out_dtype=torch.bfloat16)

                same = torch.equal(torch.cat(fp8_separate(), dim=1), fp8_stacked())
                times = {"bf16_separate_ms": ms(bf16_separate),
                         "bf16_stacked_ms": ms(lambda: torch.nn.functional.linear(x, stacked)),
                         "fp8_separate_ms": ms(fp8_separate), "fp8_stacked_ms": ms(fp8_stacked),
                         "fp8_stacked_equal": bool(same)}
                entry["sliding" if kind == 0 else "global"] = times
            entry["per_step_saving_ms"] = {
                precision: round(sum(layers[kind] * (entry[name][f"{precision}_separate_ms"] - entry[name][f"{precision}_stacked_ms"])
                                     for kind, name in ((0, "sliding"), (1, "global"))), 4)
                for precision in ("bf16", "fp8")}
            result[f"rows{rows}_{group}"] = entry
    return result


def self_conditioning_part() -> dict:
    from petri.engine.cuda.fp8_tier.fp8 import quantize_rows

    torch.manual_seed(7)
    embedding = (torch.randn(VOCAB, HIDDEN, device="cuda") * 0.03).bfloat16()
    column_q, column_scale = quantize_rows(embedding.T.contiguous())  # (H, V): per hidden column
    result = {}
    for rows in (256, 3072):
        probabilities = torch.softmax(torch.randn(rows, VOCAB, device="cuda") * 3, dim=-1).bfloat16()
        want = (probabilities.float() @ embedding.float())
        bf16 = probabilities @ embedding
        pq, ps = quantize_rows(probabilities)

        def fp8():  # called in this iteration, before the del below (as every closure here)
            return torch._scaled_mm(pq, column_q.T, scale_a=ps[:, None], scale_b=column_scale[None],  # noqa: F821
                                    out_dtype=torch.bfloat16)

        got = fp8()
        result[f"rows{rows}"] = {
            "bf16_ms": ms(lambda: probabilities @ embedding), "fp8_ms": ms(fp8),  # noqa: F821
            "fp8_fast_ms": ms(lambda: torch._scaled_mm(pq, column_q.T, scale_a=ps[:, None], scale_b=column_scale[None],  # noqa: F821
                                                       out_dtype=torch.bfloat16, use_fast_accum=True)),
            "quantize_probabilities_ms": ms(lambda: quantize_rows(probabilities)),  # noqa: F821
            "bf16_relative_difference": float((bf16.float() - want).norm() / want.norm()),
            "fp8_relative_difference": float((got.float() - want).norm() / want.norm()),
        }
        del probabilities, pq, bf16, got, want
    return result


def mlp_activation_part() -> dict:
    from petri.engine.cuda.fp8_tier.fp8 import quantize_rows_torch

    intermediate = 2112

    def torch_ops(projected):
        gate, up = projected.split(intermediate, dim=-1)
        return quantize_rows_torch(torch.nn.functional.gelu(gate, approximate="tanh") * up)

    compiled = torch.compile(torch_ops)
    result = {}
    for rows in (256, 3072):
        torch.manual_seed(rows)
        projected = (torch.randn(rows, 2 * intermediate, device="cuda") * 2).bfloat16()
        want = torch_ops(projected)

        def kernel(warps=None):
            return fp8_kernels.gelu_gate_quantized(projected, INV_FP8_MAX, FP8_MAX, MIN_SCALE, num_warps=warps,
                                                   rows_per_program=1 if warps else None)

        at = {"inductor_ms": ms(lambda: compiled(projected)), "kernel_default_ms": ms(kernel)}
        for warps in (4, 8, 16):
            at[f"kernel_warps{warps}_ms"] = ms(lambda: kernel(warps))
        for name, got in (("inductor", compiled(projected)), ("kernel", kernel())):
            at[f"{name}_changed_values"] = int((got[0].view(torch.uint8) != want[0].view(torch.uint8)).sum())
        result[f"rows{rows}"] = at
    return result


def _same_bits(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor], used=None) -> bool:
    """Whether two (q e4m3, scale) results hold the same bits (on the ``used`` rows only, if given)."""
    pick = (lambda t: t) if used is None else (lambda t: t[used])
    return (torch.equal(pick(a[0]).view(torch.uint8), pick(b[0]).view(torch.uint8))
            and torch.equal(pick(a[1]), pick(b[1])))


def _row_kernel_shapes(run, used=None) -> dict:
    """``run(rows_per_program, num_warps)`` timed over rows per program × warps against the default launch."""
    want = run(None, None)
    result = {"default_ms": ms(lambda: run(None, None))}
    for per_program in (1, 2, 4, 8):
        for warps in (1, 2, 4, 8):
            result[f"rows{per_program}_warps{warps}_ms"] = ms(lambda: run(per_program, warps))
            if not _same_bits(run(per_program, warps), want, used):
                result[f"rows{per_program}_warps{warps}_differs"] = True
    timed = {k: v for k, v in result.items() if k.startswith("rows") and k.endswith("_ms")}
    result["best"] = min(timed, key=timed.get)
    return result


def _pass_shapes(rows: int, fp8: bool) -> dict:
    """The logits passes (probabilities, draw) at ``rows`` rows over tile widths × warps against the default."""
    torch.manual_seed(rows)
    raw = (torch.randn(rows, VOCAB, device="cuda") * 4).bfloat16()
    uniforms = torch.rand(rows, device="cuda")
    inv_t = torch.tensor([1 / 0.8], device="cuda")
    sc = torch.empty(rows, VOCAB, device="cuda", dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
    scale = torch.empty(rows, device="cuda") if fp8 else None

    def run(block: int = 2048, warps: int = 8):
        return fused_logits.triton_logit_pass(raw, None, inv_t, softcap=30.0, self_conditioning_out=sc,
                                              self_conditioning_scale=scale, probabilities=True, uniforms=uniforms,
                                              block=block, num_warps=warps)

    want = run()
    want_sc = sc.view(torch.uint8).clone() if fp8 else sc.clone()
    result = {"default_ms": ms(run)}
    for block in (1024, 2048, 4096, 8192):
        for warps in (4, 8, 16):
            got = run(block, warps)
            now = sc.view(torch.uint8) if fp8 else sc
            result[f"block{block}_warps{warps}"] = {
                "ms": ms(lambda: run(block, warps)),
                "draws_differing": int((got.sampled != want.sampled).sum()),
                "probabilities_differing": int((now != want_sc).sum()),
                "entropy_max_abs_diff": float((got.entropy - want.entropy).abs().max()),
            }
    result["best"] = min((k for k in result if k.startswith("block")), key=lambda k: result[k]["ms"])
    return result


def launch_part() -> dict:
    result = {}
    torch.manual_seed(2)
    projected = torch.randn(12 * 256 * TOP_K, 2 * WIDTH, device="cuda").bfloat16() * 3
    result["gelu_quant_rows24576"] = _row_kernel_shapes(lambda r, w: fp8_kernels.gelu_gate_quantized(
        projected, INV_FP8_MAX, FP8_MAX, MIN_SCALE, rows_per_program=r, num_warps=w))
    pairs, _, _ = batch1.align_blocks(routing(256), EXPERTS)
    padded = torch.randn(pairs.shape[0], 2 * WIDTH, device="cuda").bfloat16() * 3
    result[f"gelu_quant_small_batch_rows{pairs.shape[0]}"] = _row_kernel_shapes(
        lambda r, w: fp8_kernels.gelu_gate_quantized(padded, INV_FP8_MAX, FP8_MAX, MIN_SCALE, pairs, rows_per_program=r,
                                                     num_warps=w), used=pairs >= 0)
    for rows in (3072, 256):
        hidden = torch.randn(rows, HIDDEN, device="cuda").bfloat16()
        result[f"quantize_rows{rows}"] = _row_kernel_shapes(lambda r, w: fp8_kernels.quantize_rows_triton(
            hidden, INV_FP8_MAX, FP8_MAX, MIN_SCALE, rows_per_program=r, num_warps=w))
    for rows in (3072, 256):
        for fp8 in (True, False):
            result[f"passes_rows{rows}_{'fp8' if fp8 else 'bf16'}_probabilities"] = _pass_shapes(rows, fp8)
    return result


def norms_part() -> dict:
    from petri.engine.cuda.fp8_tier.fp8 import quantize_rows_torch
    from petri.engine.cuda.fused.fused_norms import (
        feedforward_inputs_reference,
        feedforward_inputs_triton,
        layer_output_reference,
        layer_output_triton,
    )

    def inductor_inputs(*args):
        r, pre, pre_2, router = feedforward_inputs_reference(*args)
        return r, quantize_rows_torch(pre), quantize_rows_torch(pre_2), router

    compiled = {"inputs_bf16": torch.compile(feedforward_inputs_reference), "inputs_fp8": torch.compile(inductor_inputs),
                "output": torch.compile(layer_output_reference)}
    result = {}
    for rows in (256, 3072):
        torch.manual_seed(rows)
        attention = (torch.randn(rows, HIDDEN, device="cuda") * 3).bfloat16()
        residual = torch.randn(rows, HIDDEN, device="cuda").bfloat16()
        weights = [(1 + 0.5 * torch.randn(HIDDEN, device="cuda")).bfloat16() for _ in range(6)]
        scalar = torch.tensor([0.8], device="cuda").bfloat16()
        inputs = (attention, residual, *weights[:4], HIDDEN ** -0.5, 1e-6)
        output = (attention * 0.7, residual * -1.3, residual, *weights[3:6], scalar, 1e-6)
        eager_inputs, eager_output = feedforward_inputs_reference(*inputs), layer_output_reference(*output)
        at = {}
        for name, reference in compiled.items():
            args = output if name == "output" else inputs
            reference(*args)
            at[name] = {"inductor_ms": ms(lambda: reference(*args))}
            for warps in (4, 8, 16):
                if name == "output":
                    run = lambda: layer_output_triton(*output, num_warps=warps)  # noqa: E731
                else:
                    run = lambda: feedforward_inputs_triton(*inputs, quantize=name == "inputs_fp8", num_warps=warps)  # noqa: E731
                at[name][f"warps{warps}_ms"] = ms(run)
            if name == "output":
                pairs = [(layer_output_triton(*output), eager_output)]
            else:
                got = feedforward_inputs_triton(*inputs, quantize=False)
                pairs = list(zip((got[0], got[1], got[3], got[5]), eager_inputs))
            at[name].update(_differences(pairs))
        result[f"rows{rows}"] = at
    return result


def _differences(pairs) -> dict:
    """Of (got, eager) pairs: the largest difference over its row's root mean square, in bf16 steps
    (2^-8) of it, and the largest fraction of outputs not equal."""
    return {"max_rms_steps": max(float(((g.float() - w.float()).abs()
                                        / (w.float().pow(2).mean(-1, keepdim=True).sqrt() * 2 ** -8)).max())
                                 for g, w in pairs),
            "unequal_fraction": max(float((g != w).float().mean()) for g, w in pairs)}


def attention_inputs_part() -> dict:
    from petri.engine.cuda.attention.attention_inputs import attention_inputs_reference, attention_inputs_triton

    compiled = torch.compile(attention_inputs_reference)
    # kind → (key/value heads, head dim, values are the keys, layers of the kind); the prompt's positions a layer
    # holds at one sample (1,600-token prompt: the sliding layers keep their window's 1,023) and at twelve (200)
    kinds = {"sliding": (8, 256, False, 25), "global": (2, 512, True, 5)}
    prompts = {1: {"sliding": 1023, "global": 1600}, 12: {"sliding": 200, "global": 200}}
    result = {}
    for batch, held in prompts.items():
        totals = {"inductor_ms_per_step": 0.0, "triton_ms_per_step": 0.0}
        for kind, (kv_heads, dim, keys_as_values, count) in kinds.items():
            torch.manual_seed(batch * dim)
            widths = [16 * dim, kv_heads * dim] + ([] if keys_as_values else [kv_heads * dim])
            parts = (torch.randn(batch, 256, sum(widths), device="cuda") * 3).bfloat16().split(widths, dim=-1)
            angles = torch.rand(1, 256, dim, device="cuda") * 6.3
            norm_weights = (1 + 0.5 * torch.randn(2, dim, device="cuda")).bfloat16()
            prompt = torch.randn(2, batch, kv_heads, held[kind], dim, device="cuda").bfloat16()
            args = (parts[0], parts[1], None if keys_as_values else parts[2], angles.cos().bfloat16(),
                    angles.sin().bfloat16(), norm_weights[0], norm_weights[1], prompt[0], prompt[1], dim, 1e-6)
            compiled(*args)
            at = {"inductor_ms": ms(lambda: compiled(*args)), "default_ms": ms(lambda: attention_inputs_triton(*args))}
            default = attention_inputs_triton(*args)
            for heads in (1, 2, 4, 8):
                for warps in (1, 2, 4):
                    launch = {"num_warps": warps, "heads_per_program": heads}
                    at[f"heads{heads}_warps{warps}_ms"] = ms(lambda: attention_inputs_triton(*args, **launch))
                    at[f"heads{heads}_warps{warps}_unequal"] = sum(
                        int((g != d).sum()) for g, d in zip(attention_inputs_triton(*args, **launch), default))
            at.update(_differences(list(zip(default, attention_inputs_reference(*args)))))
            totals["inductor_ms_per_step"] += count * at["inductor_ms"]
            totals["triton_ms_per_step"] += count * at["default_ms"]
            result[f"batch{batch}_{kind}"] = at
        result[f"batch{batch}"] = {k: round(v, 4) for k, v in totals.items()}
    return result


@triton.jit
def _quantize_variant_kernel(x_ptr, q_ptr, scale_ptr, width, inv_max, fp8_max, min_scale, BLOCK: tl.constexpr,
                             MODE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    valid = cols < width
    x = tl.load(x_ptr + row * width + cols, mask=valid, other=0.0).to(tl.float32)
    if MODE == 5:
        tl.store(q_ptr + row * width + cols, x.to(tl.bfloat16), mask=valid)
    else:
        if MODE == 3:
            scale = min_scale + 0.01
        else:
            scale = tl.maximum(tl.max(tl.where(valid, tl.abs(x), 0.0), axis=0) * inv_max, min_scale)
        if MODE == 1:
            y = x / scale
        elif MODE == 2:
            y = x * tl.math.div_rn(1.0, scale)
        else:
            y = tl.math.div_rn(x, scale)
        y = tl.minimum(tl.maximum(y, -fp8_max), fp8_max)
        if MODE == 4:
            tl.store(q_ptr + row * width + cols, y.to(tl.bfloat16), mask=valid)
        else:
            tl.store(q_ptr + row * width + cols, y.to(tl.float8e4nv), mask=valid)
        tl.store(scale_ptr + row, scale)


def quantize_part() -> dict:
    from petri.engine.cuda.fp8_tier.fp8 import quantize_rows_torch

    rows = 3072
    torch.manual_seed(0)
    x = torch.randn(rows, HIDDEN, device="cuda").bfloat16()
    want_q, _ = quantize_rows_torch(x)
    result = {"library_ms": ms(lambda: fp8_kernels.quantize_rows_triton(x, INV_FP8_MAX, FP8_MAX, MIN_SCALE))}
    names = {0: "div_rn", 1: "slash", 2: "reciprocal", 3: "fixed_scale", 4: "bf16_out", 5: "copy"}
    for mode, name in names.items():
        out = torch.empty(rows, HIDDEN, device="cuda", dtype=torch.bfloat16 if mode in (4, 5) else torch.float8_e4m3fn)
        scale = torch.empty(rows, device="cuda")
        for warps in (4, 8, 16):
            def run():
                _quantize_variant_kernel[(rows,)](x, out, scale, HIDDEN, INV_FP8_MAX, FP8_MAX, MIN_SCALE,
                                                  BLOCK=4096, MODE=mode, num_warps=warps, enable_fp_fusion=False)

            run()
            result[f"{name}_warps{warps}_ms"] = ms(run)
        if mode in (0, 1, 2):
            result[f"{name}_changed_values"] = int((out.view(torch.uint8) != want_q.view(torch.uint8)).sum())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="folder with the compared commit's library files")
    parser.add_argument("--parts", default="align,activation,passes,router,attention,dense,self_conditioning,launch,norms,quantize,"
                                            "mlp_activation,attention_inputs")
    args = parser.parse_args()
    parts = {"align": lambda: align_part(args.baseline), "activation": activation_part,
             "passes": lambda: passes_part(args.baseline), "router": router_part, "attention": attention_part,
             "dense": dense_part, "self_conditioning": self_conditioning_part, "launch": launch_part,
             "norms": norms_part, "quantize": quantize_part, "mlp_activation": mlp_activation_part,
             "attention_inputs": attention_inputs_part}
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name in args.parts.split(","):
        try:
            out[name] = parts[name]()
        except Exception as error:  # one part's failure must not hide the others' figures
            out[name] = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps({name: out[name]}), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
