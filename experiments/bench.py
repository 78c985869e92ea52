"""Side-by-side benchmark: transformers' DiffusionGemma ``generate`` vs the petri sampler.

Both run in one process, interleaved, on the same model, batch, prompt length and fixed number of
denoising steps (adaptive stopping off: random weights never settle). The petri sampler pins three
anchors and records the full per-step log. Prints one JSON object.

    # full-size DiffusionGemma architecture (random bf16 weights, no download) on one GPU
    python experiments/bench.py --model full --device cuda --batch 12 --prompt-tokens 200 --steps 24
    # the embedded model on the CPU, with its shipped sampler settings (adaptive stopping on)
    python experiments/bench.py --model embedded --device cpu --adaptive

The full-size config follows google/diffusiongemma-26B-A4B-it's public config: hidden 2816,
30 layers (five of every six sliding, window 1024), 16 heads, 8 KV heads (2 on global layers), head
dim 256 (512 global), intermediate 2112, 128 experts top-8 of width 704, vocabulary 262,144, canvas 256.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from petri.dish import even_slots  # noqa: E402
from petri.engine.torch_model import LoadedModel, compile_for_sampling, load_model  # noqa: E402
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


def time_petri(lm: LoadedModel, prompt: torch.Tensor, settings: SamplerSettings, layouts) -> tuple[float, int]:
    sync(lm.device)
    start = time.perf_counter()
    traj = run_sampler(lm, prompt[0].tolist(), layouts, settings)
    sync(lm.device)
    return time.perf_counter() - start, int(traj.steps.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="full", help="full | embedded | a checkpoint folder")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--adaptive", action="store_true", help="keep the model's adaptive stopping (embedded model)")
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("--generate-cache", default=None,
                        help="cache_implementation for generate (e.g. static: transformers then compiles its step)")
    parser.add_argument("--compile-petri", action="store_true",
                        help="torch.compile the model forward the petri sampler calls (default mode, no CUDA graphs)")
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
    batch_prompt = prompt.expand(args.batch, -1).contiguous()

    if args.compile_petri:
        compile_for_sampling(lm)
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    # warm-up: the first call of each shape pays kernel selection and allocation
    warm = {"petri_s": time_petri(lm, prompt, settings, layouts)[0]}
    if not args.skip_generate:
        warm["generate_s"] = time_generate(lm, batch_prompt, settings, args.generate_cache)
    petri_times, generate_times, steps_seen = [], [], []
    for _ in range(args.repeats):  # interleaved, so drift hits both alike
        if not args.skip_generate:
            generate_times.append(time_generate(lm, batch_prompt, settings, args.generate_cache))
        seconds, steps = time_petri(lm, prompt, settings, layouts)
        petri_times.append(seconds)
        steps_seen.append(steps)

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
        "generate_cache": args.generate_cache,
        "compiled_petri": args.compile_petri,
        "canvas_length": lm.canvas_length,
        "build_s": round(build_s, 3),
        "warmup": {k: round(v, 3) for k, v in warm.items()},
        "petri_s": [round(t, 4) for t in petri_times],
        "petri_steps": steps_seen,
        "petri_median_s": round(statistics.median(petri_times), 4),
        "petri_ms_per_step": round(1000 * statistics.median(t / s for t, s in zip(petri_times, steps_seen)), 2),
    }
    if generate_times:
        result["generate_s"] = [round(t, 4) for t in generate_times]
        result["generate_median_s"] = round(statistics.median(generate_times), 4)
        if not args.adaptive:
            result["generate_ms_per_step"] = round(1000 * result["generate_median_s"] / args.steps, 2)
            result["ratio_petri_over_generate"] = round(result["petri_median_s"] / result["generate_median_s"], 3)
    if device.type == "cuda":
        result["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
