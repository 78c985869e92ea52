"""Group comparisons for the study: Mann-Whitney U with an effect size and its bootstrap CI.

Pure numpy / scipy / pandas; never imports torch.

Conventions (used everywhere in this module):

* ``a`` / ``group_a`` is the reference group (by default "benign"), ``b`` / ``group_b`` the
  comparison group (by default "contradictory").
* Effect sizes are **positive when group b tends to be larger** than group a:
  ``cliffs_delta = P(b > a) - P(b < a)`` over all ``n_a * n_b`` pairs, and the rank-biserial
  correlation ``r = 2 * U_b / (n_a * n_b) - 1 = 1 - 2 * U_a / (n_a * n_b)``, where ``U_a`` is
  scipy's Mann-Whitney statistic for ``a`` (pairs with ``a > b`` plus half the ties) and
  ``U_b = n_a * n_b - U_a``. The two are the same number (``r == cliffs_delta``); both are kept so
  that a reader who knows either name finds it.
* ``u_statistic`` is ``U_a``, exactly what ``scipy.stats.mannwhitneyu(a, b)`` returns.
* ``alternative`` follows scipy: ``"greater"`` means a is stochastically greater than b,
  ``"less"`` means a is stochastically less than b (i.e. b larger).
* NaNs are **dropped** (a segment with no positions has no instability) and their count is kept in
  ``n_nan_a`` / ``n_nan_b`` and shown in ``summary()``. Infinite values raise ``ValueError``.
  Each group needs at least 2 finite values, else ``ValueError`` naming the group.

Choice of p-value method (``p_method``), with ``SMALL_N = 20``:

* ``min(n_a, n_b) < SMALL_N`` and no tied values in the pooled sample -> ``"exact"``
  (``mannwhitneyu(method="exact")``, the exact null distribution of U, valid without ties);
* ``min(n_a, n_b) < SMALL_N`` with ties -> ``"permutation"``
  (``mannwhitneyu(method=PermutationMethod(n_resamples, rng=seed))``; scipy enumerates all
  permutations when there are no more than ``n_resamples`` of them, otherwise it samples them, so
  the smallest attainable p-value is then ``1 / (n_resamples + 1)``);
* otherwise -> ``"asymptotic"`` (normal approximation with tie correction and continuity
  correction, scipy's default).

The confidence interval is a bootstrap of Cliff's delta that resamples each group independently
(``scipy.stats.bootstrap``), two-sided at ``confidence`` whatever ``alternative`` is. It is BCa
when ``n_a + n_b <= BCA_MAX_N`` (the jackknife behind BCa costs O(n^2 log n)); ``"percentile"``
above that, or when BCa is undefined (e.g. every resample gives the same delta, as with complete
separation of the groups). ``ci_method`` records which.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps

__all__ = [
    "UNITS",
    "SMALL_N",
    "MIN_INFORMATIVE_N",
    "too_small_note",
    "BCA_MAX_N",
    "GroupComparison",
    "LevelComparisons",
    "cliffs_delta",
    "compare_groups",
    "unit_level_values",
    "event_level_values",
    "compare_levels",
]

UNITS = ("event", "segment", "sample")
"""Units of analysis. Only ``"event"`` is independent in the study design."""

SMALL_N = 20
"""Below this smallest-group size the p-value is exact (no ties) or by permutation (ties)."""

MIN_INFORMATIVE_N = 5
"""Below this many values in either group a comparison is flagged uninformative: with 3 vs 3 the
smallest attainable exact two-sided p is 0.1 (so no result can reach 0.05), and with 4 or fewer
values the bootstrap interval has so few distinct resamples that it says nothing (2 vs 2 gives
r = +1.00 [+1.00, +1.00] whenever the groups do not overlap). The statistics are still computed and
kept in the JSON, but printed as uninformative, not as a result."""


def too_small_note(n_a: int, n_b: int, unit: str = "event") -> str:
    """The sentence that replaces a result when a group is below :data:`MIN_INFORMATIVE_N`."""
    return (f"too few {unit}s for the test or the interval to mean anything ({n_a} and {n_b}; each group needs "
            f"at least {MIN_INFORMATIVE_N})")


BCA_MAX_N = 2000
"""Largest ``n_a + n_b`` for which the bootstrap CI is BCa; percentile above."""

_ALTERNATIVES = ("two-sided", "less", "greater")


@dataclass(frozen=True)
class GroupComparison:
    """Result of one Mann-Whitney comparison of two groups (see the module docstring)."""

    unit: str
    group_a: str
    group_b: str
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    mean_a: float
    mean_b: float
    u_statistic: float
    p_value: float
    p_method: str
    rank_biserial: float
    cliffs_delta: float
    ci_low: float
    ci_high: float
    ci_method: str
    confidence: float
    alternative: str
    n_bootstrap: int
    n_permutations: int
    seed: int
    n_nan_a: int = 0
    n_nan_b: int = 0

    @property
    def independent(self) -> bool:
        """True only for the event level: segments and samples of one event are not independent."""
        return self.unit == "event"

    @property
    def informative(self) -> bool:
        """False when either group has fewer than :data:`MIN_INFORMATIVE_N` values."""
        return min(self.n_a, self.n_b) >= MIN_INFORMATIVE_N

    @property
    def unit_label(self) -> str:
        """``"event level"``, or e.g. ``"segment level (non-independent)"``."""
        label = f"{self.unit} level"
        return label if self.independent else f"{label} (non-independent)"

    def summary(self) -> str:
        """One line for a figure or a report, e.g.

        ``event level: benign n=12 median 1.158 vs contradictory n=12 median 1.468; Mann-Whitney
        U=23, p=1.3e-04 (exact, two-sided); rank-biserial r=+0.68 [95% CI +0.41, +0.88]``
        """
        conf = f"{100 * self.confidence:g}%"
        if not self.informative:
            text = (
                f"{self.unit_label}: {self.group_a} n={self.n_a} median {self.median_a:.4g} vs "
                f"{self.group_b} n={self.n_b} median {self.median_b:.4g}; UNINFORMATIVE: "
                + too_small_note(self.n_a, self.n_b, self.unit)
            )
        else:
            text = (
                f"{self.unit_label}: {self.group_a} n={self.n_a} median {self.median_a:.4g} vs "
                f"{self.group_b} n={self.n_b} median {self.median_b:.4g}; Mann-Whitney "
                f"U={self.u_statistic:g}, p={_fmt_p(self.p_value)} ({self.p_method}, "
                f"{self.alternative}); rank-biserial r={self.rank_biserial:+.2f} "
                f"[{conf} CI {self.ci_low:+.2f}, {self.ci_high:+.2f}]"
            )
        if self.n_nan_a or self.n_nan_b:
            text += f"; NaN dropped: {self.n_nan_a} {self.group_a}, {self.n_nan_b} {self.group_b}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict (JSON-serialisable), with ``independent`` and ``summary`` added."""
        out = {k: _plain(v) for k, v in asdict(self).items()}
        out["independent"] = self.independent
        out["informative"] = self.informative
        out["min_informative_n"] = MIN_INFORMATIVE_N
        out["summary"] = self.summary()
        return out


class LevelComparisons(NamedTuple):
    """Event-level (independent, the headline) and segment-level (non-independent) comparisons."""

    event: GroupComparison
    segment: GroupComparison

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {"event": self.event.to_dict(), "segment": self.segment.to_dict()}


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


def _fmt_p(p: float) -> str:
    if not math.isfinite(p):
        return "nan"
    return f"{p:.3g}" if p >= 1e-3 else f"{p:.2e}"


# --------------------------------------------------------------------------- effect size


def _delta_along_last_axis(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cliff's delta ``P(b > a) - P(b < a)`` along the last axis, broadcasting leading axes.

    Uses mid-ranks of the pooled sample: ``U_b = R_b - n_b (n_b + 1) / 2`` counts the pairs with
    ``b > a`` plus half the ties, and ``delta = 2 U_b / (n_a n_b) - 1``. O(n log n) per row.
    """
    n_a, n_b = a.shape[-1], b.shape[-1]
    lead = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    a = np.broadcast_to(a, lead + (n_a,))
    b = np.broadcast_to(b, lead + (n_b,))
    ranks = sps.rankdata(np.concatenate([a, b], axis=-1), axis=-1)
    u_b = ranks[..., n_a:].sum(axis=-1) - n_b * (n_b + 1) / 2.0
    return 2.0 * u_b / (n_a * n_b) - 1.0


def _bootstrap_statistic(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return _delta_along_last_axis(np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1))


def cliffs_delta(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Cliff's delta of ``b`` over ``a``: ``(#{b > a} - #{b < a}) / (n_a * n_b)`` over all pairs.

    Positive when ``b`` tends to be larger; in [-1, 1]; ties count for neither side. Vectorised
    (rank-based, O(n log n)); equal to the rank-biserial correlation ``1 - 2 U_a / (n_a n_b)``.
    Inputs must be non-empty and free of NaN.
    """
    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("cliffs_delta needs two non-empty samples")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("cliffs_delta: inputs contain NaN")
    return float(_delta_along_last_axis(a, b))


# --------------------------------------------------------------------------- the test


def _clean(values: Sequence[float] | np.ndarray, label: str) -> tuple[np.ndarray, int]:
    """Float 1-D array with NaNs dropped, and how many were dropped."""
    try:
        x = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"group {label!r}: values are not numeric ({exc})") from None
    nan = np.isnan(x)
    x = x[~nan]
    if np.isinf(x).any():
        raise ValueError(f"group {label!r}: contains infinite values")
    if x.size < 2:
        raise ValueError(
            f"group {label!r} needs at least 2 values, got {x.size}"
            + (f" (after dropping {int(nan.sum())} NaN)" if nan.any() else "")
        )
    return x, int(nan.sum())


def _bootstrap_ci(
    a: np.ndarray, b: np.ndarray, n_bootstrap: int, confidence: float, seed: int
) -> tuple[float, float, str]:
    methods = ["BCa", "percentile"] if a.size + b.size <= BCA_MAX_N else ["percentile"]
    low = high = float("nan")
    for method in methods:
        with warnings.catch_warnings():
            # BCa warns (DegenerateDataWarning / divide) when it is undefined; we fall back.
            warnings.simplefilter("ignore")
            res = sps.bootstrap(
                (a, b),
                _bootstrap_statistic,
                n_resamples=n_bootstrap,
                vectorized=True,
                paired=False,
                confidence_level=confidence,
                method=method,
                batch=max(1, min(n_bootstrap, 2_000_000 // (a.size + b.size))),
                rng=np.random.default_rng(seed),
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high, method
    return low, high, methods[-1]


def compare_groups(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    unit: str,
    labels: tuple[str, str] = ("benign", "contradictory"),
    alternative: str = "two-sided",
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    n_permutations: int = 9999,
) -> GroupComparison:
    """Mann-Whitney U test of ``a`` (``labels[0]``) vs ``b`` (``labels[1]``) with effect size.

    ``unit`` is one of :data:`UNITS` and says what one value is (only ``"event"`` is an independent
    unit). The p-value method is chosen as described in the module docstring; the result is fully
    determined by the inputs and ``seed`` (permutation p-value and bootstrap CI are seeded).
    Raises ``ValueError`` for a bad unit / alternative / confidence, infinite values, or a group
    with fewer than 2 non-NaN values (the message names the group).
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}, got {alternative!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_bootstrap < 1 or n_permutations < 1:
        raise ValueError("n_bootstrap and n_permutations must be >= 1")
    if len(labels) != 2:
        raise ValueError(f"labels must be two names, got {labels!r}")
    label_a, label_b = (str(x) for x in labels)
    x, nan_a = _clean(a, label_a)
    y, nan_b = _clean(b, label_b)

    pooled = np.concatenate([x, y])
    has_ties = np.unique(pooled).size < pooled.size
    if min(x.size, y.size) < SMALL_N:
        if has_ties:
            p_method = "permutation"
            method: Any = sps.PermutationMethod(n_resamples=n_permutations, rng=seed)
        else:
            p_method = method = "exact"
    else:
        p_method = method = "asymptotic"
    res = sps.mannwhitneyu(x, y, alternative=alternative, method=method)
    u_a = float(res.statistic)

    r = 1.0 - 2.0 * u_a / (x.size * y.size)
    delta = cliffs_delta(x, y)
    ci_low, ci_high, ci_method = _bootstrap_ci(x, y, n_bootstrap, confidence, seed)

    return GroupComparison(
        unit=unit,
        group_a=label_a,
        group_b=label_b,
        n_a=int(x.size),
        n_b=int(y.size),
        median_a=float(np.median(x)),
        median_b=float(np.median(y)),
        mean_a=float(np.mean(x)),
        mean_b=float(np.mean(y)),
        u_statistic=u_a,
        p_value=float(res.pvalue),
        p_method=p_method,
        rank_biserial=float(r),
        cliffs_delta=delta,
        ci_low=ci_low,
        ci_high=ci_high,
        ci_method=ci_method,
        confidence=float(confidence),
        alternative=alternative,
        n_bootstrap=int(n_bootstrap),
        n_permutations=int(n_permutations) if p_method == "permutation" else 0,
        seed=int(seed),
        n_nan_a=nan_a,
        n_nan_b=nan_b,
    )


# --------------------------------------------------------------------------- units of analysis


def unit_level_values(
    df: pd.DataFrame, unit_col: str, value: str = "instability", group_col: str = "group"
) -> pd.DataFrame:
    """Aggregate rows to one value per ``unit_col`` (mean of ``value``, NaNs skipped).

    Returns columns ``[unit_col, group_col, value, "n_rows"]`` (``n_rows``: rows averaged, NaN
    rows included), sorted by ``unit_col``. A unit whose rows are all NaN gets NaN. Raises
    ``ValueError`` if a column is missing or a unit carries more than one group label.
    """
    missing = [c for c in (unit_col, group_col, value) if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; have {list(df.columns)}")
    labels_per_unit = df.groupby(unit_col, sort=True)[group_col].nunique(dropna=False)
    mixed = labels_per_unit[labels_per_unit > 1]
    if len(mixed):
        raise ValueError(
            f"{unit_col} values with more than one {group_col!r} label: {list(mixed.index[:5])}"
        )
    out = (
        df.groupby(unit_col, sort=True)
        .agg(**{group_col: (group_col, "first"), value: (value, "mean"), "n_rows": (value, "size")})
        .reset_index()
    )
    return out


def event_level_values(
    segments_df: pd.DataFrame,
    value: str = "instability",
    event_col: str = "event",
    group_col: str = "group",
) -> pd.DataFrame:
    """One value per event: the mean of ``value`` over that event's segment rows.

    This is the honest independent unit (segments of one event share the event). Returns columns
    ``[event_col, group_col, value, "n_rows"]``; see :func:`unit_level_values`.
    """
    return unit_level_values(segments_df, event_col, value=value, group_col=group_col)


def compare_levels(
    segment_df: pd.DataFrame,
    group_col: str = "group",
    groups: tuple[str, str] = ("benign", "contradictory"),
    *,
    value: str = "instability",
    event_col: str = "event",
    **kwargs: Any,
) -> LevelComparisons:
    """Compare ``groups[0]`` vs ``groups[1]`` at the event level and at the segment level.

    ``segment_df`` has one row per observed segment with columns ``event_col``, ``group_col`` and
    ``value``. The event-level comparison (unit ``"event"``, the headline) uses
    :func:`event_level_values`; the segment-level one (unit ``"segment"``, labelled
    non-independent in its summary) uses the rows as they are. Other groups present in the frame
    are ignored. ``kwargs`` go to :func:`compare_groups` (alternative, n_bootstrap, confidence,
    seed, n_permutations).
    """
    if len(groups) != 2:
        raise ValueError(f"groups must be two labels, got {groups!r}")
    events = event_level_values(segment_df, value=value, event_col=event_col, group_col=group_col)
    present = set(segment_df[group_col].unique())
    for g in groups:
        if g not in present:
            raise ValueError(
                f"group {g!r} not found in column {group_col!r}; have {sorted(map(str, present))}"
            )

    def pick(frame: pd.DataFrame, g: str) -> np.ndarray:
        return frame.loc[frame[group_col] == g, value].to_numpy(dtype=float)

    labels = (str(groups[0]), str(groups[1]))
    event = compare_groups(
        pick(events, groups[0]), pick(events, groups[1]), unit="event", labels=labels, **kwargs
    )
    segment = compare_groups(
        pick(segment_df, groups[0]),
        pick(segment_df, groups[1]),
        unit="segment",
        labels=labels,
        **kwargs,
    )
    return LevelComparisons(event=event, segment=segment)
