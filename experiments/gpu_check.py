"""GPU checks of the fast path's pieces (issue 14), one JSON object on stdout:

1. the fused logits pass at full size (S·L = 12 × 256 rows, V = 262,144, bf16 lm-head output with
   the model's softcap): exactness of argmax / sampled token / bf16 copy and the entropy error
   against the eager ops on fresh random inputs, and its time next to the eager sampler's ops and
   the noise draw (``triton.testing.do_bench``, median ms);
2. the tiny model with regionally compiled layers inside the graphs: same tokens as uncompiled.

    python experiments/gpu_check.py
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from petri.engine.fused_logits import scalar_reciprocal, triton_logit_pass  # noqa: E402


def kernel_check(rows: int = 3072, vocab: int = 262_144, trials: int = 3) -> dict:
    from triton.testing import do_bench

    cap, temperature = 30.0, 0.6
    temp = torch.tensor([scalar_reciprocal(temperature)], device="cuda")
    report = {"rows": rows, "vocab": vocab, "trials": []}
    for trial in range(trials):  # fresh random inputs each trial
        raw = (torch.randn(rows, vocab, device="cuda") * (2.0 + 4 * trial)).to(torch.bfloat16)
        noise = torch.empty(rows, vocab, device="cuda").exponential_().log_()
        sc = torch.full((rows, vocab), float("nan"), dtype=torch.bfloat16, device="cuda")  # poisoned
        out = triton_logit_pass(raw, noise, temp, softcap=cap, self_conditioning_out=sc)
        mismatched = {"argmax": 0, "sampled": 0, "sc": 0}
        worst_entropy_error = 0.0
        for part in torch.split(torch.arange(rows, device="cuda"), 256):
            x = torch.tanh(raw[part].float() / cap) * cap / temperature  # the model's, then the sampler's ops
            mismatched["argmax"] += int((x.argmax(-1) != out.argmax[part]).sum())
            mismatched["sampled"] += int(((x - noise[part]).argmax(-1) != out.sampled[part]).sum())
            mismatched["sc"] += int((x.to(torch.bfloat16) != sc[part]).sum())
            h = torch.distributions.Categorical(logits=x).entropy()
            scale = 2e-6 * x.abs().amax(-1) + 1e-5 * h
            worst_entropy_error = max(worst_entropy_error, float(((out.entropy[part] - h).abs() / scale).max()))
        report["trials"].append({"mismatched": mismatched, "entropy_error_over_tolerance": worst_entropy_error})

    logits = torch.tanh(raw.float() / cap) * cap

    def eager_sampler_ops():  # what petri.engine.torch_sampler.run_sampler does per step after the model forward
        x = logits / temperature
        probs = torch.softmax(x, dim=-1, dtype=torch.float32)
        torch.multinomial(probs, 1)
        torch.argmax(x, -1)
        torch.distributions.Categorical(logits=x).entropy()
        x.to(torch.bfloat16)

    def softcap_ops():
        torch.tanh(raw.float() / cap) * cap

    def noise_draw():
        noise.exponential_()
        noise.log_()

    times = {
        "fused_pass_ms": do_bench(lambda: triton_logit_pass(raw, noise, temp, softcap=cap, self_conditioning_out=sc),
                                  return_mode="median"),
        "noise_draw_ms": do_bench(noise_draw, return_mode="median"),
        "eager_sampler_ops_ms": do_bench(eager_sampler_ops, return_mode="median"),
        "model_softcap_ops_ms": do_bench(softcap_ops, return_mode="median"),
    }
    bytes_moved = rows * vocab * (2 + 4 + 2)  # read bf16 + fp32 noise, write bf16
    times["fused_pass_tb_per_s"] = bytes_moved / times["fused_pass_ms"] / 1e9
    report.update({k: round(v, 3) for k, v in times.items()})
    return report


def compiled_tiny_check() -> dict:
    from petri.engine.fast_sampler import _SESSIONS, run_sampler_fast
    from petri.engine.torch_model import compile_for_sampling
    from petri.engine.tiny import tiny_random_model
    from petri.trajectory import AnchorSpan, SamplerSettings
    from test_fast_sampler import eager_race_loop

    lm = tiny_random_model(canvas_length=16)
    lm.model.to("cuda", torch.bfloat16)
    lm = replace(lm, device=torch.device("cuda"), dtype=torch.bfloat16)
    settings = SamplerSettings(max_denoising_steps=8, stability_threshold=None, confidence_threshold=None)
    layouts = [[AnchorSpan("a", 3, (11, 12))] for _ in range(4)]
    prompt = [5, 9, 17, 33, 2]
    began = time.perf_counter()
    compile_for_sampling(lm)
    got = run_sampler_fast(lm, prompt, layouts, settings, seed=3)
    first_s = time.perf_counter() - began
    reference = eager_race_loop(lm, prompt, layouts, settings, seed=3)  # same compiled layers, eager loop
    _SESSIONS.pop(lm.model, None)
    same = {
        "argmax": bool((got.argmax == reference[0]).all()),
        "accepted": bool((got.accepted == reference[2]).all()),
        "final": bool((got.final_ids == reference[4]).all()),
    }
    return {"compile_and_first_seed_s": round(first_s, 2), "equal_to_eager_race_loop": same}


def x_exactness(rows: int = 512, vocab: int = 262_144) -> dict:
    """Kernel's scaled logits x (float32 copy) vs torch's ops (true division, and multiplication by
    the float32 reciprocal), element by element."""
    out = {}
    temp = torch.tensor([scalar_reciprocal(0.55)], device="cuda")
    for name, dtype, cap in (("fp32_nocap", torch.float32, None), ("bf16_cap", torch.bfloat16, 30.0)):
        raw = (torch.randn(rows, vocab, device="cuda") * 8).to(dtype)
        noise = torch.empty(rows, vocab, device="cuda").exponential_().log_()
        sc = torch.full((rows, vocab), float("nan"), device="cuda")
        triton_logit_pass(raw, noise, temp, softcap=cap, self_conditioning_out=sc)
        logits = raw.float() if cap is None else torch.tanh(raw.float() / cap) * cap
        for label, x in (("div", logits / 0.55), ("mul_f32_reciprocal", logits * (torch.tensor(1.0, device="cuda") / torch.tensor(0.55, device="cuda")))):
            bad = sc != x
            out[f"{name}_{label}_mismatches"] = int(bad.sum())
            if bad.any():
                i = bad.nonzero()[0]
                out[f"{name}_{label}_example"] = [float(sc[i[0], i[1]]), float(x[i[0], i[1]]), float(logits[i[0], i[1]])]
    return out


def tiny_options_check() -> dict:
    """Tiny bf16 model, 10 steps: which fast-path piece (graph, Triton pass) departs from the loop."""
    from petri.engine.fast_sampler import _SESSIONS, FastOptions, run_sampler_fast
    from petri.engine.tiny import tiny_random_model
    from petri.trajectory import SamplerSettings
    from test_fast_sampler import PROMPT, eager_race_loop, three_anchors

    lm = tiny_random_model(canvas_length=16)
    lm.model.to("cuda", torch.bfloat16)
    lm = replace(lm, device=torch.device("cuda"), dtype=torch.bfloat16)
    settings = SamplerSettings(max_denoising_steps=10, stability_threshold=None, confidence_threshold=None)
    layouts = three_anchors(6, lm.vocab_size)
    reference = eager_race_loop(lm, PROMPT, layouts, settings, seed=0)
    report = {}
    for options in (FastOptions(graph=False, fused=False), FastOptions(graph=True, fused=False),
                    FastOptions(graph=False, fused=True), FastOptions()):
        _SESSIONS.pop(lm.model, None)
        got = run_sampler_fast(lm, PROMPT, layouts, settings, seed=0, options=options)
        report[f"graph={options.graph},fused={options.fused}"] = {
            "argmax": bool((got.argmax == reference[0]).all()),
            "accepted": bool((got.accepted == reference[2]).all()),
            "final": bool((got.final_ids == reference[4]).all()),
            "entropy_max_abs_diff": float(abs(got.entropy - reference[1]).max()),
        }
    return report


if __name__ == "__main__":
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    results["kernel"] = kernel_check()
    print(json.dumps(results["kernel"]), flush=True)
    results["x_exactness"] = x_exactness()
    print(json.dumps(results["x_exactness"]), flush=True)
    results["tiny_options"] = tiny_options_check()
    print(json.dumps(results["tiny_options"]), flush=True)
    try:
        results["compiled_tiny"] = compiled_tiny_check()
    except Exception as error:  # report, don't lose the rest
        results["compiled_tiny"] = {"error": f"{type(error).__name__}: {error}"[:3000]}
    print(json.dumps(results))
