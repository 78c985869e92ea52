"""Many concept pairs, one headline: per-pair event-level comparisons with multiplicity corrections.

Layer 1 (numpy / pandas). A study with k concepts has k(k-1)/2 unordered pairs; each gets its own
event-level Mann-Whitney test (:func:`petri.stats.groups.compare_groups` on one value per event: the mean
instability of that pair's segments over the event's samples and templates). The family is the set of
pairs of one comparison; beside each raw p-value stand

* **Holm** (step-down Bonferroni; controls the family-wise error rate): sort the m p-values ascending,
  ``p_holm[(i)] = max_{j <= i} min(1, (m - j + 1) p_(j))`` (1-based ranks);
* **Benjamini-Hochberg** (controls the false discovery rate, under independence or positive
  dependence): ``p_bh[(i)] = min_{j >= i} min(1, m p_(j) / j)``.

NaN p-values (a pair too rare to test) are left out of the family and stay NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from petri.stats.groups import compare_groups, event_level_values, too_small_note

__all__ = ["holm", "benjamini_hochberg", "pair_comparisons", "PAIR_COLUMNS"]

PAIR_COLUMNS = ["pair", "group_a", "group_b", "n_a", "n_b", "median_a", "median_b", "rank_biserial", "ci_low",
                "ci_high", "u_statistic", "p_value", "p_method", "p_holm", "p_bh", "informative", "note"]


def _finite(p) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, dtype=float).ravel()
    if ((p < 0) | (p > 1)).any():
        raise ValueError("p-values must lie in [0, 1]")
    return p, np.isfinite(p)


def _step_adjusted(p, adjust) -> np.ndarray:
    """``p`` (1-D) adjusted by ``adjust(sorted_p) -> adjusted in that order``, put back in ``p``'s
    order; NaN stays NaN and is not counted among the tests."""
    p, ok = _finite(p)
    out = np.full(p.shape, np.nan)
    q = p[ok]
    if q.size:
        order = np.argsort(q, kind="stable")
        adj = np.empty(q.size)
        adj[order] = adjust(q[order])
        out[ok] = adj
    return out


def holm(p) -> np.ndarray:
    """Holm-adjusted p-values, same order and shape as ``p`` (1-D); NaN stays NaN."""

    def step_down(q: np.ndarray) -> np.ndarray:
        m = q.size
        return np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * q))

    return _step_adjusted(p, step_down)


def benjamini_hochberg(p) -> np.ndarray:
    """Benjamini-Hochberg-adjusted p-values (q-values), same order as ``p``; NaN stays NaN."""

    def step_up(q: np.ndarray) -> np.ndarray:
        m = q.size
        return np.minimum.accumulate(np.minimum(1.0, m * q / np.arange(1, m + 1))[::-1])[::-1]

    return _step_adjusted(p, step_up)


def pair_comparisons(segments: pd.DataFrame, groups: tuple[str, str], *, pair_col: str = "pair",
                     event_col: str = "event_id", group_col: str = "group", value: str = "instability",
                     **kwargs) -> pd.DataFrame:
    """One row per concept pair (sorted by name) with the event-level test of ``groups[0]`` vs
    ``groups[1]`` on that pair's segments, raw and Holm / BH-adjusted p-values (columns
    :data:`PAIR_COLUMNS`). ``kwargs`` go to :func:`petri.stats.groups.compare_groups` (n_bootstrap, seed, ...).
    A pair that cannot be tested (a group with fewer than 2 events having it) gets NaN and a note."""
    a, b = groups
    rows = []
    for pair, seg in segments.groupby(pair_col, sort=True):
        events = event_level_values(seg, value=value, event_col=event_col, group_col=group_col)
        va = events.loc[events[group_col] == a, value].to_numpy(float)
        vb = events.loc[events[group_col] == b, value].to_numpy(float)
        try:
            c = compare_groups(va, vb, unit="event", labels=(str(a), str(b)), **kwargs)
        except ValueError as err:
            rows.append({"pair": pair, "group_a": a, "group_b": b, "n_a": int(np.isfinite(va).sum()),
                         "n_b": int(np.isfinite(vb).sum()), "p_value": np.nan, "informative": False,
                         "note": f"not tested: {err}"})
            continue
        rows.append({"pair": pair, "group_a": a, "group_b": b, "n_a": c.n_a, "n_b": c.n_b, "median_a": c.median_a,
                     "median_b": c.median_b, "rank_biserial": c.rank_biserial, "ci_low": c.ci_low,
                     "ci_high": c.ci_high, "u_statistic": c.u_statistic, "p_value": c.p_value,
                     "p_method": c.p_method, "informative": c.informative,
                     "note": "" if c.informative else "uninformative: " + too_small_note(c.n_a, c.n_b)})
    out = pd.DataFrame(rows).reindex(columns=PAIR_COLUMNS)
    if len(out):
        out["p_holm"] = holm(out["p_value"])
        out["p_bh"] = benjamini_hochberg(out["p_value"])
        out["note"] = out["note"].fillna("")
    return out
