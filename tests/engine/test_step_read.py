"""The protocol's step read hook (``SteppedModel.read_steps``, issue 61) and its model facts as data
(``SamplingModel.facts``): the hook sees, at every step, the logits and the canvas the model's own
sampler used at that step (the reference: the trajectory ``sample`` records for the same request),
for both families; facts name what each model is."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from petri.core.cancel import Cancelled, CancelToken
from petri.core.trajectory import AnchorSpan, MaskedSettings, SamplerSettings
from petri.engine.base import EngineFacts, SampleRequest
from petri.engine.torch.tiny import tiny_masked_model


@pytest.fixture(scope="module")
def masked_lm():
    return tiny_masked_model(canvas_length=12)


def request_for(lm, steps: int) -> SampleRequest:
    """Two samples, one anchor each, ``steps`` steps that never stop early."""
    settings = (SamplerSettings(max_denoising_steps=steps, stability_threshold=None, confidence_threshold=None)
                if lm.family == "uniform-diffusion" else MaskedSettings(max_denoising_steps=steps))
    layouts = [[AnchorSpan("a", 2, (7,))], [AnchorSpan("a", 5, (9,))]]
    return SampleRequest([3, 4, 5], layouts, settings, seed=11)


def reads_of(lm, request: SampleRequest, steps: int) -> list[tuple[int, np.ndarray, np.ndarray, bool]]:
    """(index, argmax of the logits (S, L), the canvas read (S, L), gradients on) at each read."""
    seen = []

    def on_read(index, tensors):
        seen.append((index, tensors["logits"].argmax(-1).numpy().copy(), tensors["canvas"].numpy().copy(),
                     torch.is_grad_enabled()))

    lm.read_steps(request, steps, on_read)
    return seen


@pytest.mark.parametrize("which", ["uniform", "masked"])
def test_each_read_sees_the_logits_and_canvas_the_sampler_used(which, tiny_lm, masked_lm):
    lm = tiny_lm if which == "uniform" else masked_lm
    steps = 3
    request = request_for(lm, steps)
    reference = lm.sample(request)  # the same seed: the same noise, the same steps
    assert reference.argmax.shape[1] == steps
    seen = reads_of(lm, request, steps)
    assert [index for index, *_ in seen] == list(range(steps))
    for index, argmax, canvas, grad in seen:
        np.testing.assert_array_equal(argmax, reference.argmax[:, index])  # the raw argmax the record kept
        if index:  # the canvas a step reads is the one the step before left
            np.testing.assert_array_equal(canvas, reference.canvas[:, index - 1])
        assert not grad
    # seeding is the request's: reading again gives the same reads
    again = reads_of(lm, request, steps)
    for (_, a, c, _), (_, b, d, _) in zip(seen, again):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(c, d)


def test_the_last_read_runs_its_forward_only(tiny_lm, monkeypatch):
    """``steps`` reads, ``steps - 1`` family steps: the last step's read is all that is wanted of it."""
    from petri.engine.families.uniform import UniformDiffusionScheduler

    stepped = []
    step = UniformDiffusionScheduler.step
    monkeypatch.setattr(UniformDiffusionScheduler, "step", lambda self, logits, index: stepped.append(index)
                        or step(self, logits, index))
    assert len(reads_of(tiny_lm, request_for(tiny_lm, 3), 3)) == 3
    assert stepped == [0, 1]


def test_a_cancelled_read_stops_before_its_next_step(tiny_lm):
    cancel, seen = CancelToken(), []

    def on_read(index, tensors):
        seen.append(index)
        cancel.cancel()

    with pytest.raises(Cancelled):
        tiny_lm.read_steps(request_for(tiny_lm, 3), 3, on_read, cancel=cancel)
    assert seen == [0]


def test_facts_say_what_each_model_is(tiny_lm, masked_lm):
    assert tiny_lm.facts() == EngineFacts(
        backend="torch", family="uniform-diffusion", tier="eager", device="cpu", device_type="cpu", dtype="float32",
        architecture="DiffusionGemmaForBlockDiffusion", kept_prompt_bytes=tiny_lm.fast_tier.prompts.max_bytes)
    assert masked_lm.facts() == EngineFacts(
        backend="torch", family="masked-diffusion", tier="masked", device="cpu", device_type="cpu", dtype="float32",
        architecture="BertForMaskedLM", kept_prompt_bytes=None)
    before = tiny_lm.fast_tier.prompts.max_bytes
    try:
        tiny_lm.fast_tier.prompts.set_max_bytes(5 * 2**20)
        assert tiny_lm.facts().kept_prompt_bytes == 5 * 2**20  # read now, not when loaded
    finally:
        tiny_lm.fast_tier.prompts.set_max_bytes(before)
