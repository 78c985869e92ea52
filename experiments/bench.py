"""Side-by-side benchmark: transformers' DiffusionGemma ``generate`` vs the petri sampler.

Configurations (``--configs``) run one after another in one process, each a warm-up call then ``--repeats``
timed calls, on the same model, batch, prompt length and fixed number of denoising steps (adaptive stopping
off: random weights never settle): ``generate`` (eager), ``generate_static`` (transformers' compiled
static-cache step), ``petri_eager``, ``petri_fast`` (graphs + fused pass, with per-step forward / sampling /
logging GPU time and host synchronisations), ``petri_fast_fused_experts`` (the same with the experts op of
``petri.engine.cuda.fused.fused_experts``), ``petri_fast_compiled_plain`` (graphs + fused pass + regionally compiled
layers, transformers' experts), ``petri_fast_compiled_experts`` (compiled layers around the fused experts op),
``petri_fast_compiled_softmax`` (and the decoder's self-conditioning softmax done by the sampler's pass) and
``petri_fast_compiled`` (and the inverse-CDF draw); ``petri_fast_fp8`` and ``petri_fast_compiled_fp8``: the
exact and the compiled tier with the FP8 tier's weights (``petri.engine.cuda.fp8_tier.fp8``, ``--precision fp8``);
``petri_fast_compiled_fp8fast``: the compiled tier in ``--precision fp8-fast``; ``petri_fast_compiled_small``:
the compiled tier with ``petri.engine.cuda.fused.batch1_experts`` for calls of few tokens (what ``--compile`` does;
``petri_fast_compiled`` leaves that lever out); ``petri_fast_compiled_small_fp8`` and
``petri_fast_compiled_small_fp8fast``: the same in the FP8 tier (its small-batch op).
``petri_fast_compiled_small_eager_encoder``, ``petri_fast_compiled_small_torch_topk``,
``petri_fast_compiled_small_unsplit`` and ``petri_fast_compiled_small_unstacked`` (also
``..._fp8fast_unstacked``): the compiled tier without one of issue 25's later levers (its prompt encoder
uncompiled; the routers' ``torch.topk``; the global layers' attention unsplit; the projections unstacked);
``petri_fast_compiled_small_fp8fast_sc_fp8``: fp8-fast with the opt-in FP8 self-conditioning
(``FastOptions.fp8_self_conditioning``). ``petri_fast_compiled_small_unfused_norms`` and
``petri_fast_compiled_small_fp8fast_sc_fp8_unfused_norms``: the default and the fastest configuration without
the fused norms (``petri.engine.cuda.fused.fused_norms``; Inductor's fusions of the library's norms instead).
``petri_fast_compiled_small_uncaptured_encoder`` and
``petri_fast_compiled_small_fp8fast_sc_fp8_uncaptured_encoder``: the same two with the prompt encoder's pass
run uncaptured (no ``petri.engine.cuda.encoder_graphs``).
``petri_fast_compiled_small_fp8fast_sc_fp8_overlapped_mlp``: the fastest configuration with each FP8 decoder
layer's dense MLP on a side CUDA stream beside its experts (``petri.engine.cuda.fused.overlapped_mlp``, opt-in until
2026-12-03 and on by default since, so now the same as ``petri_fast_compiled_small_fp8fast_sc_fp8``, whose
sequential form is ``petri_fast_compiled_small_fp8fast_sc_fp8_sequential_mlp``;
``bench_h200_shapes_b1_b12_overlapped_mlp.json`` also has ``petri_fast_compiled_small_overlapped_mlp``, from
when bf16 layers were overlapped too). ``petri_fast_compiled_small_autotuned`` and
``petri_fast_compiled_small_fp8fast_sc_fp8_autotuned``: the default and the fastest configuration compiled
without Inductor's deterministic mode (their kernels' configurations picked by timing, as every run before
2026-12-03 was; ``petri.engine.torch.decoder_hooks.compile_function``).
``petri_fast_compiled_small_unfused_attention_inputs`` and
``petri_fast_compiled_small_fp8fast_sc_fp8_unfused_attention_inputs``: the default and the fastest
configuration without the fused attention inputs (``petri.engine.cuda.attention.attention_inputs``; Inductor's fusions
of the library's q, k, v norms, rotary embedding and ``torch.cat`` instead).
``petri_fast_compiled_small_chunked_global_attention`` and
``petri_fast_compiled_small_fp8fast_sc_fp8_chunked_global_attention``: the default and the fastest
configuration with the global layers' attention by the memory-efficient kernel over chunks of the keys
(``petri.engine.cuda.attention.split_attention``'s ``"chunks"`` method, the default before 2026-12-03; today's is
``"products"``). ``petri_fast_compiled_small_sdpa_sliding`` and
``petri_fast_compiled_small_fp8fast_sc_fp8_sdpa_sliding``: the same two with the sliding layers' attention by
SDPA's choice at every batch (``petri.engine.cuda.attention.sliding_attention``'s flash kernel at one sample off, the
tier before 2026-12-04). ``petri_fast_compiled_small_masked_encoder`` and
``petri_fast_compiled_small_fp8fast_sc_fp8_masked_encoder``: the same two with the prompt encoder's sliding
layers by SDPA with the band mask (``petri.engine.cuda.attention.encoder_attention`` off, the tier before 2026-12-04).
``petri_fast_compiled_small_fp8fast_sc_fp8_fp8_encoder``: the fastest configuration with the prompt encoder in
FP8 too (opt-in: ``petri.engine.cuda.fp8_tier.fp8.set_precision``'s ``fp8_encoder``). (Results from before 2026-12-02
name ``petri_fast_compiled_small_split_attention``: the tier of then, split attention opt-in, with it on.)
Each configuration puts the model in its mode first (``MODES``: its keyword arguments of ``set_model_mode``).
The petri samplers pin three anchors and record the full per-step log. Peak GPU memory per configuration.
Prints one JSON object (and ``--out`` keeps it).

``ms_per_step`` counts a prompt encode in every call (the model's kept prompts are cleared before
each timed call, as before they existed; the warm-up is two calls, so that where the tier captures
the encoder's pass, ``petri.engine.cuda.encoder_graphs``, the timed calls replay it as every later prompt
of that length would); ``ms_per_step_prompt_kept`` is the same configuration
called again with the same prompt, which takes the kept encoder cache
(``petri.engine.torch.prompt_cache``: what a study's repeated templates get); ``encode_ms`` is one encoder
pass timed alone as a request runs it (replayed where the tier keeps a graph of the length),
``encode_uncaptured_ms`` the same pass uncaptured, and ``outside_graphs_ms_per_step`` what a step
costs beyond its three graphs' GPU time.

    # full-size DiffusionGemma architecture (random bf16 weights, no download) on one GPU
    python experiments/bench.py --model full --device cuda --batch 12 --prompt-tokens 200 --steps 24
    # batch 1 and batch 12 in one run, the FP8 tier beside bf16 (issue 25)
    python experiments/bench.py --model full --shapes 1x1600,12x200 \\
        --configs generate,petri_fast,petri_fast_fp8,petri_fast_compiled,petri_fast_compiled_fp8
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
from dataclasses import replace  # noqa: E402 - after the clock starts (the process's own start time)
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from petri.core.dish import even_slots  # noqa: E402
from petri.core.trajectory import AnchorSpan, SamplerSettings  # noqa: E402
from petri.engine.cuda.compiled_tier import uncompile_regions  # noqa: E402
from petri.engine.cuda.encoder_graphs import DEFAULT_ENCODER_GRAPH_LENGTHS, set_encoder_graph_lengths  # noqa: E402
from petri.engine.cuda.fast_sampler import run_sampler_fast  # noqa: E402
from petri.engine.torch.fast_tier import FastOptions  # noqa: E402
from petri.engine.torch.model import LoadedModel, compile_for_sampling, load_model  # noqa: E402
from petri.engine.torch.sampler import generate_kwargs, run_sampler  # noqa: E402


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
    from petri.engine.torch.configs import MINIMAL_VISION_CONFIG

    return DiffusionGemmaConfig(text_config=text, vision_config=dict(MINIMAL_VISION_CONFIG), canvas_length=256)


def build_full_size(device: torch.device) -> LoadedModel:
    """The full-size architecture with random bf16 weights on ``device``: built on the meta device and
    materialised once there (:func:`petri.engine.torch.meta_build.build_random_on_device`; a build
    straight under ``torch.device("cuda")`` ran out of memory on an 80 GB H100, issue 62)."""
    from petri.engine.torch.meta_build import build_random_on_device

    model = build_random_on_device(full_size_config(), device, torch.bfloat16)
    return LoadedModel(model=model, tokenizer=None, model_id="diffusiongemma-26B-A4B-architecture-random", device=device,
                       dtype=torch.bfloat16)


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
# every configuration first puts the model in its mode (generate's: uncompiled), so any order works
CONFIGS = (
    "generate", "generate_static", "petri_eager", "petri_fast", "petri_fast_fused_experts",
    "petri_fast_compiled_plain", "petri_fast_compiled_experts", "petri_fast_compiled_softmax", "petri_fast_compiled",
    "petri_fast_fp8", "petri_fast_compiled_fp8", "petri_fast_compiled_small", "petri_fast_compiled_fp8fast",
    "petri_fast_compiled_small_fp8", "petri_fast_compiled_small_fp8fast", "petri_fast_compiled_small_eager_encoder",
    "petri_fast_compiled_small_torch_topk", "petri_fast_compiled_small_unsplit", "petri_fast_compiled_small_unstacked",
    "petri_fast_compiled_small_fp8fast_unstacked", "petri_fast_compiled_small_fp8fast_sc_fp8",
    "petri_fast_compiled_small_unfused_norms", "petri_fast_compiled_small_fp8fast_sc_fp8_unfused_norms",
    "petri_fast_compiled_small_uncaptured_encoder", "petri_fast_compiled_small_fp8fast_sc_fp8_uncaptured_encoder",
    "petri_fast_compiled_small_fp8fast_sc_fp8_overlapped_mlp",
    "petri_fast_compiled_small_autotuned", "petri_fast_compiled_small_fp8fast_sc_fp8_autotuned",
    "petri_fast_compiled_small_unfused_attention_inputs", "petri_fast_compiled_small_fp8fast_sc_fp8_unfused_attention_inputs",
    "petri_fast_compiled_small_fp8fast_sc_fp8_sequential_mlp", "petri_fast_compiled_small_chunked_global_attention",
    "petri_fast_compiled_small_fp8fast_sc_fp8_chunked_global_attention", "petri_fast_compiled_small_sdpa_sliding",
    "petri_fast_compiled_small_fp8fast_sc_fp8_sdpa_sliding", "petri_fast_compiled_small_masked_encoder",
    "petri_fast_compiled_small_fp8fast_sc_fp8_masked_encoder", "petri_fast_compiled_small_fp8fast_sc_fp8_fp8_encoder",
)
#: configuration → its mode: the keyword arguments of :func:`set_model_mode` where they differ from
#: its defaults (the levers of the compiled tier as it is today: the prompt encoder compiled with its
#: pass captured, the routers' fused top-k, the split attention, the stacked projections, the fused
#: norms and attention inputs, Inductor's deterministic mode, the overlapped MLP in FP8 layers; off
#: without compiled layers). Each of issue 14's levers was added one at a time (compiled layers, the
#: fused experts op, the self-conditioning softmax, the inverse-CDF draw); issue 25's rows are what
#: --compile does, or the fastest configuration, with one or two levers changed.
COMPILED = {"compiled": True, "fused_experts": True, "softmax_sc": True, "inverse_cdf": True}
#: what --compile does (the default on CUDA): the compiled tier with the small-batch experts
COMPILED_SMALL = {**COMPILED, "small_batch": True}
#: issue 25's fastest configuration: fp8-fast with the FP8 self-conditioning (opt-in)
FASTEST = {**COMPILED_SMALL, "precision": "fp8-fast", "fp8_self_conditioning": True}
MODES = {
    "petri_fast_fused_experts": {"fused_experts": True},
    "petri_fast_compiled_plain": {"compiled": True},
    "petri_fast_compiled_experts": {"compiled": True, "fused_experts": True},
    "petri_fast_compiled_softmax": {"compiled": True, "fused_experts": True, "softmax_sc": True},
    "petri_fast_compiled": COMPILED,  # --compile without the small-batch experts
    "petri_fast_fp8": {"precision": "fp8"},  # the exact tier's sampler, FP8 weights
    "petri_fast_compiled_fp8": {**COMPILED, "precision": "fp8"},  # --compile --precision fp8
    "petri_fast_compiled_small": COMPILED_SMALL,
    "petri_fast_compiled_fp8fast": {**COMPILED, "precision": "fp8-fast"},  # --compile --precision fp8-fast
    "petri_fast_compiled_small_fp8": {**COMPILED_SMALL, "precision": "fp8"},  # the FP8 tier's small-batch experts
    "petri_fast_compiled_small_fp8fast": {**COMPILED_SMALL, "precision": "fp8-fast"},
    # issue 25: the compiled tier as it was before its prompt encoder was compiled too
    "petri_fast_compiled_small_eager_encoder": {**COMPILED_SMALL, "encoder": False},
    # issue 25: the compiled tier with the library's torch.topk in every router
    "petri_fast_compiled_small_torch_topk": {**COMPILED_SMALL, "fused_router": False},
    # issue 25: the compiled tier without the global layers' split attention
    "petri_fast_compiled_small_unsplit": {**COMPILED_SMALL, "split_attention": False},
    # issue 25: the compiled tier without the stacked projections, in bf16 and fp8-fast
    "petri_fast_compiled_small_unstacked": {**COMPILED_SMALL, "stacked_projections": False},
    "petri_fast_compiled_small_fp8fast_unstacked": {**COMPILED_SMALL, "precision": "fp8-fast",
                                                    "stacked_projections": False},
    "petri_fast_compiled_small_fp8fast_sc_fp8": FASTEST,
    # issue 25: the default and the fastest configuration without the fused norms (Inductor's fusions of the library's
    # norms)
    "petri_fast_compiled_small_unfused_norms": {**COMPILED_SMALL, "fused_norms": False},
    "petri_fast_compiled_small_fp8fast_sc_fp8_unfused_norms": {**FASTEST, "fused_norms": False},
    # issue 25: the same two with the prompt encoder's pass uncaptured (petri.engine.cuda.encoder_graphs)
    "petri_fast_compiled_small_uncaptured_encoder": {**COMPILED_SMALL, "encoder_graphs": False},
    "petri_fast_compiled_small_fp8fast_sc_fp8_uncaptured_encoder": {**FASTEST, "encoder_graphs": False},
    # issue 25: the fastest configuration with each layer's dense MLP on a side stream beside its experts
    # (petri.engine.cuda.fused.overlapped_mlp; FP8 layers only, so bf16 has no such row; opt-in until 2026-12-03, since then the
    # same as petri_fast_compiled_small_fp8fast_sc_fp8, whose sequential form is ..._sequential_mlp)
    "petri_fast_compiled_small_fp8fast_sc_fp8_overlapped_mlp": FASTEST,
    # issue 25: the default and the fastest configuration compiled without Inductor's deterministic mode, the MLP in
    # sequence (what the tier was before 2026-12-03: kernel configurations picked by timing,
    # petri.engine.torch.decoder_hooks.compile_function)
    "petri_fast_compiled_small_autotuned": {**COMPILED_SMALL, "overlapped_mlp": False, "deterministic_kernels": False},
    "petri_fast_compiled_small_fp8fast_sc_fp8_autotuned": {**FASTEST, "overlapped_mlp": False,
                                                           "deterministic_kernels": False},
    # issue 25: the default and the fastest configuration without the fused attention inputs (Inductor's fusions of
    # the library's q, k, v norms, rotary embedding and torch.cat instead; petri.engine.cuda.attention.attention_inputs)
    "petri_fast_compiled_small_unfused_attention_inputs": {**COMPILED_SMALL, "fused_attention_inputs": False},
    "petri_fast_compiled_small_fp8fast_sc_fp8_unfused_attention_inputs": {**FASTEST, "fused_attention_inputs": False},
    # issue 25: the fastest configuration with each FP8 layer's dense MLP and experts in sequence (the overlapped MLP,
    # petri.engine.cuda.fused.overlapped_mlp, on by default since 2026-12-03, off)
    "petri_fast_compiled_small_fp8fast_sc_fp8_sequential_mlp": {**FASTEST, "overlapped_mlp": False},
    # the global layers' attention by the memory-efficient kernel over key chunks (the method before 2026-12-03)
    "petri_fast_compiled_small_chunked_global_attention": {**COMPILED_SMALL, "global_attention": "chunks"},
    "petri_fast_compiled_small_fp8fast_sc_fp8_chunked_global_attention": {**FASTEST, "global_attention": "chunks"},
    # the sliding layers' attention by SDPA's choice at every batch (the flash kernel at one sample off)
    "petri_fast_compiled_small_sdpa_sliding": {**COMPILED_SMALL, "flash_sliding": False},
    "petri_fast_compiled_small_fp8fast_sc_fp8_sdpa_sliding": {**FASTEST, "flash_sliding": False},
    # the prompt encoder's sliding layers by SDPA with the band mask (petri.engine.cuda.attention.encoder_attention off)
    "petri_fast_compiled_small_masked_encoder": {**COMPILED_SMALL, "encoder_window": False},
    "petri_fast_compiled_small_fp8fast_sc_fp8_masked_encoder": {**FASTEST, "encoder_window": False},
    # the fastest configuration with the prompt encoder in FP8 too (opt-in: petri.engine.cuda.fp8_tier.fp8's fp8_encoder)
    "petri_fast_compiled_small_fp8fast_sc_fp8_fp8_encoder": {**FASTEST, "fp8_encoder": True},
}
#: every other configuration (generate's, petri_eager, petri_fast): uncompiled layers, the library's experts
#: (the overlapped MLP off only tells this mode's layers apart from the others': no lever applies uncompiled)
PLAIN = {"overlapped_mlp": False}
#: what the model's layers were last set up with: (compiled, fused experts, the levers), see set_model_mode
_current_layers: list = [None]
#: issue 62 (--release-fp8): FP8 configurations run with the encoder in FP8 and the bf16 copies released
#: (petri.engine.cuda.fp8_tier.fp8_release: what fits an 80 GB card); after the first, only fp8 ↔ fp8-fast can follow
_release_fp8: list = [False]


def set_model_mode(lm: LoadedModel, compiled: bool = False, fused_experts: bool = False, softmax_sc: bool = False,
                   inverse_cdf: bool = False, precision: str = "bf16", small_batch: bool = False, encoder: bool = True,
                   fused_router: bool = True, split_attention: bool = True, stacked_projections: bool = True,
                   fp8_self_conditioning: bool = False, fused_norms: bool = True, encoder_graphs: bool = True,
                   overlapped_mlp: bool = True, deterministic_kernels: bool = True,
                   fused_attention_inputs: bool = True, global_attention: str = "products",
                   flash_sliding: bool = True, encoder_window: bool = True, fp8_encoder: bool = False) -> None:
    """Put the model in one configuration whatever the previous one was: uncompiled layers and the
    transformers experts, then (``fused_experts``) the fused experts op and (``compiled``) regional
    compilation (lazy: it lands in the next call), then the precision (``petri.engine.cuda.fp8_tier.fp8``); the
    layers are only reset and recompiled when those two or the compiled tier's levers change."""
    import torch._dynamo

    from petri.engine.cuda.fp8_tier.fp8 import set_precision
    from petri.engine.cuda.fused.fused_experts import fuse_experts

    layers = (compiled, fused_experts, small_batch, encoder, fused_router, split_attention, stacked_projections,
              fused_norms, overlapped_mlp, deterministic_kernels, fused_attention_inputs, global_attention,
              flash_sliding, encoder_window)
    if _current_layers[0] != layers:
        uncompile_regions(lm)  # the plain layers and experts; drops graphs captured before
        torch._dynamo.reset()
        if compiled:
            compile_for_sampling(lm, fused_experts=fused_experts, small_batch_experts=small_batch, encoder=encoder,
                                 fused_router=fused_router, split_attention=split_attention,
                                 stacked_projections=stacked_projections, fused_norms=fused_norms,
                                 overlapped_mlp=overlapped_mlp, deterministic_kernels=deterministic_kernels,
                                 fused_attention_inputs=fused_attention_inputs, global_attention=global_attention,
                                 flash_sliding=flash_sliding, encoder_window=encoder_window)
        elif fused_experts:
            fuse_experts(lm.model)
    if lm.fast_tier.released_bf16:  # issue 62: the e4m3 copies stay; only their accumulation can change
        from petri.engine.cuda.fp8_tier.fp8_release import set_accumulation

        set_accumulation(lm, precision)
    else:
        release = _release_fp8[0] and precision != "bf16"
        set_precision(lm, precision, fp8_encoder=fp8_encoder or release)
        if release:
            from petri.engine.cuda.fp8_tier.fp8_release import release_bf16

            release_bf16(lm)
    lm.fast_tier.set_options(FastOptions(softmax_self_conditioning=softmax_sc, inverse_cdf_draw=inverse_cdf,
                                         fp8_self_conditioning=fp8_self_conditioning))
    set_encoder_graph_lengths(lm, DEFAULT_ENCODER_GRAPH_LENGTHS if encoder_graphs else 0)
    _current_layers[0] = layers


def measure(name: str, lm: LoadedModel, prompt, settings, layouts, repeats: int) -> dict:
    """First call (warm-up: capture/compilation included), then ``repeats`` timed calls."""
    device = lm.device
    batch_prompt = prompt.expand(len(layouts), -1).contiguous()
    phases: dict = {}
    began = time.perf_counter()
    set_model_mode(lm, **MODES.get(name, PLAIN))
    if device.type == "cuda":  # after the mode: the previous configuration's FP8 weights are dropped by then
        torch.cuda.reset_peak_memory_stats()
    if name.startswith("petri_fast_compiled"):
        phases["compile_call_s"] = time.perf_counter() - began

    def once() -> tuple[float, int]:
        if name.startswith("generate"):
            return time_generate(lm, batch_prompt, settings, "static" if name == "generate_static" else None), settings.max_denoising_steps
        return time_petri(lm, prompt, settings, layouts, fast=name.startswith("petri_fast"), phases=phases)

    petri = not name.startswith("generate")
    prompts = lm.fast_tier.prompts

    def timed(keep_prompt: bool) -> tuple[list[float], list[int]]:
        """``repeats`` calls; unless ``keep_prompt``, each encodes its prompt (as the figures before
        the prompt cache did: the kept prompts are cleared first)."""
        times, steps = [], []
        for _ in range(repeats):
            if not keep_prompt:
                prompts.clear()
            seconds, n = once()
            times.append(seconds)
            steps.append(n)
        return times, steps

    def ms_per_step(times, steps) -> float:
        return round(1000 * statistics.median(t / n for t, n in zip(times, steps)), 2)

    torch.manual_seed(0)
    prompts.clear()  # the warm-up encodes too: a prompt kept from the configuration before would leave
    warm, _ = once()  # this one's encoder to be compiled in its first timed call
    if petri:  # a length's second pass is captured (petri.engine.cuda.encoder_graphs): here, not in a timed call
        prompts.clear()
        once()
    times, steps = timed(keep_prompt=False)
    result = {
        "warmup_s": round(warm, 3),
        "s": [round(t, 4) for t in times],
        "median_s": round(statistics.median(times), 4),
        "ms_per_step": ms_per_step(times, steps),  # every call encodes its prompt
        "steps": steps,
    }
    if "forward_ms" in phases:  # per-step GPU time of each graph, last timed call
        for key in ("forward_ms", "sampling_ms", "logging_ms"):
            result[key + "_per_step"] = round(statistics.median(phases[key]), 3)
        result["host_syncs_per_step"] = phases["host_syncs_per_step"]
    if petri:  # issue 25: the same prompt again takes the kept encoder cache (petri.engine.torch.prompt_cache)
        kept_times, kept_steps = timed(keep_prompt=True)
        result["median_s_prompt_kept"] = round(statistics.median(kept_times), 4)
        result["ms_per_step_prompt_kept"] = ms_per_step(kept_times, kept_steps)
        result["encode_ms"] = time_encode(lm, prompt)
        result["encode_uncaptured_ms"] = time_encode(lm, prompt, captured=False)
        if "forward_ms_per_step" in result:  # what a step costs beyond its three graphs, prompt encode included
            graphs = sum(result[k + "_per_step"] for k in ("forward_ms", "sampling_ms", "logging_ms"))
            result["outside_graphs_ms_per_step"] = round(result["ms_per_step"] - graphs, 2)
            result["outside_graphs_ms_per_step_prompt_kept"] = round(result["ms_per_step_prompt_kept"] - graphs, 2)
    if "compile_call_s" in phases:
        result["compile_call_s"] = round(phases["compile_call_s"], 3)
    if device.type == "cuda":
        result["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return result


def time_encode(lm: LoadedModel, prompt: torch.Tensor, repeats: int = 3, captured: bool = True) -> float:
    """Milliseconds of one encoder pass over ``prompt`` (1, P), synchronised (median of ``repeats``,
    after one untimed pass), outside any sampler and past the kept prompts: as a request runs it
    (``captured``: the tier's graph of the length replayed where it keeps one,
    ``petri.engine.cuda.encoder_graphs``), or always uncaptured."""
    from petri.engine.torch.step import encode_prompt_once

    def encode():
        return lm.fast_tier.encoder_graphs.encode(lm, prompt) if captured else encode_prompt_once(lm, prompt)

    return median_ms(lm.device, encode, repeats)


def median_ms(device, call, repeats: int) -> float:
    """Milliseconds of ``call()``, synchronised on ``device``: the median of ``repeats`` calls after
    one untimed call, without gradients."""
    times = []
    with torch.no_grad():
        for index in range(repeats + 1):
            sync(device)
            start = time.perf_counter()
            call()
            sync(device)
            if index:
                times.append(1000 * (time.perf_counter() - start))
    return round(statistics.median(times), 3)


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
                        help="then profile one more fast-path seed (torch.profiler, CUDA time by kernel): after the "
                             "first request, or after the last configuration")
    parser.add_argument("--profile-configs", default=None,
                        help="comma-separated configurations to profile (one more seed each, right after measuring it)")
    parser.add_argument("--shapes", default=None,
                        help="BATCHxPROMPT,...: measure every configuration at each shape in one run, e.g. 1x1600,12x200 "
                             "(instead of --batch/--prompt-tokens; results under 'shapes')")
    parser.add_argument("--out", default=None, help="also write the JSON here (after each configuration)")
    parser.add_argument("--release-fp8", action="store_true",
                        help="issue 62: FP8 configurations with the prompt encoder in FP8 and the bf16 copies freed "
                             "(what fits an 80 GB card); list them after every bf16 one")
    args = parser.parse_args()

    from petri.engine.torch.device import resolve_device

    device = resolve_device(args.device)
    _release_fp8[0] = args.release_fp8
    built = time.perf_counter()
    lm = (build_full_size(device) if args.model == "full"
          else load_model(None if args.model == "embedded" else args.model, device=str(device)))
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
        "parameters": sum(p.numel() for p in lm.model.parameters()),
        # issue 62: what the build left allocated, and the card's own figures (free, total) after it
        "built_gpu_memory_gib": round(torch.cuda.memory_allocated() / 2**30, 2) if device.type == "cuda" else None,
        "card_memory_gib": [round(v / 2**30, 2) for v in torch.cuda.mem_get_info()] if device.type == "cuda" else None,
        "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "cublaslt_workspace_kib": os.environ.get("CUBLASLT_WORKSPACE_SIZE"),  # None: PyTorch's default (1 MiB)
        "release_fp8": args.release_fp8,
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
        write()
        # what a request of another shape costs next (a new prompt length: recompilation, capture)
        for extra in (50, 100):
            longer = torch.cat([prompt, prompt[:, :extra]], dim=1)
            seconds, _ = time_petri(lm, longer, settings, layouts, fast=True)
            result["first_request"][f"prompt_{args.prompt_tokens + extra}_s"] = round(seconds, 3)
        seconds, _ = time_petri(lm, prompt, settings, layouts, fast=True)
        result["first_request"]["first_shape_again_s"] = round(seconds, 3)
        # reproducible: the same seed twice gives the same arrays
        runs = [run_sampler_fast(lm, prompt[0].tolist(), layouts, settings, seed=11) for _ in range(2)]
        result["first_request"]["same_seed_identical"] = all(
            np.array_equal(getattr(runs[0], name), getattr(runs[1], name), equal_nan=name == "entropy")
            for name in ("argmax", "entropy", "accepted", "final_ids")
        )
        write()
        if args.profile:
            result["profile"] = profile_seed(lm, prompt, settings, layouts)
        print(write())
        return

    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")] if args.shapes else None
    for batch, prompt_tokens in shapes or [(args.batch, args.prompt_tokens)]:
        if shapes:  # each shape's configurations under result["shapes"]["BxP"]
            target = result.setdefault("shapes", {}).setdefault(f"{batch}x{prompt_tokens}", {})
            prompt = torch.randint(3, lm.vocab_size, (1, prompt_tokens), generator=torch.Generator().manual_seed(0)).to(device)
            layouts = three_anchor_layouts(batch, lm.canvas_length, lm.vocab_size)
        else:
            target = result
        run_configs(args.configs.split(","), lm, prompt, settings, layouts, args.repeats, target, write,
                    set(args.profile_configs.split(",")) if args.profile_configs else set())
        if args.profile:  # one more seed in the last configuration, under the profiler
            target["profile"] = profile_seed(lm, prompt, settings, layouts)
            write()
    print(write())


def run_configs(names, lm, prompt, settings, layouts, repeats: int, target: dict, write, profiled=frozenset()) -> None:
    """Each configuration measured into ``target`` (an error recorded and the rest measured; those in
    ``profiled`` then profiled over one more seed), then each petri configuration's median over the
    fastest ``generate``'s."""
    for name in names:
        try:
            target[name] = measure(name, lm, prompt, settings, layouts, repeats)
            if name in profiled:
                try:
                    target[name]["profile"] = profile_seed(lm, prompt, settings, layouts)
                except Exception as error:  # the measurement stands
                    target[name]["profile"] = {"error": f"{type(error).__name__}: {error}"[:500]}
        except Exception as error:  # record and go on: one failing configuration must not lose the rest
            target[name] = {"error": f"{type(error).__name__}: {error}"[:2000]}
        write()
        print(name, json.dumps(target[name]), flush=True)
    medians = {k: target[k]["median_s"] for k in CONFIGS if "median_s" in target.get(k, {})}
    generate_best = min((v for k, v in medians.items() if k.startswith("generate")), default=None)
    for key, value in medians.items():
        if key.startswith("petri") and generate_best:
            target[key]["over_fastest_generate"] = round(value / generate_best, 3)


if __name__ == "__main__":
    main()
