"""petri.stats.calibration against hand-worked cases and independent references (statsmodels'
Wilson interval, scipy's Mann-Whitney U)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu
from statsmodels.stats.proportion import proportion_confint

from petri.stats.calibration import (
    auc_with_interval,
    brier_score,
    changed_share,
    expected_calibration_error,
    reliability_bins,
    wilson_interval,
)


@pytest.mark.parametrize("k,n", [(105, 154), (84, 154), (0, 10), (10, 10), (1, 3), (50, 100)])
@pytest.mark.parametrize("level", [0.95, 0.9])
def test_wilson_matches_statsmodels(k, n, level):
    low, high = proportion_confint(k, n, alpha=1 - level, method="wilson")
    assert wilson_interval(k, n, level) == pytest.approx((low, high), abs=1e-12)


def test_wilson_refuses_impossible_counts():
    with pytest.raises(ValueError):
        wilson_interval(5, 3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_brier_hand_worked():
    probs = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    # (0.3² + 0.3²) + (0.8² + 0.8²) + (0.5² + 0.5²) = 0.18 + 1.28 + 0.5 = 1.96, over 3 items
    assert brier_score(probs, np.array([0, 0, 1])) == pytest.approx(1.96 / 3)
    # two alternatives: twice the binary form mean((p_yes - y)²)
    y = np.array([1, 1, 0])
    assert brier_score(probs, np.array([0, 0, 1])) == pytest.approx(2 * np.mean((probs[:, 0] - y) ** 2))
    assert brier_score(np.eye(3), np.arange(3)) == 0.0


def test_ece_and_bins_hand_worked():
    confidence = [0.15, 0.25, 0.95, 0.85, 0.95]
    correct = [False, True, True, False, True]
    # bins 1, 2, 8 hold one item each (gaps .15, .75, .85), bin 9 two (confidence .95, accuracy 1: gap .05)
    assert expected_calibration_error(confidence, correct) == pytest.approx((0.15 + 0.75 + 0.85 + 2 * 0.05) / 5)
    table = reliability_bins(confidence, correct)
    assert list(table.columns) == ["bin_low", "bin_high", "n", "mean_confidence", "accuracy"]
    assert table["n"].tolist() == [0, 1, 1, 0, 0, 0, 0, 0, 1, 2]
    assert table.loc[9, "mean_confidence"] == pytest.approx(0.95) and table.loc[9, "accuracy"] == 1.0
    assert math.isnan(table.loc[0, "accuracy"])
    assert reliability_bins([1.0], [True])["n"].tolist()[-1] == 1  # 1.0 falls in the last bin
    assert expected_calibration_error([0.5, 0.5], [True, False], bins=1) == 0.0


def test_auc_matches_mann_whitney_and_delong_hand_worked():
    pos, neg = [0.9, 0.6, 0.4], [0.5, 0.3]
    scores = np.array(pos + neg)
    positive = np.array([True] * 3 + [False] * 2)
    auc, low, high = auc_with_interval(scores, positive)
    assert auc == pytest.approx(mannwhitneyu(pos, neg).statistic / 6) == pytest.approx(5 / 6)
    # DeLong by hand: V10 = (1, 1, 1/2) → var 1/12; V01 = (2/3, 1) → var 1/18; 1/12/3 + 1/18/2 = 1/18
    half = 1.959963984540054 * math.sqrt(1 / 18)
    assert low == pytest.approx(5 / 6 - half) and high == 1.0


def test_auc_with_ties_matches_mann_whitney():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, 40).astype(float)
    positive = rng.random(40) < 0.5
    auc, low, high = auc_with_interval(scores, positive)
    u = mannwhitneyu(scores[positive], scores[~positive]).statistic
    assert auc == pytest.approx(u / (positive.sum() * (~positive).sum()))
    assert low < auc < high
    with pytest.raises(ValueError):
        auc_with_interval([1.0, 2.0], [True, True])


def test_changed_share():
    answers = np.array([["yes", "no", "yes", "no"],
                        ["yes", "yes", "yes", "no"],
                        ["yes", "no", "no", "no"]])
    assert changed_share(answers) == 0.5
    assert changed_share(answers[:1]) == 0.0
