"""The decoder's attention at the full-size model's shapes through each of PyTorch's kernels (issue 25):
which is fastest for the sliding layers (head dim 256, 16 query heads over 8 key/value heads) and the
global ones (head dim 512, 16 over 2) at one canvas and at twelve?

Why: at one canvas the sliding layers' cuDNN kernel, which SDPA picks, takes 33 µs a layer (0.84 ms
of a step over 25 layers) for 5.4 GFLOP, about 160 TFLOP/s: its 64-query tiles give 16 heads × 4 =
64 programs on 132 multiprocessors, each walking all 1,279 keys. FlashAttention-2's forward splits
the keys when the programs are few; the query heads of a key/value head can also be folded into
one longer query sequence. Each variant is timed as one call's median in a CUDA graph, with its
kernels and its largest difference from float32 attention. Among them are
``petri.engine.cuda.attention.split_attention``'s two methods for the global layers, each also compiled: the chunks
(``petri_split``) and the two products around a float32 softmax (``petri_products``), and for the
sliding layers ``petri.engine.cuda.attention.sliding_attention``'s folded flash call (``petri_flash_sliding``), at
one to four samples to find where cuDNN's kernel overtakes it.

Shapes (query; key and value): sliding one canvas (1, 16, 256, 256; 1, 8, 1279, 256), two to four
likewise, twelve
(12, 16, 256, 256; 12, 8, 456, 256); global one canvas (1, 16, 256, 512; 1, 2, 1856, 512), twelve
(12, 16, 256, 512; 12, 2, 456, 512): the prompt's 1,600 or 200 tokens (the sliding layers keep the
last 1,023) and the 256 canvas positions.

    python experiments/attention_check.py > experiments/results/attention_check_h200.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from blas_workspace import graphed_ms, kernels_of  # noqa: E402

from petri.engine.cuda.attention.sliding_attention import attend_flash  # noqa: E402
from petri.engine.cuda.attention.split_attention import chunks_for, products_attention, split_attention  # noqa: E402

#: name → (batch, query heads, key/value heads, keys, head dim); 256 queries each
SHAPES = {
    "sliding_1": (1, 16, 8, 1279, 256), "sliding_2": (2, 16, 8, 1279, 256), "sliding_3": (3, 16, 8, 1279, 256),
    "sliding_4": (4, 16, 8, 1279, 256), "sliding_12": (12, 16, 8, 456, 256),
    "global_1": (1, 16, 2, 1856, 512), "global_12": (12, 16, 2, 456, 512),
}
QUERIES = 256
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def reference(q, k, v) -> torch.Tensor:
    """Float32 attention, each key/value head repeated for its query heads: (B, H, L, D)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    weights = torch.softmax(q.float() @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1)
    return weights @ v


compiled_products_attention = torch.compile(products_attention, dynamic=False)


def variants(q, k, v) -> dict:
    """name → a call returning (B, H, L, D) in bf16."""
    batch, heads, length, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    folded = q.reshape(batch, kv_heads, group * length, dim)  # query head h uses key/value head h // group

    def sdpa(backend=None, fold=False):
        def call():
            query = folded if fold else q
            if backend is None:
                out = F.scaled_dot_product_attention(query, k, v, enable_gqa=not fold)
            else:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(query, k, v, enable_gqa=not fold)
            return out.reshape(batch, heads, length, dim)
        return call

    found = {"sdpa_default": sdpa()}
    for name, backend in BACKENDS.items():
        found[f"{name}_gqa"] = sdpa(backend)
        found[f"{name}_folded"] = sdpa(backend, fold=True)
    chunks = chunks_for(batch, k.shape[2])
    compiled_split = torch.compile(split_attention, dynamic=False)
    found["petri_split"] = lambda: split_attention(q, k, v, dim ** -0.5, chunks)
    if dim <= 256:
        found["petri_flash_sliding"] = lambda: split_attention(q, k, v, dim ** -0.5, 1, attend=attend_flash)
        found["petri_flash_sliding_compiled"] = lambda: compiled_split(q, k, v, dim ** -0.5, 1, attend_flash)
    found["petri_products"] = lambda: products_attention(q, k, v, dim ** -0.5)
    found["petri_products_compiled"] = lambda: compiled_products_attention(q, k, v, dim ** -0.5)
    found["petri_split_compiled"] = lambda: compiled_split(q, k, v, dim ** -0.5, chunks)
    found["efficient_folded_unsplit_compiled"] = lambda: compiled_split(q, k, v, dim ** -0.5, 1)
    return found


#: Dynamo compiles a function once per shape and argument set; past its limit (8) it runs the function
#: eagerly, which would time the uncompiled call under a compiled variant's name
RECOMPILE_LIMIT = 64


def main() -> None:
    torch.manual_seed(0)
    torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "recompile_limit": RECOMPILE_LIMIT,
              "cases": []}
    for shape, (batch, heads, kv_heads, keys, dim) in SHAPES.items():
        q = torch.randn(batch, heads, QUERIES, dim, device="cuda").bfloat16()
        k = torch.randn(batch, kv_heads, keys, dim, device="cuda").bfloat16()
        v = torch.randn(batch, kv_heads, keys, dim, device="cuda").bfloat16()
        want = reference(q, k, v)
        flops = 4 * batch * heads * QUERIES * keys * dim
        for name, call in variants(q, k, v).items():
            case = {"shape": shape, "variant": name}
            try:
                case["difference"] = float((call().float() - want).abs().max())
                case["ms"] = graphed_ms(lambda _i: call(), 16)
                case["tflop_s"] = round(flops / case["ms"] / 1e9, 1)
                case["kernels"] = kernels_of(call)
            except Exception as error:  # a backend that refuses the shape: recorded
                case["error"] = f"{type(error).__name__}: {error}"[:300]
            result["cases"].append(case)
            print(json.dumps({key: value for key, value in case.items() if key != "kernels"}), file=sys.stderr,
                  flush=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
