"""Issue 25: the prompt encoder's pass on the full-size architecture (random bf16 weights), uncompiled
against the compiled tier's (``compile_regions``: the encoder's layers compiled with the fused experts
and router ops), at the bench's two prompt lengths, side by side in one process. One JSON object on
stdout: per form and length the median of ``--repeats`` synchronised passes (after a first one that
compiles), and, for each form at the longest length, a torch.profiler table of one pass (CUDA time
by kernel and the pass's host time), to see where the time goes; then the compiled pass captured as
a CUDA graph per length (``petri.engine.cuda.encoder_graphs``): capture time, the memory the graph keeps,
replays, and bit-equality of its cache with the uncaptured compiled pass's.

    python experiments/encode_time.py --lengths 200,1600 > experiments/results/encode_time_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import build_full_size, median_ms, sync, time_encode  # noqa: E402

from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions  # noqa: E402
from petri.engine.cuda.encoder_graphs import EncoderGraph  # noqa: E402
from petri.engine.torch.step import encode_prompt_once  # noqa: E402


def profiled(lm, prompt, top: int = 15) -> dict:
    from torch.profiler import ProfilerActivity, profile

    sync(lm.device)
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        encode_prompt_once(lm, prompt)
        sync(lm.device)
    wall = 1000 * (time.perf_counter() - start)
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if device_us and event.device_type.name == "CUDA":
            rows.append({"name": event.key[:100], "ms": round(device_us / 1000, 3), "count": event.count})
    rows.sort(key=lambda r: -r["ms"])
    return {"wall_ms_profiled": round(wall, 1), "kernel_ms_total": round(sum(r["ms"] for r in rows), 2),
            "kernels": sum(r["count"] for r in rows), "top": rows[:top]}


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="200,1600")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lm = build_full_size(torch.device("cuda"))
    generator = torch.Generator().manual_seed(0)
    lengths = [int(n) for n in args.lengths.split(",")]
    prompts = {n: torch.randint(3, lm.vocab_size, (1, n), generator=generator).to(lm.device) for n in lengths}
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "repeats": args.repeats}
    for form in ("eager", "compiled"):
        if form == "compiled":
            compile_regions(lm)
        first = {}
        for n, prompt in prompts.items():
            sync(lm.device)
            start = time.perf_counter()
            encode_prompt_once(lm, prompt)
            sync(lm.device)
            first[n] = round(time.perf_counter() - start, 2)
        out[form] = {"first_call_s": first,
                     "ms": {n: time_encode(lm, p, args.repeats, captured=False) for n, p in prompts.items()},
                     "profile": profiled(lm, prompts[max(lengths)])}
        print(json.dumps({form: out[form]["ms"]}), file=sys.stderr, flush=True)
    out["captured"] = {n: captured(lm, prompt, args.repeats) for n, prompt in prompts.items()}
    print(json.dumps({"captured": out["captured"]}), file=sys.stderr, flush=True)
    uncompile_regions(lm)
    print(json.dumps(out, indent=1))


def captured(lm, prompt, repeats: int) -> dict:
    """The compiled pass captured (``petri.engine.cuda.encoder_graphs.EncoderGraph``): the capture's time
    (its warm-up pass included), the memory the graph keeps (allocated and reserved by the caching
    allocator, MiB), the median of ``repeats`` replays with the cache copied out, and whether the
    copy equals the uncaptured compiled pass's cache bit for bit."""
    length = prompt.shape[1]
    sync(lm.device)
    torch.cuda.empty_cache()  # else blocks cached by the passes before can be released during the capture (a 2026-12-03
    # run read -47,652 MiB "reserved" at 200 tokens that way)
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    start = time.perf_counter()
    graph = EncoderGraph(lm, length)
    sync(lm.device)
    result = {"capture_s": round(time.perf_counter() - start, 2),
              "held_mib": round((torch.cuda.memory_allocated() - allocated) / 2**20, 1),
              "reserved_mib": round((torch.cuda.memory_reserved() - reserved) / 2**20, 1)}
    result["ms"] = median_ms(lm.device, lambda: graph.encode(prompt), repeats)
    cache = graph.encode(prompt)
    want = encode_prompt_once(lm, prompt)
    result["bit_equal"] = all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
                              for a, b in zip(cache.layers, want.layers))
    return result


if __name__ == "__main__":
    main()
