"""The petri sampler against transformers' own DiffusionGemma ``generate``: with no anchors and the
same seed, the same final tokens, and the same argmax at every step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from petri.core.trajectory import SamplerSettings
from petri.engine.torch.sampler import generate_kwargs, run_sampler


class DraftRecorder:
    """A streamer that keeps every draft (argmax canvas) ``generate`` emits, one per step."""

    def __init__(self):
        self.drafts: list[np.ndarray] = []

    def put(self, value):
        pass

    def put_draft(self, value):
        self.drafts.append(value.numpy().copy())

    def end(self):
        pass


def generate_reference(lm, prompt, batch, settings: SamplerSettings, seed: int):
    recorder = DraftRecorder()
    torch.manual_seed(seed)
    out = lm.model.generate(
        torch.tensor([prompt] * batch),
        max_new_tokens=lm.canvas_length,
        eos_token_id=None,
        streamer=recorder,
        **generate_kwargs(settings),
    )
    return out.sequences[:, len(prompt):].numpy(), np.stack(recorder.drafts, axis=1)


CASES = [
    ("defaults, batch 1", "tiny_lm", 1, SamplerSettings(max_denoising_steps=6)),
    ("defaults, batch 3", "tiny_lm", 3, SamplerSettings(max_denoising_steps=6)),
    ("stopping off", "tiny_lm", 2, SamplerSettings(max_denoising_steps=5, stability_threshold=None, confidence_threshold=None)),
    ("wide entropy bound", "tiny_lm", 2, SamplerSettings(max_denoising_steps=6, entropy_bound=30.0)),
    (
        "staggered adaptive stops",
        "confident_lm",
        4,
        SamplerSettings(max_denoising_steps=20, entropy_bound=2.0, stability_threshold=0, confidence_threshold=1.5),
    ),
]


@pytest.mark.parametrize("name,fixture,batch,settings", CASES, ids=[c[0] for c in CASES])
def test_matches_generate(request, name, fixture, batch, settings):
    lm = request.getfixturevalue(fixture)
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode("The customer placed an order")]
    expected_tokens, drafts = generate_reference(lm, prompt, batch, settings, seed=3)

    traj = run_sampler(lm, prompt, [[] for _ in range(batch)], settings, seed=3)

    np.testing.assert_array_equal(traj.final_ids, expected_tokens)
    # generate emits the (frozen) argmax canvas at every step of the batch; while a sample runs,
    # that is exactly the raw argmax petri records.
    assert drafts.shape[1] == traj.argmax.shape[1]
    for s in range(batch):
        ran = int(traj.steps[s])
        np.testing.assert_array_equal(traj.argmax[s, :ran], drafts[s, :ran])
        assert (traj.argmax[s, ran:] == -1).all()
    if name == "staggered adaptive stops":
        assert len(set(traj.steps.tolist())) > 1, "the case must exercise samples stopping at different steps"
