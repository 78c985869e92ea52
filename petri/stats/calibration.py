"""Accuracy, calibration and separation of probabilistic answers (the probe's evaluation, issue 50).

Layer 1 (numpy / scipy / pandas). Definitions:

- **Wilson interval** of a proportion (Wilson 1927): centre ``(p + z²/2n) / (1 + z²/n)``, half-width
  ``z √(p(1-p)/n + z²/4n²) / (1 + z²/n)``, ``z`` the two-sided normal quantile of ``level``.
- **Brier score** (Brier 1950, the multi-class form): the mean over items of
  ``Σ_k (p_k - [k = gold])²``, 0 (perfect) to 2. With two alternatives it is twice the binary
  ``mean((p_yes - y)²)``.
- **Reliability bins**: ``bins`` equal-width bins of the confidence (the probability of the answer
  given) over [0, 1] (the last closed), each with its count, mean confidence and accuracy.
- **Expected calibration error** (Naeini et al. 2015): ``Σ_b (n_b / n) |accuracy_b - confidence_b|``
  over those bins.
- **AUC** of scores for positive against negative units: ``P(score_pos > score_neg) + ½ P(tie)``,
  which equals Mann-Whitney's ``U / (n1 n0)``; its interval is DeLong's (DeLong et al. 1988)
  variance ``S10 / n1 + S01 / n0`` with a normal (Wald) interval, clipped to [0, 1].
- **Changed share** (repeatability): of items read R times, the share whose answer was not the same
  every time.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

__all__ = ["wilson_interval", "brier_score", "expected_calibration_error", "reliability_bins",
           "auc_with_interval", "changed_share"]


def _z(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    return float(sps.norm.ppf(0.5 + level / 2))


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` of ``n``; (0, 1) when ``n`` is 0."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    z = _z(level)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def brier_score(probs: np.ndarray, gold: np.ndarray) -> float:
    """Multi-class Brier score: ``probs`` (n, k) rows of probabilities, ``gold`` (n,) int indices."""
    probs = np.asarray(probs, dtype=float)
    gold = np.asarray(gold, dtype=int)
    if probs.ndim != 2 or gold.shape != (probs.shape[0],):
        raise ValueError(f"need probs (n, k) and gold (n,), got {probs.shape} and {gold.shape}")
    if probs.shape[0] == 0:
        return float("nan")
    if gold.min() < 0 or gold.max() >= probs.shape[1]:
        raise ValueError(f"gold indices must lie in 0..{probs.shape[1] - 1}")
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(gold)), gold] = 1.0
    return float(((probs - onehot) ** 2).sum(axis=1).mean())


def _bin_index(confidence: np.ndarray, bins: int) -> np.ndarray:
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    if np.any((confidence < 0) | (confidence > 1)) or not np.all(np.isfinite(confidence)):
        raise ValueError("confidence must lie in [0, 1]")
    return np.minimum((confidence * bins).astype(int), bins - 1)


def reliability_bins(confidence, correct, bins: int = 10) -> pd.DataFrame:
    """One row per equal-width bin: ``bin_low``, ``bin_high``, ``n``, ``mean_confidence``,
    ``accuracy`` (NaN where the bin is empty). ``confidence`` (n,) in [0, 1], ``correct`` (n,) bool."""
    confidence = np.asarray(confidence, dtype=float).ravel()
    correct = np.asarray(correct, dtype=bool).ravel()
    if confidence.shape != correct.shape:
        raise ValueError(f"confidence and correct need the same length, got {confidence.size} and {correct.size}")
    index = _bin_index(confidence, bins)
    rows = []
    for b in range(bins):
        inside = index == b
        n = int(inside.sum())
        rows.append({"bin_low": b / bins, "bin_high": (b + 1) / bins, "n": n,
                     "mean_confidence": float(confidence[inside].mean()) if n else float("nan"),
                     "accuracy": float(correct[inside].mean()) if n else float("nan")})
    return pd.DataFrame(rows, columns=["bin_low", "bin_high", "n", "mean_confidence", "accuracy"])


def expected_calibration_error(confidence, correct, bins: int = 10) -> float:
    """ECE over :func:`reliability_bins` (NaN with no item)."""
    table = reliability_bins(confidence, correct, bins)
    total = table["n"].sum()
    if total == 0:
        return float("nan")
    full = table[table["n"] > 0]
    return float((full["n"] / total * (full["accuracy"] - full["mean_confidence"]).abs()).sum())


def auc_with_interval(scores, positive, level: float = 0.95) -> tuple[float, float, float]:
    """(AUC, low, high) of ``scores`` (n,) separating ``positive`` (n,) bool units from the rest
    (higher score = more positive), DeLong's interval. Raises ``ValueError`` without both kinds."""
    scores = np.asarray(scores, dtype=float).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    if scores.shape != positive.shape:
        raise ValueError(f"scores and positive need the same length, got {scores.size} and {positive.size}")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite")
    pos, neg = scores[positive], scores[~positive]
    if pos.size == 0 or neg.size == 0:
        raise ValueError("AUC needs at least one positive and one negative unit")
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])  # (n1, n0)
    auc = float(psi.mean())
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    s10 = float(v10.var(ddof=1)) if pos.size > 1 else 0.0
    s01 = float(v01.var(ddof=1)) if neg.size > 1 else 0.0
    se = math.sqrt(s10 / pos.size + s01 / neg.size)
    z = _z(level)
    return auc, max(0.0, auc - z * se), min(1.0, auc + z * se)


def changed_share(answers: np.ndarray) -> float:
    """``answers`` (repeats, items), any comparable values: the share of items whose answer was not
    the same in every repeat (0 with one repeat)."""
    answers = np.asarray(answers)
    if answers.ndim != 2 or answers.shape[1] == 0:
        raise ValueError(f"need answers (repeats, items), got shape {answers.shape}")
    changed = (answers != answers[:1]).any(axis=0)
    return float(changed.mean())
