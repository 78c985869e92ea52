"""Studies run on any engine that implements :class:`petri.engine.base.SamplingModel`.

(a) The torch sampler's own ``fixed_noise`` mode equals the torch sampler driven, unchanged, by
    standing in for ``torch.randint`` / ``torch.multinomial`` (the independent reference of
    ``tests/engine/test_mlx_backend.py``): the new code path draws exactly the fixed noise.
(b) A small study run by the one study runner on torch and on MLX, both with the noise fixed per
    batch from the batch seed, gives the same per-step argmax, accept masks, steps and final tokens
    in every batch (entropies within 1e-4), and the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from engine.test_mlx_backend import ENTROPY_ATOL, anchored_layouts, confident, torch_driven_by
from petri.core.trajectory import SamplerSettings
from petri.engine.base import SamplingModel
from petri.engine.fixed_noise import FixedNoise
from petri.engine.select import mlx_available
from petri.engine.torch.sampler import run_sampler
from petri.measure.tables import pairs_table
from petri.runs.store import RunStore
from petri.study.execution.runner import run_study
from petri.study.plan import StudyPlan
from petri.study.schema import study_from_dict
from study_support import study_dict
from tiny_support import save_checkpoint

SETTINGS = SamplerSettings(max_denoising_steps=6, entropy_bound=50.0, stability_threshold=1, confidence_threshold=4.0)
STUDY = study_dict("engines", "torch vs MLX", templates=1)


@dataclass
class FixedNoiseModel:
    """Any engine's model with the noise of each batch fixed from its seed (numpy draws, equal on
    every backend); everything else is the wrapped model's."""

    inner: SamplingModel

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def sample(self, request, **kwargs):
        noise = FixedNoise.from_seed(request.seed, len(request.layouts), self.inner.canvas_length,
                                     self.inner.vocab_size, request.settings.max_denoising_steps)
        return self.inner.sample(request, fixed_noise=noise, **kwargs)


def test_torch_fixed_noise_mode_equals_the_patched_reference(tiny_lm):
    lm = tiny_lm
    layouts = anchored_layouts(lm, samples=3)
    prompt = [lm.tokenizer.bos_token_id, *lm.tokenizer.encode("The customer placed an order")]
    fixed = FixedNoise.from_seed(9, len(layouts), lm.canvas_length, lm.vocab_size, SETTINGS.max_denoising_steps)
    with torch_driven_by(fixed, lm.vocab_size):
        reference = run_sampler(lm, prompt, layouts, SETTINGS)
    native = run_sampler(lm, prompt, layouts, SETTINGS, fixed_noise=fixed)
    for field in ("argmax", "accepted", "steps", "final_ids"):
        np.testing.assert_array_equal(getattr(native, field), getattr(reference, field), err_msg=field)
    np.testing.assert_array_equal(native.entropy, reference.entropy)
    # and the fixed noise matters: another stream gives another trajectory
    other = FixedNoise.from_seed(10, len(layouts), lm.canvas_length, lm.vocab_size, SETTINGS.max_denoising_steps)
    assert not np.array_equal(run_sampler(lm, prompt, layouts, SETTINGS, fixed_noise=other).argmax, native.argmax)


def test_fixed_noise_of_the_wrong_shape_is_refused(tiny_lm):
    layouts = anchored_layouts(tiny_lm, samples=2)
    wrong = FixedNoise.from_seed(0, 3, tiny_lm.canvas_length, tiny_lm.vocab_size, 4)
    with pytest.raises(ValueError, match=r"expected \(2, 16\)"):
        run_sampler(tiny_lm, [2, 5, 6], layouts, SETTINGS, fixed_noise=wrong)


def test_both_engines_implement_the_protocol(tiny_lm):
    assert isinstance(tiny_lm, SamplingModel)
    assert tiny_lm.backend == "torch" and tiny_lm.device_type == "cpu"
    assert len(tiny_lm.fingerprint()) == 16


@pytest.mark.skipif(not mlx_available(), reason='mlx is not importable (pip install "mlx[cpu]")')
def test_a_study_on_mlx_equals_the_study_on_torch(tmp_path):
    from petri.engine.mlx.sampler import load_mlx_model
    from petri.engine.torch.tiny import tiny_random_model

    torch_lm = confident(tiny_random_model(canvas_length=16))
    folder = tmp_path / "checkpoint"
    save_checkpoint(torch_lm, folder)
    mlx_lm = load_mlx_model(folder, dtype="float32")
    assert isinstance(mlx_lm, SamplingModel) and mlx_lm.device_type == "mlx" and len(mlx_lm.fingerprint()) == 16

    study = study_from_dict(STUDY)
    runs = {}
    for name, lm in (("torch", torch_lm), ("mlx", mlx_lm)):
        store = RunStore(tmp_path / f"store-{name}")
        runs[name] = run_study(FixedNoiseModel(lm), StudyPlan(study, samples=3, seed=4, settings=SETTINGS), store)
        store.close()
    ref, got = runs["torch"], runs["mlx"]
    assert [b.key for b in got.batches] == [b.key for b in ref.batches] == ["b1::t1", "b2::t1", "c1::t1", "c2::t1"]
    assert got.run_id != ref.run_id  # the device kind is part of the run id
    stopped_early = 0
    for a, b in zip(ref.batches, got.batches):
        assert a.seed == b.seed
        for field in ("argmax", "accepted", "steps", "final_ids", "anchor_mask"):
            np.testing.assert_array_equal(getattr(b.trajectory, field), getattr(a.trajectory, field), err_msg=field)
        np.testing.assert_allclose(b.trajectory.entropy, a.trajectory.entropy, atol=ENTROPY_ATOL, rtol=0)
        stopped_early += int((a.trajectory.steps < SETTINGS.max_denoising_steps).sum())
        columns = ["pair", "n_segments", "instability"]  # the tags differ: model id and device
        assert pairs_table(a.trajectory)[columns].equals(pairs_table(b.trajectory)[columns])
    assert stopped_early > 0, "the case should exercise the adaptive stop on both engines"
