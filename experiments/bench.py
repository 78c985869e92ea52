"""Side-by-side benchmark: transformers' DiffusionGemma ``generate`` vs the petri sampler.

Configurations (``--configs``) run one after another in one process, each a warm-up call then
``--repeats`` timed calls, on the same model, batch, prompt length and fixed number of denoising steps
(adaptive stopping off: random weights never settle): ``generate`` (eager), ``generate_static``
(transformers' compiled static-cache step), ``petri_eager``, ``petri_fast`` (graphs + fused pass,
with per-step forward / sampling / logging GPU time and host synchronisations), ``petri_fast_compiled``
(the same with regionally compiled layers). The petri samplers pin three anchors and record the full
per-step log. Peak GPU memory per configuration. Prints one JSON object (and ``--out`` keeps it).

    # full-size DiffusionGemma architecture (random bf16 weights, no download) on one GPU
    python experiments/bench.py --model full --device cuda --batch 12 --prompt-tokens 200 --steps 24
    # the first request of a fresh process (build, compile, capture, one seed; --profile adds a profile)
    python experiments/bench.py --model full --device cuda --first-request
    # the embedded model on the CPU, with its shipped sampler settings (adaptive stopping on)
    python experiments/bench.py --model embedded --device cpu --adaptive --configs generate,petri_eager

The full-size config follows google/diffusiongemma-26B-A4B-it's public config: hidden 2816,
30 layers (five of every six sliding, window 1024), 16 heads, 8 KV heads (2 on global layers), head
dim 256 (512 global), intermediate 2112, 128 experts top-8 of width 704, vocabulary 262,144, canvas 256.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

_PROCESS_START = time.perf_counter()  # before torch and transformers are imported
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from petri.dish import even_slots  # noqa: E402
from petri.engine.torch_model import LoadedModel, compile_for_sampling, load_model  # noqa: E402
from petri.engine.fast_sampler import run_sampler_fast  # noqa: E402
from petri.engine.torch_sampler import generate_kwargs, run_sampler  # noqa: E402
from petri.trajectory import AnchorSpan, SamplerSettings  # noqa: E402


def full_size_config():
    from transformers import DiffusionGemmaConfig

    layers = 30
    text = {
        "vocab_size": 262_144,
        "hidden_size": 2816,
        "intermediate_size": 2112,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_global_key_value_heads": 2,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 1024,
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)],
        "num_experts": 128,
        "top_k_experts": 8,
        "moe_intermediate_size": 704,
        "enable_moe_block": True,
        "attention_k_eq_v": True,
    }
    from petri.engine.configs import MINIMAL_VISION_CONFIG

    return DiffusionGemmaConfig(text_config=text, vision_config=dict(MINIMAL_VISION_CONFIG), canvas_length=256)


def build_full_size(device: torch.device) -> LoadedModel:
    from transformers import DiffusionGemmaForBlockDiffusion

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = DiffusionGemmaForBlockDiffusion(full_size_config()).eval()
    finally:
        torch.set_default_dtype(previous)
    return LoadedModel(model=model, tokenizer=None, model_id="diffusiongemma-26B-A4B-architecture-random", device=device, dtype=torch.bfloat16)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def three_anchor_layouts(batch: int, length: int, vocab: int) -> list[list[AnchorSpan]]:
    lengths = [1, 2, 1]
    starts = even_slots(lengths, length)
    spans = [AnchorSpan(f"concept{i}", s, tuple(range(100 + 10 * i, 100 + 10 * i + n))) for i, (s, n) in enumerate(zip(starts, lengths))]
    assert max(t for a in spans for t in a.token_ids) < vocab
    return [spans for _ in range(batch)]


def time_generate(lm: LoadedModel, prompt: torch.Tensor, settings: SamplerSettings, cache: str | None = None) -> float:
    sync(lm.device)
    start = time.perf_counter()
    lm.model.generate(
        prompt,
        max_new_tokens=lm.canvas_length,
        eos_token_id=None,
        **generate_kwargs(settings),
        **({"cache_implementation": cache} if cache else {}),
    )
    sync(lm.device)
    return time.perf_counter() - start


def time_petri(lm: LoadedModel, prompt: torch.Tensor, settings: SamplerSettings, layouts, fast: bool = False,
               phases: dict | None = None) -> tuple[float, int]:
    sync(lm.device)
    start = time.perf_counter()
    if fast:
        traj = run_sampler_fast(lm, prompt[0].tolist(), layouts, settings, phase_times=phases)
    else:
        traj = run_sampler(lm, prompt[0].tolist(), layouts, settings, fast=False)
    sync(lm.device)
    return time.perf_counter() - start, int(traj.steps.max())


# --- issue 14: configurations measured one at a time, each warm-up + repeats + peak memory ---
# generate first: petri_fast_compiled compiles the decoder layers in place, which generate would use too
CONFIGS = ("generate", "generate_static", "petri_eager", "petri_fast", "petri_fast_compiled")


def measure(name: str, lm: LoadedModel, prompt, settings, layouts, repeats: int) -> dict:
    """First call (warm-up: capture/compilation included), then ``repeats`` timed calls."""
    device = lm.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    batch_prompt = prompt.expand(len(layouts), -1).contiguous()
    phases: dict = {}
    if name == "petri_fast_compiled":
        began = time.perf_counter()
        compile_for_sampling(lm)  # regional: lazy, so the compilation lands in the first call
        phases["compile_call_s"] = time.perf_counter() - began

    def once() -> tuple[float, int]:
        if name.startswith("generate"):
            return time_generate(lm, batch_prompt, settings, "static" if name == "generate_static" else None), settings.max_denoising_steps
        return time_petri(lm, prompt, settings, layouts, fast=name.startswith("petri_fast"), phases=phases)

    torch.manual_seed(0)
    warm, _ = once()
    times, steps = [], []
    for _ in range(repeats):
        seconds, n = once()
        times.append(seconds)
        steps.append(n)
    result = {
        "warmup_s": round(warm, 3),
        "s": [round(t, 4) for t in times],
        "median_s": round(statistics.median(times), 4),
        "ms_per_step": round(1000 * statistics.median(t / n for t, n in zip(times, steps)), 2),
        "steps": steps,
    }
    if "forward_ms" in phases:  # per-step GPU time of each graph, last timed call
        for key in ("forward_ms", "sampling_ms", "logging_ms"):
            result[key + "_per_step"] = round(statistics.median(phases[key]), 3)
        result["host_syncs_per_step"] = phases["host_syncs_per_step"]
    if "compile_call_s" in phases:
        result["compile_call_s"] = round(phases["compile_call_s"], 3)
    if device.type == "cuda":
        result["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return result


def profile_seed(lm: LoadedModel, prompt, settings, layouts, top: int = 25) -> dict:
    """One fast-path seed under torch.profiler: total CUDA kernel time and the ``top`` kernels."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        seconds, _ = time_petri(lm, prompt, settings, layouts, fast=True)
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if device_us:
            rows.append({"name": event.key[:120], "ms": round(device_us / 1000, 3), "count": event.count})
    rows.sort(key=lambda r: -r["ms"])
    return {"seed_s": round(seconds, 3), "kernel_ms_total": round(sum(r["ms"] for r in rows), 1), "top": rows[:top]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="full", help="full | embedded | a checkpoint folder")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--adaptive", action="store_true", help="keep the model's adaptive stopping (embedded model)")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="comma-separated, measured in this order: " + ", ".join(CONFIGS))
    parser.add_argument("--first-request", action="store_true",
                        help="measure only the first request of a fresh process: build, regional compile "
                             "(caches as left by earlier runs), capture and one seed, end to end")
    parser.add_argument("--no-compile", action="store_true", help="with --first-request: no compilation")
    parser.add_argument("--profile", action="store_true",
                        help="with --first-request: then profile one more seed (torch.profiler, CUDA time by kernel)")
    parser.add_argument("--out", default=None, help="also write the JSON here (after each configuration)")
    args = parser.parse_args()

    from petri.engine.device import resolve_device

    device = resolve_device(args.device)
    built = time.perf_counter()
    lm = build_full_size(device) if args.model == "full" else load_model(None if args.model == "embedded" else args.model, device=str(device))
    build_s = time.perf_counter() - built
    settings = lm.default_settings() if args.model != "full" else SamplerSettings()
    settings = replace(settings, max_denoising_steps=args.steps)
    if not args.adaptive:
        settings = replace(settings, stability_threshold=None, confidence_threshold=None)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, lm.vocab_size, (1, args.prompt_tokens), generator=generator).to(device)
    layouts = three_anchor_layouts(args.batch, lm.canvas_length, lm.vocab_size)
    result = {
        "model": lm.model_id,
        "device": str(device),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "dtype": str(lm.dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "max_steps": args.steps,
        "adaptive_stopping": args.adaptive,
        "canvas_length": lm.canvas_length,
        "build_s": round(build_s, 3),
        "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    }

    def write() -> None:
        text = json.dumps(result, indent=2)
        if args.out:
            Path(args.out).write_text(text)
        return text

    if args.first_request:
        if not args.no_compile:
            compile_for_sampling(lm)
        seconds, _ = time_petri(lm, prompt, settings, layouts, fast=True)
        result["first_request"] = {
            "compiled": not args.no_compile,
            "seed_s": round(seconds, 3),
            "process_to_result_s": round(time.perf_counter() - _PROCESS_START, 3),
            "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        }
        if args.profile:
            result["profile"] = profile_seed(lm, prompt, settings, layouts)
        print(write())
        return

    for name in args.configs.split(","):
        try:
            result[name] = measure(name, lm, prompt, settings, layouts, args.repeats)
        except Exception as error:  # record and go on: one failing configuration must not lose the rest
            result[name] = {"error": f"{type(error).__name__}: {error}"[:2000]}
        write()
        print(name, json.dumps(result[name]), flush=True)
    medians = {k: result[k]["median_s"] for k in CONFIGS if "median_s" in result.get(k, {})}
    generate_best = min((v for k, v in medians.items() if k.startswith("generate")), default=None)
    for key, value in medians.items():
        if key.startswith("petri") and generate_best:
            result[key]["over_fastest_generate"] = round(value / generate_best, 3)
    print(write())


if __name__ == "__main__":
    main()
