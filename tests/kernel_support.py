"""Helpers of the tests of petri's split kernels (tests/test_split_products.py,
tests/test_split_key_attention.py): running a snippet in Triton's interpreter on the CPU; on a GPU,
checking that a kernel gives the same bits over repeated and captured calls; a small model's logits
in one compiled-tier configuration."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def run_interpreted(source: str, timeout: float = 600) -> str:
    """``source`` run by this Python with the repository on its path and Triton interpreting
    (``TRITON_INTERPRET=1`` must be set before Triton is imported, hence a process of its own); its
    standard output. Fails the test with the end of its standard error when it exits non-zero."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", source], env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def assert_repeats_bit_for_bit(call, want: torch.Tensor, counters: torch.Tensor, times: int = 20) -> None:
    """``call()`` (a tensor, or a tuple whose first item is) equals ``want`` ``times`` times eagerly and
    ``times`` replays of one captured call, and leaves ``counters`` at zero (CUDA)."""
    def first(result):
        return result[0] if isinstance(result, tuple) else result

    assert all(torch.equal(first(call()), want) for _ in range(times))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = first(call())
    for _ in range(times):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, want)
    assert int(counters.count_nonzero()) == 0


def on_cuda(lm):
    """``lm`` (a tiny model's LoadedModel) moved to CUDA."""
    lm.model.to("cuda")
    return replace(lm, device=torch.device("cuda"))


def compiled_logits(lm, canvas, prompt, precision: str = "bf16", **levers) -> torch.Tensor:
    """``lm``'s float32 logits of ``canvas`` (B, L) after ``prompt`` (B, P) in the compiled tier traced
    with ``levers`` (``compile_for_sampling``'s keywords; Dynamo reset first) at ``precision``; the
    model back in bf16 and uncompiled after."""
    from petri.engine.compiled_tier import uncompile_regions
    from petri.engine.fp8 import set_precision
    from petri.engine.torch_model import compile_for_sampling

    torch._dynamo.reset()
    compile_for_sampling(lm, backend="eager", **levers)
    set_precision(lm, precision)
    try:
        with torch.no_grad():
            return lm.model(decoder_input_ids=canvas, input_ids=prompt).logits.float()
    finally:
        set_precision(lm, "bf16")
        uncompile_regions(lm)


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """The relative Frobenius distance of ``a`` from ``b``."""
    return float((a - b).norm() / b.norm())
