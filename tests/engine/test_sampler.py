"""Pinned sampling on a tiny random model: anchors hold, the record means what it says."""

from __future__ import annotations

import copy

import numpy as np
import torch

from petri.core.dish import Dish, concept_token_ids, layout_samples
from petri.core.trajectory import SamplerSettings
from petri.engine.torch.sampler import accept_mask, run_sampler


def pinned_run(lm, settings, seed=11, samples=4, on_step=None):
    dish = Dish(concepts=("order", "inventory", "person"), event="x")
    ids = {c: concept_token_ids(lm.tokenizer, c) for c in dish.concepts}
    layouts = layout_samples(dish, ids, lm.canvas_length, samples, seed=seed)
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode("The customer placed an order")]
    return run_sampler(lm, prompt, layouts, settings, seed=seed, canvas_prefix=(), on_step=on_step), layouts


def test_anchors_are_pinned_and_recorded_raw(tiny_lm):
    traj, layouts = pinned_run(tiny_lm, SamplerSettings(max_denoising_steps=6))
    assert traj.argmax.shape == (4, 6, 16)
    for s, spans in enumerate(layouts):
        for span in spans:
            np.testing.assert_array_equal(traj.final_ids[s, span.start : span.end], span.token_ids)
            assert traj.anchor_mask[s, span.start : span.end].all()
            assert traj.accepted[s, :, span.start : span.end].all()
        assert traj.anchor_mask[s].sum() == sum(len(a.token_ids) for a in spans)
        assert " order" in traj.final_texts[s] and " person" in traj.final_texts[s]
    # a random model does not agree with the anchors: the raw argmax must show it somewhere
    anchored = np.broadcast_to(traj.anchor_mask[:, None, :], traj.argmax.shape)
    pinned_ids = np.broadcast_to(traj.final_ids[:, None, :], traj.argmax.shape)
    assert (traj.argmax[anchored] != pinned_ids[anchored]).any()


def test_same_seed_same_trajectory(tiny_lm):
    settings = SamplerSettings(max_denoising_steps=5)
    first, _ = pinned_run(tiny_lm, settings)
    second, _ = pinned_run(tiny_lm, settings)
    np.testing.assert_array_equal(first.argmax, second.argmax)
    np.testing.assert_array_equal(first.entropy, second.entropy)
    third, _ = pinned_run(tiny_lm, settings, seed=12)
    assert not np.array_equal(first.argmax, third.argmax)


def test_early_stopped_samples_are_padded(confident_lm):
    settings = SamplerSettings(max_denoising_steps=20, entropy_bound=2.0, stability_threshold=0, confidence_threshold=1.5)
    traj, _ = pinned_run(confident_lm, settings, samples=6)
    assert traj.steps.max() == traj.argmax.shape[1]
    early = [s for s in range(traj.n_samples) if traj.steps[s] < traj.steps.max()]
    assert early, f"some sample must stop before the others, got steps {traj.steps.tolist()}"
    for s in range(traj.n_samples):
        ran = int(traj.steps[s])
        assert (traj.argmax[s, ran:].size > 0) == (s in early)  # the padding checks run over real steps
        assert (traj.argmax[s, :ran] >= 0).all() and (traj.argmax[s, ran:] == -1).all()
        assert not np.isnan(traj.entropy[s, :ran]).any() and np.isnan(traj.entropy[s, ran:]).all()
        assert not traj.accepted[s, ran:].any()


def test_live_callback_sees_every_step(tiny_lm):
    seen = []
    traj, _ = pinned_run(tiny_lm, SamplerSettings(max_denoising_steps=4), on_step=lambda step: seen.append((step.index, step.argmax)))
    assert [i for i, _ in seen] == [0, 1, 2, 3]
    np.testing.assert_array_equal(np.stack([a for _, a in seen], axis=1), traj.argmax)


def test_anchors_do_not_use_the_entropy_budget():
    # entropies 5, 0.1, 0.2, 9 with a bound of 0.25: the two lowest are accepted (0.1 + 0.2 - 0.2 ≤ 0.25),
    # the third not (0.1 + 0.2 + 5 - 5 = 0.3 > 0.25). Pinning position 3 (entropy 9) leaves that unchanged
    # and accepts it for free; pinning position 1 lets position 0 in (0 + 0.2 + 5 - 5 = 0.2).
    entropy = torch.tensor([[5.0, 0.1, 0.2, 9.0]])
    none = torch.zeros((1, 4), dtype=torch.bool)
    assert accept_mask(entropy, none, 0.25).tolist() == [[False, True, True, False]]
    assert accept_mask(entropy, torch.tensor([[False, False, False, True]]), 0.25).tolist() == [[False, True, True, True]]
    assert accept_mask(entropy, torch.tensor([[False, True, False, False]]), 0.25).tolist() == [[True, True, True, False]]


def test_compiled_forward_samples_the_same_tokens(tiny_lm):
    """``compile_for_sampling`` goes through torch.compile's tracing (dynamo, with the KV cache and
    self-conditioning inputs); with the eager backend the numerics are unchanged, so the tokens are too."""
    from dataclasses import replace as copy_with

    from petri.engine.torch.model import compile_for_sampling

    settings = SamplerSettings(max_denoising_steps=4)
    eager, _ = pinned_run(tiny_lm, settings)
    compiled_lm = compile_for_sampling(copy_with(tiny_lm, model=copy.deepcopy(tiny_lm.model)), backend="eager")
    compiled, _ = pinned_run(compiled_lm, settings)
    np.testing.assert_array_equal(compiled.argmax, eager.argmax)
    np.testing.assert_array_equal(compiled.final_ids, eager.final_ids)


def test_the_canvas_record_is_what_the_sampler_held_after_each_step(tiny_lm):
    """With the noise fixed (the draw is the argmax, the renoise tokens of step t are given), the
    canvas after step t is worked out from the rest of the record: anchors their own tokens,
    accepted positions the argmax, every other position step t's renoise token; a finished sample
    would record -1 (a random model never stops early). The sample's last frame with the anchors in place reads as its final text (the
    uniform family returns the argmax canvas)."""
    from petri.core.dish import pinned_arrays
    from petri.engine.fixed_noise import FixedNoise

    dish = Dish(concepts=("order", "inventory", "person"), event="x")
    ids = {c: concept_token_ids(tiny_lm.tokenizer, c) for c in dish.concepts}
    layouts = layout_samples(dish, ids, tiny_lm.canvas_length, 3, seed=5)
    settings = SamplerSettings(max_denoising_steps=8, entropy_bound=2.0)
    fixed = FixedNoise.from_seed(4, 3, tiny_lm.canvas_length, tiny_lm.vocab_size, settings.max_denoising_steps)
    prompt = [tiny_lm.tokenizer.bos_token_id, *tiny_lm.tokenizer.encode("The customer placed an order")]
    traj = run_sampler(tiny_lm, prompt, layouts, settings, seed=0, fixed_noise=fixed)
    pinned, pinned_ids = pinned_arrays(layouts, (), tiny_lm.canvas_length)
    assert traj.canvas.shape == traj.argmax.shape and traj.family == "uniform-diffusion" and traj.mask_id is None
    for s in range(3):
        for t in range(traj.argmax.shape[1]):
            if t >= traj.steps[s]:
                assert (traj.canvas[s, t] == -1).all()
                continue
            expected = np.where(pinned[s], pinned_ids[s],
                                np.where(traj.accepted[s, t], traj.argmax[s, t], fixed.renoise[t, s]))
            np.testing.assert_array_equal(traj.canvas[s, t], expected)
        last = traj.steps[s] - 1
        np.testing.assert_array_equal(np.where(pinned[s], traj.canvas[s, last], traj.argmax[s, last]), traj.final_ids[s])
    assert (traj.accepted & ~pinned[:, None, :]).any() and (~traj.accepted).any()  # both kinds of position met
