"""Loading a DiffusionGemma checkpoint holds one copy of its weights (issue 62).

The loader (:func:`petri.engine.torch.model.load_diffusion_gemma`) reads a bf16 checkpoint through
transformers' ``from_pretrained``: its tensors map the safetensors file (no copy in memory until read)
and ``.to(device)`` then moves them one parameter at a time, so the device never holds two copies of
a weight. Measured here on the CPU in a fresh process: the peak resident memory (``VmHWM``) over the
load and a read of every parameter, above the resident memory before the load. Reading every
parameter counts the mapped file's pages, so the figure sees the weights' storage whether they stay
mapped or were copied; a deliberately doubled load (every weight cloned) proves the measurement sees
a second copy.

The checkpoint: a 4-layer DiffusionGemma of about 110 M parameters (211 MiB in bf16), saved in bf16
as the real one is stored; loading a float32 checkpoint as bf16 costs a converted copy in host memory
(about three times the bf16 size at the peak, measured the same way), but still one copy on the GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
#: the stated margin over the model's size: allocator arenas, the tokenizer, transient buffers
MARGIN_FRACTION, MARGIN_MIB = 0.15, 24

CHILD = r"""
import json, sys
import torch
from petri.engine.torch.model import load_diffusion_gemma

def status():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}

folder, doubled = sys.argv[1], sys.argv[2] == "doubled"
before = status()["VmRSS"]
lm = load_diffusion_gemma(folder, "load-test", torch.device("cpu"), torch.bfloat16)
kept = [p.detach().clone() for p in lm.model.parameters()] if doubled else []
with torch.no_grad():
    for p in lm.model.parameters():  # every page of every weight read (mapped pages count once read)
        p.sum()
size = sum(p.numel() * p.element_size() for p in lm.model.parameters())
print(json.dumps({"size": size, "peak_over_before": status()["VmHWM"] - before, "before": before}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import DiffusionGemmaForBlockDiffusion

    from petri.engine.torch.configs import small_diffusion_gemma_config
    from petri.engine.torch.tiny import build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("bf16-checkpoint")
    tokenizer = build_tiny_tokenizer()
    config = small_diffusion_gemma_config(
        vocab_size=len(tokenizer), canvas_length=16, hidden_size=512, num_layers=4, num_heads=4, num_kv_heads=2,
        head_dim=64, intermediate_size=1024, num_experts=16, top_k_experts=2, expert_size=1024)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = DiffusionGemmaForBlockDiffusion(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder


def measure(folder: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), mode], capture_output=True, text=True,
                          env=env, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
def test_load_peak_is_one_copy_and_a_doubled_load_is_seen(checkpoint):
    single = measure(checkpoint, "single")
    size = single["size"]
    assert size > 150 * 2**20  # large enough that the margin's fixed part is small beside it
    assert single["peak_over_before"] <= size * (1 + MARGIN_FRACTION) + MARGIN_MIB * 2**20, single
    assert single["peak_over_before"] >= 0.9 * size, single  # the weights' storage is seen at all
    doubled = measure(checkpoint, "doubled")
    assert doubled["peak_over_before"] >= 1.8 * size, doubled  # the measurement sees a second copy
