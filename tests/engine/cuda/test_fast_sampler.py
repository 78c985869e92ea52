"""The fast sampler (petri.engine.cuda.fast_sampler) against an independent eager loop written here.

The loop below is run_sampler's step with the token drawn by exponential race from
``torch.empty(S·L, V).exponential_()`` (then the renoise ``randint``), the model's own forward and
torch's ``Categorical`` entropy: same seed → the fast path must give the same per-step argmax,
accept masks, step counts and final tokens, bit for bit, and entropies within float32 rounding.
On the CPU the fast path runs without graphs and with the torch reference pass; on a GPU (tests
skipped elsewhere) with CUDA graphs and the Triton pass.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
import torch

from petri.core.dish import pinned_arrays
from petri.core.trajectory import AnchorSpan, SamplerSettings
from petri.engine.cuda.fast_sampler import FastOptions, fast_path_reason, run_sampler_fast
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON
from petri.engine.torch.array_ops import accept_mask
from petri.engine.torch.step import StabilityTracker, cache_kwarg, encode_prompt_once

CUDA = torch.cuda.is_available() and HAVE_TRITON


@torch.no_grad()
def eager_race_loop(lm, prompt_ids, layouts, settings, seed, draw="race"):
    """Reference: (argmax, entropy, accepted, canvas) as (S, T, L), steps (S,), final ids (S, L).
    ``draw="inverse_cdf"``: the token is the first whose cumulative weight exp(x - max x) exceeds
    u·total, u from ``torch.empty(S·L).uniform_()`` (the compiled tier's draw)."""
    model, device = lm.model, lm.device
    S, L, V, T = len(layouts), lm.canvas_length, lm.vocab_size, settings.max_denoising_steps
    torch.manual_seed(seed)
    mask_np, ids_np = pinned_arrays(layouts, (), L)
    anchors, anchor_ids = torch.from_numpy(mask_np).to(device), torch.from_numpy(ids_np).to(device)
    cache = encode_prompt_once(lm, torch.tensor([prompt_ids], device=device))  # encoded here, never reused
    if S > 1:
        cache.batch_repeat_interleave(S)
    P = len(prompt_ids)
    positions = torch.arange(P, P + L, dtype=torch.int32, device=device)[None]
    canvas = torch.where(anchors, anchor_ids, torch.randint(0, V, (S, L), device=device))
    masks = model.model.decoder.create_diffusion_decoder_attention_mask(
        config=model.config, inputs_embeds=canvas[..., None],
        **cache_kwarg(model.model.decoder.create_diffusion_decoder_attention_mask, cache),
        decoder_attention_mask=torch.ones((S, P + L), dtype=torch.bool, device=device))
    stopper = None
    if settings.stability_threshold is not None and settings.confidence_threshold is not None:
        stopper = StabilityTracker(settings.stability_threshold, settings.confidence_threshold, anchors)
    finished = torch.zeros(S, dtype=torch.bool, device=device)
    argmax_canvas, sc, last_entropy = canvas, None, None
    logs, steps = [], torch.zeros(S, dtype=torch.int32)
    for index, remaining in enumerate(range(T, 0, -1)):
        running = ~finished
        steps += running.cpu().int()
        logits = model(decoder_input_ids=canvas, self_conditioning_logits=sc, decoder_attention_mask=masks,
                       decoder_position_ids=positions, **cache_kwarg(model.forward, cache)).logits
        x = logits / (settings.t_min + (settings.t_max - settings.t_min) * (remaining / T))
        if draw == "race":
            log_noise = torch.empty((S * L, V), device=device).exponential_().log_()
            denoised = torch.argmax(x - log_noise.view(S, L, V), dim=-1)
        else:
            u = torch.empty((S * L,), device=device).uniform_().view(S, L, 1)
            cumulative = torch.exp(x - x.amax(-1, keepdim=True)).cumsum(-1)
            below = (cumulative <= u * cumulative[..., -1:]).sum(-1)  # entries before the crossing
            last_positive = (cumulative < cumulative[..., -1:]).sum(-1)  # where the total is reached
            denoised = torch.minimum(below, last_positive)
        raw_argmax = torch.argmax(x, dim=-1)
        entropy = torch.distributions.Categorical(logits=x).entropy()
        accepted = accept_mask(entropy, anchors, settings.entropy_bound)
        new_canvas = torch.where(accepted, denoised, canvas)
        new_canvas = torch.where(accepted, new_canvas, torch.randint(0, V, (S, L), device=device))
        new_canvas = torch.where(anchors, anchor_ids, new_canvas)
        new_argmax = torch.where(anchors, anchor_ids, raw_argmax)
        logs.append((torch.where(running[:, None], raw_argmax, -1).cpu(),
                     torch.where(running[:, None], entropy.float(), float("nan")).cpu(),
                     (accepted & running[:, None]).cpu(),
                     torch.where(running[:, None], new_canvas, -1).cpu()))
        if stopper is not None:
            if index > 0:
                new_argmax = torch.where(finished[:, None], argmax_canvas, new_argmax)
                new_canvas = torch.where(finished[:, None], canvas, new_canvas)
                x = torch.where(finished[:, None, None], sc, x)
                entropy = torch.where(finished[:, None], last_entropy, entropy)
            finished = finished | stopper(new_argmax, entropy)
            last_entropy = entropy
        canvas, argmax_canvas, sc = new_canvas, new_argmax, x.to(model.model.decoder.embed_tokens.weight.dtype)
        if stopper is not None and bool(finished.all()):
            break
    argmax, entropy, accepted, canvas = (torch.stack(parts, 1).numpy() for parts in zip(*logs))
    return argmax, entropy, accepted, canvas, steps.numpy(), argmax_canvas.cpu().numpy()


def assert_same(trajectory, reference):
    argmax, entropy, accepted, canvas, steps, final = reference
    assert trajectory.argmax.shape == argmax.shape
    np.testing.assert_array_equal(trajectory.argmax, argmax)
    np.testing.assert_array_equal(trajectory.accepted, accepted)
    np.testing.assert_array_equal(trajectory.canvas, canvas)
    np.testing.assert_array_equal(trajectory.steps, steps)
    np.testing.assert_array_equal(trajectory.final_ids, final)
    # the pass's stated entropy bound, 2e-6·max|x| + 1e-5·H, with |x| ≤ softcap / t_min = 30 / 0.2
    np.testing.assert_allclose(trajectory.entropy, entropy, rtol=1e-5, atol=3e-4)


def three_anchors(batch, vocab):
    spans = [AnchorSpan("a", 2, (11,)), AnchorSpan("b", 7, (12, 13)), AnchorSpan("c", 12, (vocab - 1,))]
    return [spans if s % 2 == 0 else [] for s in range(batch)]


PROMPT = [5, 9, 17, 33, 2, 40, 41]


@pytest.mark.parametrize("fuse_softcap,softmax_sc", [(True, False), (False, False), (True, True)])
def test_fast_path_on_cpu_equals_eager_race_loop(tiny_lm, fuse_softcap, softmax_sc):
    settings = SamplerSettings(max_denoising_steps=6, stability_threshold=None, confidence_threshold=None)
    layouts = three_anchors(3, tiny_lm.vocab_size)
    options = FastOptions(graph=False, fused=False, fuse_softcap=fuse_softcap, softmax_self_conditioning=softmax_sc)
    got = run_sampler_fast(tiny_lm, PROMPT, layouts, settings, seed=4, options=options)
    assert_same(got, eager_race_loop(tiny_lm, PROMPT, layouts, settings, seed=4))
    assert (got.accepted.sum(-1) > 0).any() and (got.argmax >= 0).all()


@pytest.mark.parametrize("settings", [
    SamplerSettings(max_denoising_steps=20, entropy_bound=2.0, stability_threshold=0, confidence_threshold=1.5),
    SamplerSettings(max_denoising_steps=30, t_min=0.2, t_max=0.5, entropy_bound=16.0, stability_threshold=1,
                    confidence_threshold=3.0),
])
@pytest.mark.parametrize("softmax_sc", [False, True])
def test_fast_path_adaptive_stop_on_cpu(confident_lm, settings, softmax_sc):
    layouts = three_anchors(4, confident_lm.vocab_size)
    options = FastOptions(graph=False, fused=False, softmax_self_conditioning=softmax_sc)
    got = run_sampler_fast(confident_lm, PROMPT, layouts, settings, seed=2, options=options)
    reference = eager_race_loop(confident_lm, PROMPT, layouts, settings, seed=2)
    assert_same(got, reference)
    assert len(set(reference[4].tolist())) > 1, "samples should stop at different steps"
    # a second request reuses the session: its state must be reset
    again = run_sampler_fast(confident_lm, PROMPT, layouts, settings, seed=2, options=options)
    assert_same(again, reference)


def test_compiled_tier_on_cpu_equals_eager_race_loop():
    """The compiled tier (``compile_for_sampling``: layers compiled with one graph per layer type,
    the fused experts op, the sampler's softmax of the self-conditioning, the inverse-CDF draw)
    with the eager backend:
    on the CPU every piece computes the uncompiled ops, so the trajectory is bit-equal to the loop's
    on the uncompiled model; Dynamo traces two graphs (sliding, full) for six decoder layers and two
    for the six prompt-encoder layers, with no graph break, and uncompiling restores the layers."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from petri.engine.cuda.compiled_tier import uncompile_regions
    from petri.engine.cuda.fused.fused_experts import unfuse_experts
    from petri.engine.torch.model import compile_for_sampling
    from petri.engine.torch.tiny import tiny_random_model

    lm = tiny_random_model(canvas_length=16, num_layers=6, seed=5)
    settings = SamplerSettings(max_denoising_steps=5, stability_threshold=None, confidence_threshold=None)
    layouts = three_anchors(3, lm.vocab_size)
    reference = eager_race_loop(lm, PROMPT, layouts, settings, seed=9, draw="inverse_cdf")
    torch._dynamo.reset()
    counters.clear()
    compile_for_sampling(lm, backend="eager")
    try:
        assert lm.fast_tier.options.softmax_self_conditioning
        assert lm.device_type == "cpu-compiled"  # the run id tells the compiled tier apart
        assert "forward" in vars(lm.model.model.decoder.layers[0].experts)
        got = run_sampler_fast(lm, PROMPT, layouts, settings, seed=9, options=replace(
            lm.fast_tier.options, graph=False, fused=False))
        assert counters["stats"]["unique_graphs"] == 4
        assert not counters["graph_break"]
        assert len(lm.fast_tier.compiled_encoder_layers) == 6
        assert got.sampler == "fast+compiled+sc-softmax+inverse-cdf+small-batch"  # 3 × 16 canvas tokens: few
    finally:
        uncompile_regions(lm)
        unfuse_experts(lm.model)
    assert_same(got, reference)
    assert [layer.self_attn.layer_idx for layer in lm.model.model.decoder.layers] == list(range(6))
    assert not lm.fast_tier.compiled and all("forward" not in vars(layer) for layer in lm.model.model.decoder.layers)
    assert lm.device_type == "cpu"
    assert not lm.fast_tier.options.softmax_self_conditioning and not lm.fast_tier.options.inverse_cdf_draw
    plain = run_sampler_fast(lm, PROMPT, layouts, settings, seed=9, options=FastOptions(graph=False, fused=False))
    assert_same(plain, eager_race_loop(lm, PROMPT, layouts, settings, seed=9))
    assert plain.sampler == "fast"


def test_compiled_tier_keeps_inductor_caches_under_petri_unless_told_otherwise(monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from petri.engine.cuda.compiled_tier import PETRI_CACHE_DIR, use_petri_cache_dir

    for before, after in ((None, PETRI_CACHE_DIR), (default_cache_dir(), PETRI_CACHE_DIR), ("/data/mine", "/data/mine")):
        if before is None:
            monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        else:  # Inductor's own /tmp default (written by Inductor when it first looked) counts as unset
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", before)
        use_petri_cache_dir()
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == after


def test_fast_path_reason_on_cpu(tiny_lm):
    assert "CUDA" in fast_path_reason(tiny_lm)


@pytest.fixture(scope="module")
def gpu_models():
    from petri.engine.torch.model import EMBEDDED_MODEL_PATH, load_model
    from petri.engine.torch.tiny import tiny_random_model

    tiny = tiny_random_model(canvas_length=16)
    tiny.model.to("cuda", torch.bfloat16)
    tiny = replace(tiny, device=torch.device("cuda"), dtype=torch.bfloat16)
    confident = tiny_random_model(canvas_length=16, seed=1)
    with torch.no_grad():
        confident.model.lm_head.weight.mul_(8.0)
    confident.model.to("cuda", torch.bfloat16)
    confident = replace(confident, device=torch.device("cuda"), dtype=torch.bfloat16)
    models = {"tiny": tiny, "confident": confident}
    if EMBEDDED_MODEL_PATH.is_dir():
        models["embedded"] = load_model(str(EMBEDDED_MODEL_PATH), device="cuda")
    return models


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("name", ["tiny", "confident", "embedded"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_graph_fast_path_equals_eager_race_loop_on_gpu(gpu_models, name, adaptive):
    if name not in gpu_models:
        pytest.skip("embedded model not shipped in this checkout")
    lm = gpu_models[name]
    settings = lm.default_settings() if name == "embedded" else SamplerSettings(
        t_min=0.2, t_max=0.5, entropy_bound=16.0, stability_threshold=1, confidence_threshold=3.0)
    settings = replace(settings, max_denoising_steps=10)
    if not adaptive:
        settings = replace(settings, stability_threshold=None, confidence_threshold=None)
    layouts = three_anchors(6, lm.vocab_size)
    lm.fast_tier.drop_sessions()
    phases: dict = {}
    for seed in (0, 1):  # the second run replays the graphs captured by the first
        got = run_sampler_fast(lm, PROMPT, layouts, settings, seed=seed, phase_times=phases)
        assert phases["captured_now"] == (seed == 0)
        assert_same(got, eager_race_loop(lm, PROMPT, layouts, settings, seed=seed))
    assert phases["host_syncs_per_step"] == (1.0 if adaptive else 0.0)


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
def test_graph_replay_does_not_synchronise(gpu_models):
    lm = gpu_models["tiny"]
    settings = SamplerSettings(max_denoising_steps=4, stability_threshold=None, confidence_threshold=None)
    run_sampler_fast(lm, PROMPT, three_anchors(2, lm.vocab_size), settings, seed=0)
    (session,) = lm.fast_tier.sessions.values()
    assert session.graphs is not None
    session.step_counter.zero_()  # the step counter indexes the per-step temperatures and logs
    torch.cuda.set_sync_debug_mode("error")
    try:
        for index in range(4):
            session.run_step(index)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(not CUDA, reason="needs CUDA and Triton")
@pytest.mark.parametrize("name", ["tiny", "embedded"])
def test_softmax_self_conditioning_on_gpu_is_the_decoders_within_rounding(gpu_models, name):
    """The compiled tier's option: step 0 (no self-conditioning yet) is bit-equal to the exact fast
    path; step 1 reads probabilities that may differ from the decoder's softmax by one bf16 ulp in
    rare elements, so its argmax agrees but for near-ties and its entropies within rounding."""
    if name not in gpu_models:
        pytest.skip("embedded model not shipped in this checkout")
    lm = gpu_models[name]
    settings = SamplerSettings(max_denoising_steps=2, stability_threshold=None, confidence_threshold=None)
    layouts = three_anchors(6, lm.vocab_size)
    exact = run_sampler_fast(lm, PROMPT, layouts, settings, seed=7, options=FastOptions())
    fused = run_sampler_fast(lm, PROMPT, layouts, settings, seed=7,
                             options=FastOptions(softmax_self_conditioning=True))
    np.testing.assert_array_equal(fused.argmax[:, 0], exact.argmax[:, 0])
    np.testing.assert_array_equal(fused.entropy[:, 0], exact.entropy[:, 0])
    assert (fused.argmax[:, 1] == exact.argmax[:, 1]).mean() >= 0.98
    np.testing.assert_allclose(fused.entropy[:, 1], exact.entropy[:, 1], rtol=2e-2, atol=2e-2)
