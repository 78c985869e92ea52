"""Issue 25: does the overlapped MLP (petri.engine.cuda.fused.overlapped_mlp) compute what the sequential blocks
compute, eagerly and under CUDA-graph capture? One decoder layer of the tiny model in the FP8 tier
(fp8-fast) and in bf16, its feed-forward blocks on random quantized inputs of several row counts:
for each form (sequential eager, overlapped eager with the MLP compiled or not, each captured in a
CUDA graph and replayed several times) the largest difference from the sequential eager blocks and
whether replays agree with one another; the blocks compiled by Inductor as one function (as inside
the sequential tier's layer graph), each output's difference apart. Then seeds sampled through the
compiled tier's graphs, with and without the overlap, twice each. One JSON object on stdout.

    python experiments/overlap_check.py > overlap_check.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_history import sample_seeds, tiny  # noqa: E402

from petri.engine.cuda.compiled_tier import compile_regions, uncompile_regions  # noqa: E402
from petri.engine.cuda.fp8_tier.fp8 import quantize_rows  # noqa: E402
from petri.engine.cuda.fused.overlapped_mlp import MLPBeside, feedforward_blocks, feedforward_mlp, overlapped_feedforward_blocks


def captured_replays(call, replays: int = 4) -> list:
    """``call()`` warmed on a side stream, captured, replayed ``replays`` times: the outputs of each."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()
    results = []
    for _ in range(replays):
        graph.replay()
        torch.cuda.synchronize()
        results.append([o.clone() for o in outputs])
    return results


def _difference(got, want) -> float:
    return max(float((g.float() - w.float()).abs().max()) for g, w in zip(got, want))


@torch.no_grad()
def blocks(precision: str, rows: int) -> dict:
    lm = tiny("cuda", precision)
    compile_regions(lm, overlapped_mlp=False)  # the stacked projections and FP8 modules as the tier has them
    layer = lm.model.model.decoder.layers[0]
    width = lm.model.config.get_text_config().hidden_size
    generator = torch.Generator(device="cuda").manual_seed(rows)
    x, x_2, router_input = (torch.randn(rows, width, device="cuda", generator=generator).bfloat16() for _ in range(3))
    quantize = precision != "bf16"
    if quantize:
        (pre, pre_scale), (pre_2, pre_2_scale) = quantize_rows(x), quantize_rows(x_2)
    else:
        pre, pre_scale, pre_2, pre_2_scale = x, None, x_2, None
    args = (layer, pre, pre_scale, pre_2, pre_2_scale, router_input, quantize)
    want = feedforward_blocks(*args)
    compiled_mlp = torch.compile(feedforward_mlp)
    forms = {
        "sequential": lambda: feedforward_blocks(*args),
        "overlapped_eager_mlp": lambda: overlapped_feedforward_blocks(MLPBeside(feedforward_mlp), *args),
        "overlapped_compiled_mlp": lambda: overlapped_feedforward_blocks(MLPBeside(compiled_mlp), *args),
        "compiled_mlp_same_stream": lambda: (compiled_mlp(layer, pre, pre_scale, quantize),
                                             feedforward_blocks(*args)[1]),
    }
    out = {}
    for name, call in forms.items():
        eager = call()
        torch.cuda.synchronize()
        replays = captured_replays(call)
        out[name] = {
            "eager_max_difference": _difference(eager, want),
            "captured_max_difference": [_difference(r, want) for r in replays],
            "replays_agree": all(_difference(r, replays[0]) == 0 for r in replays),
        }
    # the blocks traced and compiled by Inductor (as inside the sequential tier's layer graph), each output apart
    compiled_blocks = torch.compile(feedforward_blocks)(*args)
    out["compiled_blocks"] = {name: _difference([got], [w])
                              for name, got, w in zip(("mlp", "experts"), compiled_blocks, want)}
    uncompile_regions(lm)
    return out


def seeds(precision: str) -> dict:
    lm = tiny("cuda", precision)
    runs = {}
    for name, overlapped, same_stream in (("sequential", False, False), ("overlapped", True, False),
                                          ("overlapped_on_the_current_stream", True, True)):
        if same_stream:
            original = MLPBeside.stream
            MLPBeside.stream = lambda self, device: torch.cuda.current_stream(device)
        compile_regions(lm, overlapped_mlp=overlapped)
        lm.fast_tier.prompts.set_max_bytes(0)
        runs[name] = [[trajectory.argmax for trajectory in sample_seeds(lm)] for _ in range(2)]
        uncompile_regions(lm)
        if same_stream:
            MLPBeside.stream = original
    want = runs["sequential"][0]

    def equal(a, b):
        return all(np.array_equal(x, y) for x, y in zip(a, b))

    return {name: {"repeat_equal": equal(r[0], r[1]), "equal_to_sequential": equal(r[0], want),
                   "argmax_differing": int(sum((x != y).sum() for x, y in zip(r[0], want)))}
            for name, r in runs.items()}


def main() -> None:
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "blocks": {}, "seeds": {}}
    for precision in ("fp8-fast", "bf16"):
        for rows in (48, 256):
            result["blocks"][f"{precision}_{rows}"] = blocks(precision, rows)
            print(precision, rows, json.dumps(result["blocks"][f"{precision}_{rows}"]), file=sys.stderr, flush=True)
        result["seeds"][precision] = seeds(precision)
        print(precision, json.dumps(result["seeds"][precision]), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
