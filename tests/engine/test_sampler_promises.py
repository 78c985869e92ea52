"""The sampler's promises, checked where they act rather than on its returned canvas:

- the decoder sees the anchors and the pinned canvas prefix at their positions at every step
  (step 0 and after every renoise), and every free position it did not accept is renoised;
- anchors never use the entropy budget;
- adaptive stopping fires when (and only when) the argmax canvas with anchors in place is stable
  and the mean entropy over *free* positions is low; stopped samples are padded.

Each check is against an independent reconstruction written here (from the random draws the
sampler made, the logs it wrote, or logits scripted by hand), never against the sampler's own helpers.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from petri.core.dish import Dish, concept_token_ids, layout_samples, pinned_arrays
from petri.core.trajectory import SamplerSettings
from petri.engine.torch.sampler import StabilityTracker, run_sampler

PREFIX = (5, 6)  # stands in for the thought block: pinned on every sample, not an anchor
PREFIX_LENGTH = len(PREFIX)
STAGGERED = SamplerSettings(max_denoising_steps=20, entropy_bound=2.0, stability_threshold=0, confidence_threshold=1.5)


def anchored_layouts(lm, samples, seed=3, first_free=PREFIX_LENGTH):
    dish = Dish(concepts=("order", "inventory", "person"), event="x")
    ids = {c: concept_token_ids(lm.tokenizer, c) for c in dish.concepts}
    return layout_samples(dish, ids, lm.canvas_length, samples, seed=seed, first_free=first_free)


def prompt_of(lm, text="The customer placed an order"):
    return [lm.tokenizer.bos_token_id, *lm.tokenizer.encode(text)]


@dataclass
class Recorded:
    """One run with everything the sampler drew and fed to the decoder.

    ``inputs`` (T, S, L): ``decoder_input_ids`` at each forward call; ``noise`` (T + 1, S, L): the
    ``torch.randint`` draws (0: start canvas, t + 1: the renoise tokens of step t); ``denoised``
    (T, S, L): the ``torch.multinomial`` draws; ``pinned`` / ``pinned_ids`` (S, L)."""

    traj: object
    inputs: np.ndarray
    noise: np.ndarray
    denoised: np.ndarray
    pinned: np.ndarray
    pinned_ids: np.ndarray


@contextmanager
def decoder_inputs(model):
    """Collects ``decoder_input_ids`` (S, L) at every forward call of the full model (the decoder
    steps; the sampler runs the prompt encoder on its own, so that is not recorded)."""
    seen: list[np.ndarray] = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["decoder_input_ids"].cpu().numpy().copy()), with_kwargs=True
    )
    try:
        yield seen
    finally:
        handle.remove()


@contextmanager
def scripted_logits(model, script):
    """Replace the model's output logits with ``script(call_index)`` (S, L, V) at every forward call."""
    calls = {"n": 0}

    def hook(module, args, kwargs, output):
        output.logits = script(calls["n"]).to(output.logits.dtype)
        calls["n"] += 1
        return output

    handle = model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def recorded_run(lm, layouts, settings, seed, canvas_prefix=PREFIX) -> Recorded:
    """``run_sampler`` with pass-through recorders on torch.randint / torch.multinomial and the forward."""
    draws: dict[str, list[np.ndarray]] = {"randint": [], "multinomial": []}
    real = {name: getattr(torch, name) for name in draws}

    def recorder(name):
        def draw(*args, **kwargs):
            out = real[name](*args, **kwargs)
            draws[name].append(out.cpu().numpy().copy())
            return out

        return draw

    for name in draws:
        setattr(torch, name, recorder(name))
    try:
        with decoder_inputs(lm.model) as inputs:
            traj = run_sampler(lm, prompt_of(lm), layouts, settings, seed=seed, canvas_prefix=canvas_prefix)
    finally:
        for name, function in real.items():
            setattr(torch, name, function)
    batch, length = len(layouts), lm.canvas_length
    pinned, pinned_ids = pinned_arrays(layouts, canvas_prefix, length)
    return Recorded(
        traj=traj,
        inputs=np.stack(inputs),
        noise=np.stack(draws["randint"]),
        denoised=np.stack([d.reshape(batch, length) for d in draws["multinomial"]]),
        pinned=pinned,
        pinned_ids=pinned_ids,
    )


@pytest.fixture(scope="module")
def staggered(confident_lm):
    """Six anchored samples with the thought-block stand-in; the adaptive stop fires at different steps."""
    return recorded_run(confident_lm, anchored_layouts(confident_lm, 6), STAGGERED, seed=11)


# ------------------------------------------------------------------ what the decoder sees
def test_decoder_sees_anchors_and_prefix_at_every_step(staggered):
    run = staggered
    steps_run = run.traj.argmax.shape[1]
    assert run.inputs.shape == (steps_run, 6, 16)
    assert run.pinned[:, : len(PREFIX)].all() and run.pinned.sum() > 6 * len(PREFIX)  # prefix and anchors
    for t in range(steps_run):
        np.testing.assert_array_equal(run.inputs[t][run.pinned], run.pinned_ids[run.pinned], err_msg=f"step {t}")
        np.testing.assert_array_equal(run.inputs[t][:, : len(PREFIX)], np.tile(PREFIX, (6, 1)), err_msg=f"step {t}")


def test_decoder_input_is_start_noise_then_accepted_tokens_or_fresh_noise(staggered):
    """Independent reconstruction of every decoder input from the draws: step 0 is the uniform start
    canvas with the pins written over it; after step t a running sample holds the denoiser's token
    where step t accepted, fresh noise where it did not, the pins everywhere pinned; a stopped
    sample keeps its canvas."""
    run, traj = staggered, staggered.traj
    steps_run = traj.argmax.shape[1]
    assert run.noise.shape[0] == steps_run + 1 and run.denoised.shape[0] == steps_run
    expected = np.where(run.pinned, run.pinned_ids, run.noise[0])
    np.testing.assert_array_equal(run.inputs[0], expected)
    renoised = 0
    for t in range(1, steps_run):
        ran = (t - 1) < traj.steps  # (S,) did the sample run step t - 1
        proposal = np.where(traj.accepted[:, t - 1], run.denoised[t - 1], run.noise[t])
        proposal = np.where(run.pinned, run.pinned_ids, proposal)
        expected = np.where(ran[:, None], proposal, run.inputs[t - 1])
        np.testing.assert_array_equal(run.inputs[t], expected, err_msg=f"step {t}")
        renoised += int((ran[:, None] & ~traj.accepted[:, t - 1] & ~run.pinned).sum())
    # not vacuous: many free positions were renoised, and some samples sat stopped while others ran
    assert renoised > 100
    assert traj.steps.min() < traj.steps.max() == steps_run


# ------------------------------------------------------------------ the entropy budget
def budget_accept(entropy: np.ndarray, pinned: np.ndarray, bound: float) -> np.ndarray:
    """Reference entropy-bounded acceptance for one canvas (L,): pinned positions count as entropy 0;
    accept the k lowest while (sum of the k) - (largest of them) <= bound."""
    budget = np.where(pinned, 0.0, entropy).astype(np.float64)
    accepted = np.zeros(len(budget), dtype=bool)
    total = 0.0
    for position in np.argsort(budget, kind="stable"):
        if total > bound:  # total = the sum of the lower-entropy positions before this one
            break
        accepted[position] = True
        total += budget[position]
    return accepted


def test_accepted_positions_follow_the_budget_with_pinned_entropy_zero(staggered):
    traj = staggered.traj
    checked = 0
    for s in range(traj.n_samples):
        for t in range(int(traj.steps[s])):
            np.testing.assert_array_equal(
                traj.accepted[s, t], budget_accept(traj.entropy[s, t], staggered.pinned[s], STAGGERED.entropy_bound),
                err_msg=f"sample {s}, step {t}",
            )
            checked += 1
        assert not traj.accepted[s, int(traj.steps[s]):].any()
    assert checked == int(traj.steps.sum())
    # the pinned positions' own entropy would have used the budget: on this run it is well above 0
    assert np.nanmean(traj.entropy[:, :, :][np.broadcast_to(staggered.pinned[:, None], traj.entropy.shape)]) > 0.5


def one_hot_logits(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """(S, L) token ids → (S, L, V) logits with all the mass on that token (entropy exactly 0)."""
    logits = torch.full((*tokens.shape, vocab), -1e4)
    return logits.scatter(-1, tokens.unsqueeze(-1), 0.0)


def tied_logits(ties: torch.Tensor, vocab: int) -> torch.Tensor:
    """(S, L) counts k → logits spread evenly over tokens 0..k-1: entropy ln k at any temperature."""
    tokens = torch.arange(vocab)
    return torch.where(tokens < ties.unsqueeze(-1), 0.0, -1e4)


def test_pinned_positions_do_not_use_the_budget_hand_worked(tiny_lm):
    """Every pinned position has entropy ln 2; free positions 7, 10, 14 have ln 2, ln 3, ln 4 and
    the rest ln 50. With bound 1.5 and pins counted as 0: ln 2 (sum before 0), ln 3 (0.69) are
    accepted, ln 4 not (0.69 + 1.10 = 1.79 > 1.5). Were the five pins counted at ln 2, only three
    of the six ln 2 positions would fit (3 × 0.69 = 2.08 > 1.5) and ln 3 not at all."""
    lm, vocab = tiny_lm, tiny_lm.vocab_size
    layouts = [[], []]
    prefix = (5, 6, 7, 8, 9)  # positions 0..4 pinned
    pinned, _ = pinned_arrays(layouts, prefix, 16)
    ties = torch.full((2, 16), 50)
    ties[torch.from_numpy(pinned)] = 2
    ties[:, 7], ties[:, 10], ties[:, 14] = 2, 3, 4
    settings = SamplerSettings(max_denoising_steps=3, entropy_bound=1.5, stability_threshold=None, confidence_threshold=None)
    with scripted_logits(lm.model, lambda n: tied_logits(ties, vocab)):
        traj = run_sampler(lm, prompt_of(lm), layouts, settings, seed=0, canvas_prefix=prefix)
    np.testing.assert_allclose(traj.entropy[0, 0, [0, 7, 10, 14, 3]], [math.log(2), math.log(2), math.log(3), math.log(4), math.log(2)],
                               rtol=1e-5)
    expected = np.zeros(16, dtype=bool)
    expected[[0, 1, 2, 3, 4, 7, 10]] = True
    np.testing.assert_array_equal(traj.accepted, np.broadcast_to(expected, (2, 3, 16)))


# ------------------------------------------------------------------ adaptive stopping
def first_low_entropy_step(entropy: np.ndarray, free: np.ndarray, confidence: float, max_steps: int) -> int:
    """With stability threshold 0: the number of steps a sample runs, from its logged entropy (T, L)."""
    for t in range(entropy.shape[0]):
        if entropy[t][free].astype(np.float64).mean() < confidence:
            return t + 1
    return max_steps


def test_samples_stop_at_the_first_step_with_low_free_entropy_and_are_padded(staggered):
    traj, free = staggered.traj, ~staggered.pinned
    expected = [first_low_entropy_step(traj.entropy[s], free[s], 1.5, 20) for s in range(traj.n_samples)]
    assert traj.steps.tolist() == expected
    assert (traj.steps < 20).sum() >= 4, "most samples must stop early on this run"
    assert traj.argmax.shape[1] == traj.steps.max() == staggered.inputs.shape[0]  # the loop ended with the last
    early = [s for s in range(traj.n_samples) if traj.steps[s] < traj.steps.max()]
    assert len(early) >= 2
    for s in early:
        ran = int(traj.steps[s])
        assert traj.argmax[s, ran:].size > 0
        assert (traj.argmax[s, ran:] == -1).all() and (traj.argmax[s, :ran] >= 0).all()
        assert np.isnan(traj.entropy[s, ran:]).all() and not np.isnan(traj.entropy[s, :ran]).any()
        assert not traj.accepted[s, ran:].any()


@pytest.mark.parametrize(
    "settings",
    [
        SamplerSettings(max_denoising_steps=8, entropy_bound=2.0, stability_threshold=0, confidence_threshold=0.0),
        SamplerSettings(max_denoising_steps=8, entropy_bound=2.0, stability_threshold=None, confidence_threshold=None),
    ],
    ids=["unreachable confidence", "stopping off"],
)
def test_no_sample_stops_when_stopping_cannot_fire(confident_lm, settings):
    traj = run_sampler(confident_lm, prompt_of(confident_lm), anchored_layouts(confident_lm, 4), settings, seed=11, canvas_prefix=PREFIX)
    assert traj.steps.tolist() == [8] * 4 and traj.argmax.shape[1] == 8
    assert (traj.argmax >= 0).all() and not np.isnan(traj.entropy).any()


SCRIPT_LAYOUT_SEED = 4


def scripted_stop_run(lm, script_kind: str, settings: SamplerSettings):
    """Three anchored samples whose logits are scripted per call: free positions always put all
    mass on token (position + 20) (entropy 0, the same argmax every step) except as ``script_kind``
    says; the forced canvas is therefore stable from the second step on."""
    layouts = anchored_layouts(lm, 3, seed=SCRIPT_LAYOUT_SEED)
    pinned, _ = pinned_arrays(layouts, PREFIX, lm.canvas_length)
    pinned = torch.from_numpy(pinned)
    vocab = lm.vocab_size
    steady = (torch.arange(lm.canvas_length) + 20).expand(3, -1)

    def script(n):
        logits = one_hot_logits(steady, vocab)
        if script_kind == "pins uniform":  # pinned positions at entropy ln V (≈ 5.95)
            logits = torch.where(pinned[..., None], torch.zeros(vocab), logits)
        elif script_kind == "pins flip":  # the raw argmax at pinned positions alternates 100, 101
            logits = torch.where(pinned[..., None], one_hot_logits(torch.full((3, 16), 100 + n % 2), vocab), logits)
        elif script_kind == "free flip":  # one free position's argmax alternates 100, 101
            free_position = int((~pinned).all(0).nonzero()[-1])
            logits[:, free_position] = one_hot_logits(torch.full((3, 1), 100 + n % 2), vocab)[:, 0]
        return logits

    with scripted_logits(lm.model, script):
        return run_sampler(lm, prompt_of(lm), layouts, settings, seed=1, canvas_prefix=PREFIX)


DEFAULT_STOP = SamplerSettings(max_denoising_steps=7)  # stability 1, confidence 0.005


@pytest.mark.parametrize(
    "kind,settings,steps",
    [
        # stable from step 2 and free entropy 0: stop after 2 steps although the pins have entropy ln V
        ("pins uniform", DEFAULT_STOP, 2),
        # the raw argmax at the pins changes every step, but the stop compares the canvas with pins in place
        ("pins flip", DEFAULT_STOP, 2),
        # a free position changes every step: never stable, never stops
        ("free flip", DEFAULT_STOP, 7),
        # adaptive stopping switched off: runs every step even on a canvas that would stop
        ("pins uniform", SamplerSettings(max_denoising_steps=7, stability_threshold=None, confidence_threshold=None), 7),
        # stability over 3 earlier canvases: first possible at step 4
        ("pins flip", SamplerSettings(max_denoising_steps=7, stability_threshold=3), 4),
    ],
    ids=["pins-uniform", "pins-flip", "free-flip", "stopping-off", "threshold-3"],
)
def test_stop_rule_on_scripted_logits(tiny_lm, kind, settings, steps):
    traj = scripted_stop_run(tiny_lm, kind, settings)
    assert traj.steps.tolist() == [steps] * 3
    assert traj.argmax.shape[1] == steps
    if kind == "pins uniform":  # the pinned positions really were uncertain
        assert (traj.entropy[:, :, : len(PREFIX)] > 5.0).all()


# ------------------------------------------------------------------ StabilityTracker by hand
def test_stability_tracker_averages_free_positions_only():
    anchors = torch.tensor([[True, False, False, False], [False, True, True, False]])
    canvas = torch.tensor([[7, 1, 2, 3], [4, 8, 9, 5]])
    tracker = StabilityTracker(threshold=1, confidence=0.5, anchor_mask=anchors)
    # pins at entropy 9, free at 0.3: free mean 0.3 < 0.5 → stop once stable (all-position means
    # would be 2.475 and 4.65)
    high_pins = torch.where(anchors, 9.0, 0.3)
    assert tracker(canvas, high_pins).tolist() == [False, False]  # nothing to compare with yet
    assert tracker(canvas, high_pins).tolist() == [True, True]

    tracker = StabilityTracker(threshold=1, confidence=0.5, anchor_mask=anchors)
    # pins at 0, free at 0.6: free mean 0.6 ≥ 0.5 → no stop (all-position means 0.45 and 0.3 would stop)
    low_pins = torch.where(anchors, 0.0, 0.6)
    assert tracker(canvas, low_pins).tolist() == [False, False]
    assert tracker(canvas, low_pins).tolist() == [False, False]
    # free entropy drops below the confidence in sample 1 only
    assert tracker(canvas, torch.where(anchors, 0.0, torch.tensor([[0.6], [0.4]]))).tolist() == [False, True]


def test_stability_tracker_needs_threshold_equal_canvases_per_sample():
    """Threshold 2: sample 0 sees A, A, B, B, B (stable only at the fifth call); sample 1 sees A
    throughout (stable from the third call). Any position that changes, pinned or not, breaks
    stability: the sampler hands the tracker the canvas with the pins already in place."""
    anchors = torch.tensor([[False, True, False], [False, True, False]])
    a, b = [1, 2, 3], [1, 2, 4]
    sequence_0 = [a, a, b, b, b]
    low = torch.zeros(2, 3)
    tracker = StabilityTracker(threshold=2, confidence=0.1, anchor_mask=anchors)
    got = [tracker(torch.tensor([sequence_0[i], a]), low).tolist() for i in range(5)]
    assert got == [[False, False], [False, False], [False, True], [False, True], [True, True]]

    tracker = StabilityTracker(threshold=1, confidence=0.1, anchor_mask=anchors)
    tracker(torch.tensor([a, a]), low)
    assert tracker(torch.tensor([[1, 9, 3], a]), low).tolist() == [False, True]  # position 1 is pinned


def test_stability_threshold_zero_looks_at_entropy_only():
    anchors = torch.zeros((2, 3), dtype=torch.bool)
    tracker = StabilityTracker(threshold=0, confidence=0.5, anchor_mask=anchors)
    entropy = torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.5, 0.6]])  # means 0.2 and 0.533
    assert tracker(torch.tensor([[1, 2, 3], [4, 5, 6]]), entropy).tolist() == [True, False]
