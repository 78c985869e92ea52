"""The statistics of experiments/fp8_shift.py (issue 25's FP8 shift): seed-level means and tests on a
hand-worked case, p-values that float32 inputs must not round to 0, and the recomputation of a run's
comparisons from its saved arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiment_support import experiment_script


@pytest.fixture(scope="module")
def shift():
    return experiment_script("fp8_shift")


def test_seed_level_tests_hand_worked(shift):
    # two samples a seed; seed means 1, 2, 3 (arm) against 4, 5, 6 (bf16): U = 0, and the exact
    # two-sided Mann-Whitney p is 2 / C(6, 3) = 0.1; the mean shift (2 - 5) / 5
    arm = {"flips": np.array([0.5, 1.5, 2.0, 2.0, 3.0, 3.0])}
    base = {"flips": np.array([4.0, 4.0, 5.0, 5.0, 5.5, 6.5])}
    got = shift.compare(arm, base, batch=2, paired=False)["flips"]
    assert got["mean"] == 2.0 and got["mean_bf16"] == 5.0
    assert got["relative_shift"] == pytest.approx(-0.6)
    assert got["seed_level"]["seeds"] == 3
    assert got["seed_level"]["mann_whitney_p"] == pytest.approx(0.1)
    assert got["seed_level"]["wilcoxon_paired_p"] is None


def test_tiny_p_values_survive_float32_arrays(shift):
    # 250 seeds whose float32 means are about 15 standard errors apart: p near 1e-50, which float32 rounds to 0
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(0)
    base = rng.normal(10.276, 0.008, 250 * 12).astype(np.float32)
    arm = (base + rng.normal(0.0134, 0.004, base.shape)).astype(np.float32)
    got = shift.compare({"entropy": arm}, {"entropy": base}, batch=12, paired=True)["entropy"]["seed_level"]
    want = mannwhitneyu(arm.astype(np.float64).reshape(-1, 12).mean(1), base.astype(np.float64).reshape(-1, 12).mean(1)).pvalue
    assert 0 < got["mann_whitney_p"] < 1e-30
    assert got["mann_whitney_p"] == pytest.approx(want, rel=1e-6)


def test_a_runs_comparisons_recomputed_from_its_arrays(shift, tmp_path):
    arrays = {"bf16_flips": np.array([1.0, 1.0, 2.0, 2.0, 3.0, 3.0]), "fp8_flips": np.array([4.0, 4.0, 5.0, 5.0, 6.0, 6.0]),
              "bf16_other_seeds_flips": np.array([1.0, 2.0, 2.0, 3.0, 3.0, 4.0])}
    np.savez(tmp_path / "run.npz", **arrays)
    (tmp_path / "run.json").write_text(json.dumps({"batch": 2, "fp8_vs_bf16": "stale"}))
    shift.recompare(str(tmp_path / "run.npz"), 2, str(tmp_path / "run.json"))
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["recomputed_from"] == "run.npz"
    assert run["fp8_vs_bf16"]["flips"]["relative_shift"] == pytest.approx(1.5)  # (5 - 2) / 2
    assert run["fp8_vs_bf16"]["flips"]["seed_level"]["wilcoxon_paired_p"] is not None  # same seeds: paired
    assert run["bf16_other_seeds_vs_bf16"]["flips"]["seed_level"]["wilcoxon_paired_p"] is None
    with pytest.raises(SystemExit, match="--batch 3 differs from the run's batch 2"):
        shift.recompare(str(tmp_path / "run.npz"), 3, str(tmp_path / "run.json"))
