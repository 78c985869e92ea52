"""Programmatic dependent launch of petri's Triton kernels (petri.engine.dependent_launch, issue 25;
opt-in, Hopper).

On the CPU: the launch options off unless a block says otherwise, and the block's setting undone
after it (refused, changing nothing, off CUDA: tests/test_fast_tier.py); every Triton kernel in petri begins with
the wait (before any load or store: the contract that makes the launch safe) and every launch
passes the options (read from the source, so no kernel is missed); the compiled tier records it,
names it ``+pdl``, forgets it when uncompiled, and the fast sampler and the encoder's passes launch
as their model's tier says, whatever another model's says. On a Hopper GPU (skipped elsewhere):
the experts block, a chain of five of petri's kernels each reading the one before, gives the same
bits launched dependent, eagerly and captured, and the compiled tier's seeds are the same in bf16
and fp8-fast."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import petri
from petri.engine import dependent_launch
from petri.engine.compiled_tier import uncompile_regions
from petri.engine.dependent_launch import as_the_tier_says, dependent_launch_used, launch_options, launched_dependent
from petri.engine.tiny import tiny_random_model
from petri.engine.torch_model import compile_for_sampling
from experiment_support import experiment_script

PETRI = Path(petri.__file__).parent


def _triton_kernels_and_launches():
    """(kernels, launches): every ``@triton.jit`` function named ``*_kernel`` in petri as
    (file, node), and every ``<name>_kernel[grid](...)`` call as (file, node)."""
    kernels, launches = [], []
    for path in sorted(PETRI.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any("triton.jit" in ast.unparse(d) for d in node.decorator_list) \
                    and node.name.endswith("_kernel"):
                kernels.append((path.name, node))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("_kernel"):
                launches.append((path.name, node))
    return kernels, launches


def test_every_kernel_waits_before_anything_else():
    kernels, _ = _triton_kernels_and_launches()
    assert len(kernels) >= 13  # the engine's kernels: experts, norms, router, logits, FP8, attention inputs
    for file, kernel in kernels:
        last = kernel.args.args[-1]
        assert last.arg == "PDL" and ast.unparse(last.annotation) == "tl.constexpr", (file, kernel.name)
        docstring = isinstance(kernel.body[0], ast.Expr) and isinstance(kernel.body[0].value, ast.Constant)
        body = kernel.body[1:] if docstring else kernel.body
        assert ast.unparse(body[0]) == "wait_then_release(PDL)", (file, kernel.name)


def test_every_launch_passes_the_options():
    kernels, launches = _triton_kernels_and_launches()
    assert {node.func.value.id for _, node in launches} == {kernel.name for _, kernel in kernels}
    for file, call in launches:
        assert any(k.arg is None and ast.unparse(k.value) == "launch_options()" for k in call.keywords), \
            (file, call.func.value.id)


def test_the_options_are_the_launch_as_before_outside_a_dependent_block():
    assert launch_options() == {"PDL": False} and not dependent_launch_used()
    with launched_dependent(True):
        assert launch_options() == {"PDL": True, "launch_pdl": True}
        with launched_dependent(False):
            assert launch_options() == {"PDL": False}
        assert dependent_launch_used()
    assert launch_options() == {"PDL": False}
    with pytest.raises(RuntimeError), launched_dependent(True):
        raise RuntimeError  # an error inside the block undoes it too
    assert not dependent_launch_used()


def test_the_compiled_tier_records_names_and_forgets_it(monkeypatch):
    """As on a Hopper GPU (the reason stood in: on the CPU no Triton kernel runs, torch's ops do)."""
    monkeypatch.setattr("petri.engine.compiled_tier.dependent_launch_reason", lambda device: None)
    lm = tiny_random_model(canvas_length=16, num_layers=2, seed=1, dtype=torch.bfloat16)
    try:
        compile_for_sampling(lm, backend="eager", dependent_launch=True)
        assert lm.fast_tier.dependent_launch
        assert lm.fast_tier.fast_name(1).startswith("fast+compiled") and lm.fast_tier.fast_name(1).endswith("+pdl")
        uncompile_regions(lm)
        assert not lm.fast_tier.dependent_launch and "+pdl" not in lm.fast_tier.fast_name(1)
        compile_for_sampling(lm, backend="eager")
        assert not lm.fast_tier.dependent_launch and "+pdl" not in lm.fast_tier.fast_name(1)
    finally:
        uncompile_regions(lm)


def test_each_model_launches_as_its_own_tier_says(monkeypatch):
    """Two models in one process, one of them launching dependent: what a launch inside each one's
    fast sampler call and encoder pass sees (the launches spied on; on the CPU the kernels' torch
    forms run, so the spy stands in for a launch)."""
    from petri.engine import encoder_graphs, fast_sampler

    seen = []

    class Seen(Exception):
        pass

    def start_batch(lm, *args):
        seen.append(("sample", launch_options()))
        raise Seen  # the call has shown what it launches with

    monkeypatch.setattr(fast_sampler, "start_batch", start_batch)
    monkeypatch.setattr(encoder_graphs.EncoderGraphs, "_encode",
                        lambda self, lm, ids: seen.append(("encode", launch_options())))
    one, other = (tiny_random_model(canvas_length=16, num_layers=2, seed=s, dtype=torch.bfloat16) for s in (1, 2))
    one.fast_tier.dependent_launch = True
    for lm in (one, other, one):
        with pytest.raises(Seen):
            fast_sampler.run_sampler_fast(lm, [5, 9], [[]])
        lm.fast_tier.encoder_graphs.encode(lm, torch.tensor([[5, 9]]))
    on, off = {"PDL": True, "launch_pdl": True}, {"PDL": False}
    assert seen == [("sample", on), ("encode", on), ("sample", off), ("encode", off), ("sample", on), ("encode", on)]
    assert not dependent_launch_used()
    assert as_the_tier_says(lambda lm: dependent_launch_used())(one)


# ---- on a Hopper GPU --------------------------------------------------------------------------------

HOPPER = torch.cuda.is_available() and dependent_launch.dependent_launch_reason(torch.device("cuda")) is None
GPU = pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU and a Triton with grid dependency control")


@GPU
def test_the_experts_block_is_the_same_launched_dependent_on_gpu():
    """The small-batch experts at the full-size batch-1 shapes: alignment, two grouped GEMMs, the
    activation and the combine, five kernels in a row each reading the one before (a missing wait
    reads a buffer still being written); eagerly and replayed from a CUDA graph, 20 times each."""
    from petri.engine.batch1_experts import experts_small_batch

    generator = torch.Generator(device="cuda").manual_seed(0)
    tokens, hidden, width, experts, top_k = 256, 2816, 704, 128, 8
    x = torch.randn(tokens, hidden, device="cuda", generator=generator).bfloat16()
    scores = torch.rand(tokens, experts, device="cuda", generator=generator)
    weights, index = scores.topk(top_k, dim=1)
    gate_up = (torch.randn(experts, 2 * width, hidden, device="cuda", generator=generator) / 50).bfloat16()
    down = (torch.randn(experts, hidden, width, device="cuda", generator=generator) / 25).bfloat16()

    def block():
        return (experts_small_batch(x, index, weights, gate_up, down, "gelu_pytorch_tanh"),)

    want = block()[0]
    with launched_dependent(True):
        for _ in range(20):
            assert torch.equal(block()[0], want)
        for (replayed,) in experiment_script("overlap_check").captured_replays(block, replays=20):
            assert torch.equal(replayed, want)


@GPU
@pytest.mark.parametrize("precision", ["bf16", "fp8-fast"])
def test_the_compiled_tiers_seeds_are_the_same_launched_dependent_on_gpu(precision):
    from petri.engine.fast_sampler import run_sampler_fast
    from petri.engine.fp8 import set_precision
    from petri.trajectory import AnchorSpan, SamplerSettings

    lm = tiny_random_model(canvas_length=32, num_layers=3, seed=5, dtype=torch.bfloat16)
    lm.model.to("cuda")
    lm = replace(lm, device=torch.device("cuda"))
    settings = SamplerSettings(max_denoising_steps=6, stability_threshold=None, confidence_threshold=None)
    runs = {}
    try:
        for dependent in (False, True):
            torch._dynamo.reset()  # each round compiles from the same start (no shapes remembered as dynamic)
            compile_for_sampling(lm, dependent_launch=dependent)
            set_precision(lm, precision)
            for batch in (1, 3):
                layouts = [[AnchorSpan("a", 2, (11,))] for _ in range(batch)]
                runs[dependent, batch] = run_sampler_fast(lm, [5, 9, 17, 33], layouts, settings, seed=7)
            uncompile_regions(lm)
    finally:
        uncompile_regions(lm)
    for batch in (1, 3):
        before, after = runs[False, batch], runs[True, batch]
        tag = "" if precision == "bf16" else "+" + precision  # the precision ends the name
        assert after.sampler == before.sampler.removesuffix(tag) + "+pdl" + tag
        np.testing.assert_array_equal(after.argmax, before.argmax)
        np.testing.assert_array_equal(after.entropy, before.entropy)
