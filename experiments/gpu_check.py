"""GPU checks of the fast path's pieces (issue 14), one JSON object on stdout:

1. the fused logits pass at full size (S·L = 12 × 256 rows, V = 262,144, bf16 lm-head output with
   the model's softcap): exactness of argmax / sampled token / bf16 copy and the entropy error
   against the eager ops on fresh random inputs, and its time next to the eager sampler's ops and
   the noise draw (``triton.testing.do_bench``, median ms);
2. the tiny model in the compiled tier (compiled layers, fused experts, the sampler's softmax of the
   self-conditioning) inside the graphs: agreement with the eager loop over the same compiled layers;
3. the fused experts op (``petri.engine.cuda.fused.fused_experts``) at full size (T = 3,072 tokens, 128 experts
   top-8 of width 704, hidden 2,816): against transformers' ``grouped_mm`` experts on the same
   inputs (elements that differ, largest difference in bf16 ulps) and both timed, with the
   RMSNorm before them, eager and under ``torch.compile`` (what a compiled layer runs).

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

from petri.engine.cuda.fused.fused_logits import scalar_reciprocal, triton_logit_pass  # noqa: E402


def decoder_softmax_out(sc_logits: torch.Tensor) -> torch.Tensor:
    return sc_logits.softmax(dim=-1, dtype=torch.float32).to(torch.bfloat16)


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

    def eager_sampler_ops():  # what petri.engine.torch.sampler.run_sampler does per step after the model forward
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

    sc_logits = sc.clone()  # the last trial's self-conditioning logits bf16(x), as the decoder gets them

    def decoder_softmax():  # what the decoder does with them (transformers' DiffusionGemma decoder)
        decoder_softmax_out(sc_logits)

    probabilities = torch.empty_like(sc)
    triton_logit_pass(raw, noise, temp, softcap=cap, self_conditioning_out=probabilities, probabilities=True)
    ulps = (probabilities.view(torch.int16).int() - decoder_softmax_out(sc_logits).view(torch.int16).int()).abs()
    report["probabilities_vs_decoder_softmax"] = {
        "elements_differing": int((ulps > 0).sum()), "of": ulps.numel(), "max_ulp": int(ulps.max()),
    }
    uniforms = torch.rand(rows, device="cuda")
    drawn = triton_logit_pass(raw, None, temp, softcap=cap, uniforms=uniforms).sampled
    from petri.engine.cuda.fused.fused_logits import reference_logit_pass

    expected_draw = reference_logit_pass(raw, None, inv_temperature=temp, softcap=cap, uniforms=uniforms).sampled
    report["inverse_cdf_draw_vs_reference"] = {"rows_differing": int((drawn != expected_draw).sum()), "of": rows}
    times = {
        "fused_pass_ms": do_bench(lambda: triton_logit_pass(raw, noise, temp, softcap=cap, self_conditioning_out=sc),
                                  return_mode="median"),
        "fused_pass_probabilities_ms": do_bench(
            lambda: triton_logit_pass(raw, noise, temp, softcap=cap, self_conditioning_out=sc, probabilities=True),
            return_mode="median"),
        "decoder_softmax_ms": do_bench(decoder_softmax, return_mode="median"),
        "fused_pass_compiled_tier_ms": do_bench(  # probabilities and the inverse-CDF draw, uniforms included
            lambda: triton_logit_pass(raw, None, temp, softcap=cap, self_conditioning_out=sc, probabilities=True,
                                      uniforms=uniforms.uniform_()),
            return_mode="median"),
        "noise_draw_ms": do_bench(noise_draw, return_mode="median"),
        "eager_sampler_ops_ms": do_bench(eager_sampler_ops, return_mode="median"),
        "model_softcap_ops_ms": do_bench(softcap_ops, return_mode="median"),
    }
    bytes_moved = rows * vocab * (2 + 4 + 2)  # read bf16 + fp32 noise, write bf16
    times["fused_pass_tb_per_s"] = bytes_moved / times["fused_pass_ms"] / 1e9
    report.update({k: round(v, 3) for k, v in times.items()})
    return report


def tiny_cuda_model():
    """The tests' tiny random model (canvas 16) in bf16 on the GPU."""
    from petri.engine.torch.tiny import tiny_random_model

    lm = tiny_random_model(canvas_length=16)
    lm.model.to("cuda", torch.bfloat16)
    return replace(lm, device=torch.device("cuda"), dtype=torch.bfloat16)


def agreement(got, reference) -> dict:
    """Fractions of per-step argmax, accept masks and final tokens equal to an eager loop's
    (``test_fast_sampler.eager_race_loop``'s tuple)."""
    return {
        "argmax": float((got.argmax == reference[0]).mean()),
        "accepted": float((got.accepted == reference[2]).mean()),
        "final": float((got.final_ids == reference[4]).mean()),
    }


def compiled_tiny_check() -> dict:
    from test_fast_sampler import eager_race_loop

    from petri.core.trajectory import AnchorSpan, SamplerSettings
    from petri.engine.cuda.fast_sampler import run_sampler_fast
    from petri.engine.torch.model import compile_for_sampling

    lm = tiny_cuda_model()
    settings = SamplerSettings(max_denoising_steps=8, stability_threshold=None, confidence_threshold=None)
    layouts = [[AnchorSpan("a", 3, (11, 12))] for _ in range(4)]
    prompt = [5, 9, 17, 33, 2]
    began = time.perf_counter()
    compile_for_sampling(lm)
    got = run_sampler_fast(lm, prompt, layouts, settings, seed=3)
    first_s = time.perf_counter() - began
    # same compiled layers and draw, eager loop
    reference = eager_race_loop(lm, prompt, layouts, settings, seed=3, draw="inverse_cdf")
    lm.fast_tier.drop_sessions()
    # the compiled tier is not bit-exact (fused experts, the sampler's softmax): fractions equal
    return {"compile_and_first_seed_s": round(first_s, 2), "agreement_with_eager_race_loop": agreement(got, reference)}


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
        reciprocal = torch.tensor(1.0, device="cuda") / torch.tensor(0.55, device="cuda")
        for label, x in (("div", logits / 0.55), ("mul_f32_reciprocal", logits * reciprocal)):
            bad = sc != x
            out[f"{name}_{label}_mismatches"] = int(bad.sum())
            if bad.any():
                i = bad.nonzero()[0]
                out[f"{name}_{label}_example"] = [float(sc[i[0], i[1]]), float(x[i[0], i[1]]), float(logits[i[0], i[1]])]
    return out


def tiny_options_check() -> dict:
    """Tiny bf16 model, 10 steps: which fast-path piece (graph, Triton pass) departs from the loop."""
    from test_fast_sampler import PROMPT, eager_race_loop, three_anchors

    from petri.core.trajectory import SamplerSettings
    from petri.engine.cuda.fast_sampler import FastOptions, run_sampler_fast

    lm = tiny_cuda_model()
    settings = SamplerSettings(max_denoising_steps=10, stability_threshold=None, confidence_threshold=None)
    layouts = three_anchors(6, lm.vocab_size)
    reference = eager_race_loop(lm, PROMPT, layouts, settings, seed=0)
    report = {}
    for options in (FastOptions(graph=False, fused=False), FastOptions(graph=True, fused=False),
                    FastOptions(graph=False, fused=True), FastOptions()):
        lm.fast_tier.drop_sessions()
        got = run_sampler_fast(lm, PROMPT, layouts, settings, seed=0, options=options)
        report[f"graph={options.graph},fused={options.fused}"] = {
            "argmax": bool((got.argmax == reference[0]).all()),
            "accepted": bool((got.accepted == reference[2]).all()),
            "final": bool((got.final_ids == reference[4]).all()),
            "entropy_max_abs_diff": float(abs(got.entropy - reference[1]).max()),
        }
    # the compiled tier's sampler options without compilation: agreement with the loop drawing alike
    reference = eager_race_loop(lm, PROMPT, layouts, settings, seed=0, draw="inverse_cdf")
    lm.fast_tier.drop_sessions()
    got = run_sampler_fast(lm, PROMPT, layouts, settings, seed=0,
                           options=FastOptions(softmax_self_conditioning=True, inverse_cdf_draw=True))
    report["softmax_self_conditioning,inverse_cdf_draw (fractions equal)"] = agreement(got, reference)
    return report


def experts_check(tokens: int = 3072, hidden: int = 2816, experts: int = 128, top_k: int = 8, width: int = 704) -> dict:
    """The fused experts op against transformers' grouped_mm experts module (module docstring, 3)."""
    from transformers import DiffusionGemmaConfig
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaTextExperts
    from triton.testing import do_bench

    from petri.engine.cuda.fused.fused_experts import moe_experts
    from petri.engine.torch.configs import MINIMAL_VISION_CONFIG

    config = DiffusionGemmaConfig(
        text_config={"hidden_size": hidden, "num_experts": experts, "top_k_experts": top_k,
                     "moe_intermediate_size": width, "hidden_activation": "gelu_pytorch_tanh",
                     "num_hidden_layers": 1, "layer_types": ["full_attention"], "enable_moe_block": True},
        vision_config=dict(MINIMAL_VISION_CONFIG),
    ).text_config
    config._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    module = DiffusionGemmaTextExperts(config).to("cuda", torch.bfloat16)
    with torch.no_grad():
        module.gate_up_proj.normal_(0, hidden**-0.5)
        module.down_proj.normal_(0, width**-0.5)
    report = {"tokens": tokens, "experts": experts, "top_k": top_k, "trials": []}
    for trial in range(3):
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * (1 + trial)
        scores = torch.randn(tokens, experts, device="cuda").softmax(-1)
        weights, index = scores.topk(top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        with torch.no_grad():
            theirs = module(x, index, weights)
            ours = moe_experts(x, index, weights, module.gate_up_proj, module.down_proj, "gelu_pytorch_tanh")
        differ = theirs != ours
        ulp = (theirs.view(torch.int16).int() - ours.view(torch.int16).int()).abs()
        report["trials"].append({
            "elements_differing": int(differ.sum()), "of": theirs.numel(),
            "max_ulp": int(ulp.max()), "max_abs": float((theirs.float() - ours.float()).abs().max()),
        })

    from petri.engine.cuda.fused.fused_experts import gated_activation

    values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    gate = values[~torch.isnan(values)].view(-1, 1).cuda()
    expected = torch.nn.functional.gelu(gate, approximate="tanh")
    for contract in (True, False):  # nvcc's fma contraction of x + κ·x³, or not
        got = gated_activation(torch.cat([gate, torch.ones_like(gate)], dim=1), "gelu_pytorch_tanh", contract=contract)
        report[f"gelu_bf16_inputs_differing_contract_{contract}"] = int((got.view(torch.int16) != expected.view(torch.int16)).sum())

    norm = torch.nn.RMSNorm(hidden, eps=1e-6, device="cuda", dtype=torch.bfloat16)

    def theirs_block(x, index, weights):
        return module(norm(x), index, weights)

    def ours_block(x, index, weights):
        return moe_experts(norm(x), index, weights, module.gate_up_proj, module.down_proj, "gelu_pytorch_tanh")

    with torch.no_grad():
        for name, fn in (("transformers", theirs_block), ("fused", ours_block)):
            report[f"{name}_eager_ms"] = round(do_bench(lambda: fn(x, index, weights)), 4)
            compiled = torch.compile(fn)
            compiled(x, index, weights)
            report[f"{name}_compiled_ms"] = round(do_bench(lambda: compiled(x, index, weights)), 4)
    return report


if __name__ == "__main__":
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if sys.argv[1:] == ["experts"]:
        print(json.dumps({**results, "experts": experts_check()}))
        sys.exit()
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
