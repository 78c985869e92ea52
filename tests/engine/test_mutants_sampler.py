"""Tests that kill mutants of petri/engine/torch/sampler.py which survived tests/engine/test_sampler.py,
tests/engine/test_sampler_parity.py and tests/engine/test_sampler_promises.py (experiments/mutation/REPORT.md
lists them). Small cases are worked out by hand in the comments; the long-prompt case compares
with transformers' own ``generate``."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_sampler_parity import DraftRecorder

from petri.core.trajectory import SamplerSettings
from petri.engine.torch.array_ops import accept_mask
from petri.engine.torch.sampler import generate_kwargs, run_sampler
from petri.engine.torch.step import StabilityTracker, _output_cache, cache_kwarg
from petri.engine.torch.tiny import tiny_random_model


def test_generate_kwargs_spell_every_setting():
    settings = SamplerSettings(
        max_denoising_steps=7, t_min=0.25, t_max=0.75, entropy_bound=1.5,
        stability_threshold=2, confidence_threshold=0.5,
    )
    kwargs = generate_kwargs(settings)
    assert kwargs["sampler_config"].entropy_bound == 1.5
    del kwargs["sampler_config"]
    assert kwargs == {
        "max_denoising_steps": 7, "t_min": 0.25, "t_max": 0.75,
        "stability_threshold": 2, "confidence_threshold": 0.5,
    }


def test_cache_keyword_follows_the_function_signature():
    def old_style(x, past_key_values=None):
        return x

    def new_style(x, cache=None):
        return x

    assert cache_kwarg(old_style, "C") == {"past_key_values": "C"}
    assert cache_kwarg(new_style, "C") == {"cache": "C"}


def test_output_cache_reads_either_attribute():
    assert _output_cache(SimpleNamespace(cache="new", past_key_values="old")) == "new"
    assert _output_cache(SimpleNamespace(cache=None, past_key_values="old")) == "old"
    assert _output_cache(SimpleNamespace(past_key_values="old")) == "old"  # no ``cache`` at all


def test_stop_needs_mean_entropy_strictly_below_confidence():
    # threshold 0: stability is not asked for; mean entropy 0.5 is not below 0.5, 0.25 is
    tracker = StabilityTracker(0, 0.5, torch.zeros((2, 2), dtype=torch.bool))
    entropy = torch.tensor([[0.5, 0.5], [0.25, 0.25]])
    assert tracker(torch.zeros((2, 2), dtype=torch.long), entropy).tolist() == [False, True]


def test_stop_averages_over_a_single_free_position():
    # position 0 pinned, position 1 free with entropy 0.8: the mean over the one free position is
    # 0.8, not below 0.5 → no stop (dividing by anything but 1 would halve it and stop)
    tracker = StabilityTracker(0, 0.5, torch.tensor([[True, False]]))
    assert tracker(torch.zeros((1, 2), dtype=torch.long), torch.tensor([[0.0, 0.8]])).tolist() == [False]


def test_first_canvas_is_never_stable_whatever_its_tokens():
    # threshold 1: the first call has no previous canvas to agree with, even a canvas of token 1
    # (or 0); the second identical canvas is stable
    tracker = StabilityTracker(1, 10.0, torch.zeros((2, 3), dtype=torch.bool))
    canvas = torch.tensor([[1, 1, 1], [0, 0, 0]])
    low = torch.zeros((2, 3))
    assert tracker(canvas, low).tolist() == [False, False]
    assert tracker(canvas, low).tolist() == [True, True]


@pytest.fixture(scope="module")
def short_window_lm():
    """The tiny model with a 4-token sliding window, so a 20-token prompt spills past it."""
    return tiny_random_model(canvas_length=8, sliding_window=4)


def test_matches_generate_when_the_prompt_is_longer_than_the_sliding_window(short_window_lm):
    lm = short_window_lm
    text = "The customer placed an order and the clerk wrote the invoice for the order today"
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode(text)]
    assert len(prompt) > 4 * 3
    settings = SamplerSettings(max_denoising_steps=4, stability_threshold=None, confidence_threshold=None)
    recorder = DraftRecorder()
    torch.manual_seed(5)
    out = lm.model.generate(
        torch.tensor([prompt] * 2), max_new_tokens=lm.canvas_length, eos_token_id=None,
        streamer=recorder, **generate_kwargs(settings),
    )
    traj = run_sampler(lm, prompt, [[], []], settings, seed=5)
    np.testing.assert_array_equal(traj.final_ids, out.sequences[:, len(prompt):].numpy())
    np.testing.assert_array_equal(traj.argmax, np.stack(recorder.drafts, axis=1))


@pytest.mark.parametrize(("stability", "confidence"), [(None, 1e9), (0, None)])
def test_either_threshold_none_turns_adaptive_stopping_off(tiny_lm, stability, confidence):
    # with the other threshold as lax as can be, stopping were on, every sample would stop at once
    settings = SamplerSettings(max_denoising_steps=3, stability_threshold=stability, confidence_threshold=confidence)
    traj = run_sampler(tiny_lm, [tiny_lm.tokenizer.bos_token_id, 5, 6], [[], []], settings, seed=1)
    assert traj.steps.tolist() == [3, 3]


def test_on_step_and_what_the_trajectory_records_about_the_run(tiny_lm):
    calls = []
    settings = SamplerSettings(max_denoising_steps=3, stability_threshold=None, confidence_threshold=None)
    before = time.perf_counter()
    traj = run_sampler(
        tiny_lm, [tiny_lm.tokenizer.bos_token_id, 5, 6], [[], []], settings, seed=1,
        on_step=calls.append,
    )
    wall = time.perf_counter() - before
    assert [step.index for step in calls] == [0, 1, 2]
    for step in calls:
        np.testing.assert_array_equal(step.argmax, traj.argmax[:, step.index])  # the raw argmax of that step
        np.testing.assert_array_equal(step.canvas, traj.canvas[:, step.index])  # the canvas it left
        np.testing.assert_array_equal(step.accepted, traj.accepted[:, step.index])
        assert step.finished.tolist() == [False, False]
    assert traj.prompt == "" and traj.settings == settings and traj.seed == 1
    # one monotonic clock: encode and denoise are consecutive parts of the total, which lies
    # inside the call (orderings only, no durations)
    t = traj.timings
    assert set(t) == {"encode_s", "denoise_s", "total_s"}
    assert 0 <= t["encode_s"] and 0 <= t["denoise_s"]
    assert t["encode_s"] + t["denoise_s"] <= t["total_s"] + 1e-9 and t["total_s"] <= wall


def test_accept_mask_admits_a_position_that_meets_the_bound_exactly():
    # entropies 0.5, 0.125, 0.375 (exact in binary), bound 0.5. Sorted: 0.125, 0.375, 0.5; the sum
    # of the entropies accepted before each is 0, 0.125, 0.5, all <= 0.5 → all three accepted (the
    # last one meets the bound exactly)
    entropy = torch.tensor([[0.5, 0.125, 0.375]])
    mask = accept_mask(entropy, torch.zeros((1, 3), dtype=torch.bool), 0.5)
    assert mask.tolist() == [[True, True, True]]


def test_a_sample_that_stops_at_the_first_step_keeps_its_canvas_while_others_run(tiny_lm):
    """Stability threshold 0: a sample stops as soon as its free entropy is low. Sample 0 is
    certain at step 0 (all mass on token position + 20) and its logits then move to token
    position + 100; samples 1 and 2 stay uniform (entropy ln V) until step 3. Sample 0 must keep the
    step-0 canvas: its final tokens are the step-0 argmax, and it ran one step. (Kills the
    off-by-one that froze finished samples only from step 2 on.)"""
    from test_sampler_promises import PREFIX, anchored_layouts, one_hot_logits, prompt_of, scripted_logits

    from petri.core.dish import pinned_arrays

    lm = tiny_lm
    vocab, length = lm.vocab_size, lm.canvas_length
    layouts = anchored_layouts(lm, 3, seed=4)
    pinned, pinned_ids = pinned_arrays(layouts, PREFIX, length)
    first = (torch.arange(length) + 20).expand(3, -1)
    later = (torch.arange(length) + 100).expand(3, -1)

    def script(n):
        logits = one_hot_logits(first if n == 0 else later, vocab)
        if n < 3:  # samples 1 and 2 uncertain for three steps
            logits[1:] = torch.zeros(vocab)
        return logits

    settings = SamplerSettings(max_denoising_steps=6, stability_threshold=0, confidence_threshold=0.5)
    with scripted_logits(lm.model, script):
        traj = run_sampler(lm, prompt_of(lm), layouts, settings, seed=1, canvas_prefix=PREFIX)
    assert traj.steps.tolist() == [1, 4, 4]
    free = ~pinned[0]
    np.testing.assert_array_equal(traj.final_ids[0][free], first[0].numpy()[free])
    np.testing.assert_array_equal(traj.final_ids[0][~free], pinned_ids[0][~free])
    np.testing.assert_array_equal(traj.final_ids[1][~pinned[1]], later[1].numpy()[~pinned[1]])
