"""Paired comparisons of two configurations on the same units (two models, two tiers, two templates,
the two dishes of the Compare view): Wilcoxon signed-rank on paired instabilities and the exact
McNemar test on paired binary outcomes (e.g. every anchor intact in one and not in the other).

Layer 1 (numpy / scipy / pandas). Pairs are matched on key columns (for a study: ``event_id``, and
``template_id`` + ``sample`` for per-sample outcomes; a sample's seed comes from the study's ids, so the
same key is the same draw of noise under both configurations). Differences are ``b - a``.

Exact McNemar: of the ``n = n01 + n10`` discordant pairs (``n01``: outcome false in a and true in b,
``n10`` the reverse), under the null each is equally likely to fall either way, so
``p = min(1, 2 * P(X <= min(n01, n10)))`` with ``X ~ Binomial(n, 1/2)``; concordant pairs carry no
information. With no discordant pair p = 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

__all__ = ["McNemarResult", "WilcoxonResult", "mcnemar_exact", "wilcoxon_paired", "match_pairs",
           "MIN_PAIRS"]

MIN_PAIRS = 6
"""Below this many non-zero paired differences the Wilcoxon test is flagged uninformative: with 5 the
smallest exact two-sided p is 2 / 2^5 = 0.0625, so nothing can reach 0.05."""


@dataclass(frozen=True)
class McNemarResult:
    n_pairs: int
    both_true: int
    both_false: int
    a_only: int
    b_only: int
    p_value: float
    method: str = "exact McNemar (two-sided binomial test on the discordant pairs)"

    @property
    def informative(self) -> bool:
        """False when the discordant pairs are too few for any result below 0.05 (fewer than 6)."""
        return self.a_only + self.b_only >= MIN_PAIRS

    def summary(self, outcome: str = "outcome", labels: tuple[str, str] = ("a", "b")) -> str:
        text = (f"exact McNemar on {outcome} ({self.n_pairs} pairs): true in {labels[0]} only {self.a_only}, in "
                f"{labels[1]} only {self.b_only}, both {self.both_true}, neither {self.both_false}")
        if not self.informative:
            return text + f"; UNINFORMATIVE: {self.a_only + self.b_only} discordant pairs (needs at least {MIN_PAIRS})"
        return text + f"; p={self.p_value:.3g}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "informative": self.informative, "summary": self.summary()}


@dataclass(frozen=True)
class WilcoxonResult:
    n_pairs: int
    n_nonzero: int
    median_difference: float
    mean_difference: float
    statistic: float
    p_value: float
    method: str

    @property
    def informative(self) -> bool:
        return self.n_nonzero >= MIN_PAIRS

    def summary(self, labels: tuple[str, str] = ("a", "b")) -> str:
        text = (f"Wilcoxon signed-rank ({self.n_pairs} pairs, {self.n_nonzero} non-zero): median {labels[1]} - "
                f"{labels[0]} = {self.median_difference:+.4g}")
        if not self.informative:
            return text + f"; UNINFORMATIVE: needs at least {MIN_PAIRS} non-zero differences"
        return text + f", W={self.statistic:g}, p={self.p_value:.3g} ({self.method})"

    def to_dict(self) -> dict[str, Any]:
        d = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        return {**d, "informative": self.informative, "summary": self.summary()}


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> McNemarResult:
    """Exact McNemar test of paired booleans ``a[i]``, ``b[i]`` (same length)."""
    x = np.asarray(a, dtype=bool).ravel()
    y = np.asarray(b, dtype=bool).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired outcomes need the same length, got {x.size} and {y.size}")
    a_only, b_only = int((x & ~y).sum()), int((~x & y).sum())
    n = a_only + b_only
    p = 1.0 if n == 0 else float(min(1.0, 2.0 * sps.binom.cdf(min(a_only, b_only), n, 0.5)))
    return McNemarResult(int(x.size), int((x & y).sum()), int((~x & ~y).sum()), a_only, b_only, p)


def wilcoxon_paired(a: Sequence[float], b: Sequence[float]) -> WilcoxonResult:
    """Wilcoxon signed-rank test of ``b - a`` (two-sided; zero differences dropped, scipy's
    ``zero_method="wilcox"``; exact below 50 pairs without ties, else normal approximation)."""
    x = np.asarray(a, dtype=float).ravel()
    y = np.asarray(b, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired values need the same length, got {x.size} and {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    d = y[keep] - x[keep]
    nonzero = int((d != 0).sum())
    if nonzero == 0:
        return WilcoxonResult(int(d.size), 0, 0.0, 0.0, float("nan"), 1.0, "no non-zero difference")
    _, counts = np.unique(np.abs(d[d != 0]), return_counts=True)
    exact = nonzero <= 50 and bool((counts == 1).all())
    res = sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided", method="exact" if exact else "asymptotic")
    method = "exact" if exact else "normal approximation"
    return WilcoxonResult(int(d.size), nonzero, float(np.median(d)), float(np.mean(d)), float(res.statistic),
                          float(res.pvalue), method)


def match_pairs(a: pd.DataFrame, b: pd.DataFrame, keys: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Inner join of ``a`` and ``b`` on ``keys``, keeping ``columns`` as ``<col>_a`` / ``<col>_b``.
    Raises ``ValueError`` naming a missing column, or when no key matches."""
    for name, df in (("first", a), ("second", b)):
        missing = [c for c in (*keys, *columns) if c not in df.columns]
        if missing:
            raise ValueError(f"the {name} table lacks column(s) {missing}")
    cols = [*keys, *columns]
    merged = a[cols].merge(b[cols], on=list(keys), suffixes=("_a", "_b"), validate="one_to_one")
    if merged.empty:
        raise ValueError(f"no unit matches on {list(keys)} between the two tables")
    return merged
