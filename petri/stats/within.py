"""Paired statistics of a within-event design: every event measured under two (or more) conditions,
the event is the unit. Layer 1 (numpy / scipy / statsmodels through :mod:`petri.stats.mixed`).

For two conditions A (the reference) and B, with one value per event and condition (an *event
mean*, e.g. the mean segment instability of the event's samples under that condition) and the
differences ``d_i = B_i - A_i`` over the ``n`` events with both values:

- **Wilcoxon signed-rank** (:func:`petri.stats.paired.wilcoxon_paired`, two-sided): zero
  differences are dropped (Wilcoxon's ``zero_method="wilcox"``) and reported; exact null
  distribution when at most 50 differences are non-zero and no two ``|d|`` tie, else the normal
  approximation with tie correction.
- **Hodges-Lehmann estimate**: the median of the ``n (n + 1) / 2`` Walsh averages ``(d_i + d_j) / 2``,
  ``i <= j`` (zeros included). Its interval is the distribution-free one from the same Walsh
  averages: ``[W_(k), W_(M + 1 - k)]`` with ``M = n (n + 1) / 2`` and ``k - 1`` the largest ``t`` with
  ``P(T+ <= t) <= alpha / 2`` under the exact signed-rank null distribution of ``n`` (counted here by
  dynamic programming over the ``2^n`` sign patterns); its achieved confidence
  ``1 - 2 P(T+ <= k - 1)`` is reported (at least the nominal one; ties in the data make it approximate).
- **Matched-pairs rank-biserial** ``r = (T+ - T-) / (T+ + T-)`` over the non-zero differences ranked by
  ``|d|`` (average ranks for ties): +1 when every event is higher under B.
- **Share of events with B > A** (and with B = A).
- **Page's trend test** (:func:`page_trend`) for ordered conditions (doses): ``scipy.stats.page_trend_test``
  on the events x conditions table (events with a missing cell dropped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from petri.stats.paired import WilcoxonResult, wilcoxon_paired

__all__ = ["PairedComparison", "PageResult", "walsh_averages", "signed_rank_null", "hodges_lehmann",
           "paired_comparison", "page_trend", "event_condition_means"]


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def event_condition_means(df: pd.DataFrame, value: str, *, event_col: str = "event_id",
                          condition_col: str = "condition", conditions: Sequence[str] | None = None) -> pd.DataFrame:
    """The wide table ``[n_events, n_conditions]`` of event means: the mean of ``value`` over the rows
    of each (event, condition) (NaN rows skipped; a cell with no value is NaN), events sorted by id,
    columns in ``conditions`` order (default: sorted)."""
    missing = [c for c in (event_col, condition_col, value) if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; have {list(df.columns)}")
    wide = df.groupby([event_col, condition_col])[value].mean().unstack(condition_col)
    cols = list(conditions) if conditions is not None else sorted(wide.columns)
    return wide.reindex(columns=cols).sort_index()


def walsh_averages(d: np.ndarray) -> np.ndarray:
    """The ``n (n + 1) / 2`` averages ``(d_i + d_j) / 2``, ``i <= j``, sorted ``[M]``."""
    d = np.asarray(d, dtype=float).ravel()
    i, j = np.triu_indices(d.size)
    return np.sort((d[i] + d[j]) / 2)


def signed_rank_null(n: int) -> np.ndarray:
    """Exact null distribution of the signed-rank statistic ``T+`` for ``n`` untied non-zero
    differences: ``[M + 1]`` probabilities of ``T+ = 0 .. M``, ``M = n (n + 1) / 2``."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):  # each rank is in T+ or not: add the shifted counts
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return counts / 2.0 ** n


def hodges_lehmann(d: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(estimate, low, high, achieved confidence) from the Walsh averages of ``d`` (see the module
    docstring); NaNs when ``d`` is empty, the interval NaN when ``n`` is too small for ``confidence``."""
    d = np.asarray(d, dtype=float).ravel()
    if d.size == 0:
        return (math.nan,) * 4
    w = walsh_averages(d)
    estimate = float(np.median(w))
    cdf = np.cumsum(signed_rank_null(d.size))
    alpha = 1 - confidence
    ok = np.nonzero(cdf <= alpha / 2)[0]  # t with P(T+ <= t) <= alpha / 2
    if ok.size == 0:
        return estimate, math.nan, math.nan, math.nan
    k = int(ok[-1]) + 1  # 1-based order statistic
    return estimate, float(w[k - 1]), float(w[w.size - k]), float(1 - 2 * cdf[k - 1])


@dataclass(frozen=True)
class PairedComparison:
    """Condition ``b`` against the reference ``a`` on one event-level ``value`` (differences ``b - a``)."""

    value: str
    condition_a: str
    condition_b: str
    n_events: int
    n_zero: int
    n_b_higher: int
    n_b_lower: int
    mean_a: float
    mean_b: float
    median_difference: float
    hodges_lehmann: float
    hl_low: float
    hl_high: float
    hl_confidence: float
    confidence: float
    rank_biserial: float
    wilcoxon: WilcoxonResult

    @property
    def share_b_higher(self) -> float:
        return self.n_b_higher / self.n_events if self.n_events else math.nan

    def summary(self) -> str:
        conf = f"{100 * self.confidence:g}%"
        return (f"{self.value}: {self.condition_b} - {self.condition_a} over {self.n_events} events: higher under "
                f"{self.condition_b} in {self.n_b_higher} ({100 * self.share_b_higher:.0f}%), lower in {self.n_b_lower}, "
                f"equal in {self.n_zero}; Hodges-Lehmann {self.hodges_lehmann:+.4g} "
                + (f"[{conf} CI {self.hl_low:+.4g}, {self.hl_high:+.4g}]" if math.isfinite(self.hl_low)
                   else f"(no {conf} interval: too few events)")
                + f"; matched-pairs rank-biserial r = {self.rank_biserial:+.2f}; "
                + self.wilcoxon.summary((self.condition_a, self.condition_b)))

    def to_dict(self) -> dict[str, Any]:
        out = {k: _plain(v) for k, v in asdict(self).items() if k != "wilcoxon"}
        out["share_b_higher"] = _plain(self.share_b_higher)
        out["wilcoxon"] = self.wilcoxon.to_dict()
        out["summary"] = self.summary()
        out["methods"] = ("Wilcoxon signed-rank on the event means (zeros dropped, exact without ties up to 50 "
                          "non-zero differences, else normal approximation); Hodges-Lehmann estimate = median of the "
                          "Walsh averages of all differences, interval from the Walsh averages and the exact "
                          "signed-rank null distribution; matched-pairs rank-biserial over the non-zero differences")
        return out


def paired_comparison(a: Sequence[float], b: Sequence[float], *, value: str = "value",
                      labels: tuple[str, str] = ("a", "b"), confidence: float = 0.95) -> PairedComparison:
    """:class:`PairedComparison` of paired event values ``a[i]``, ``b[i]`` (events with a NaN dropped)."""
    x, y = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired values need the same length, got {x.size} and {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    d = y - x
    nz = d[d != 0]
    ranks = sps.rankdata(np.abs(nz))
    t_plus, t_minus = float(ranks[nz > 0].sum()), float(ranks[nz < 0].sum())
    r = (t_plus - t_minus) / (t_plus + t_minus) if nz.size else math.nan
    est, low, high, achieved = hodges_lehmann(d, confidence)
    return PairedComparison(
        value=value, condition_a=labels[0], condition_b=labels[1], n_events=int(d.size), n_zero=int((d == 0).sum()),
        n_b_higher=int((d > 0).sum()), n_b_lower=int((d < 0).sum()),
        mean_a=float(x.mean()) if x.size else math.nan, mean_b=float(y.mean()) if y.size else math.nan,
        median_difference=float(np.median(d)) if d.size else math.nan, hodges_lehmann=est, hl_low=low, hl_high=high,
        hl_confidence=achieved, confidence=float(confidence), rank_biserial=r, wilcoxon=wilcoxon_paired(x, y),
    )


@dataclass(frozen=True)
class PageResult:
    """Page's L test of an increasing trend over ordered conditions (``conditions`` in predicted order)."""

    value: str
    conditions: tuple[str, ...]
    n_events: int
    statistic: float
    p_value: float
    method: str

    def summary(self) -> str:
        return (f"Page's trend test on {self.value} ({self.n_events} events x {len(self.conditions)} conditions, "
                f"predicted increasing {' < '.join(self.conditions)}): L = {self.statistic:g}, one-sided p = "
                f"{self.p_value:.3g} ({self.method})")

    def to_dict(self) -> dict[str, Any]:
        return {**{k: _plain(v) for k, v in asdict(self).items()}, "conditions": list(self.conditions),
                "summary": self.summary()}


def page_trend(table: pd.DataFrame | np.ndarray, *, value: str = "value", conditions: Sequence[str] | None = None) -> PageResult:
    """Page's test that the values increase along the columns of ``table`` ``[n_events, n_conditions]``
    (columns in predicted order; rows with a NaN dropped): ``scipy.stats.page_trend_test``, ranks
    within each event (average ranks for ties), exact p for small tables, else the normal approximation."""
    arr = np.asarray(table, dtype=float)
    if conditions is None:
        conditions = [str(c) for c in table.columns] if isinstance(table, pd.DataFrame) else [str(i) for i in range(arr.shape[1])]
    rows = arr[np.isfinite(arr).all(axis=1)]
    if rows.shape[1] < 3:
        raise ValueError(f"Page's test needs at least 3 ordered conditions, got {rows.shape[1]}")
    if rows.shape[0] < 2:
        raise ValueError(f"Page's test needs at least 2 events with every condition, got {rows.shape[0]}")
    res = sps.page_trend_test(rows, method="auto")
    return PageResult(value, tuple(conditions), int(rows.shape[0]), float(res.statistic), float(res.pvalue), str(res.method))
