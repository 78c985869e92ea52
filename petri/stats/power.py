"""How many events are enough? Power of the headline test by simulation from a pilot study.

Layer 1 (numpy / scipy / pandas). The pilot's cells (one value per (event, template) batch: the mean
segment instability, :func:`petri.stats.mixed.cell_values`) are the population. One simulated study of a
design (``n_events`` per group, ``n_templates``) draws ``n_templates`` templates with replacement from
the pilot's templates (one draw shared by both groups: the design crosses them) and ``n_events`` events
with replacement from each group's pilot events; an event's value is the mean of its cells over the
drawn templates (the event-level value of the headline). The headline test (two-sided Mann-Whitney U,
normal approximation with tie correction: resampled events repeat, so the exact null does not apply;
or Welch's t with ``test="t"``) is run at level ``alpha``; power is the share of ``n_sims`` studies that
reject, with its Monte-Carlo standard error ``sqrt(power (1 - power) / n_sims)``.

Effect: by default the pilot's own (difference of the group means of the cells, b - a). With a
given ``effect`` each group's cells are first centred on the pilot's grand mean of group a and group b
is shifted by ``effect`` (instability units), keeping every spread, event and template structure.

Every design draws from its own generator, ``numpy.random.default_rng([seed, n_events, n_templates])``,
so a design's figure does not depend on which other designs are in the grid.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from petri.stats.mixed import cell_matrix

__all__ = ["PowerResult", "simulate_power", "power_from_cells", "smallest_design", "TARGET_POWER", "power_summary",
           "power_dict"]

TARGET_POWER = 0.8
TESTS = ("mannwhitney", "t")


def power_summary(result) -> str:
    """A power result's line: its ``head()``, then the smallest design reaching its target
    (``reached(design)``) or that none in the grid does (``none_reached``)."""
    if result.smallest is None:
        return result.head() + f"; {result.none_reached} reaches {100 * result.target:.0f}%"
    return result.head() + "; " + result.reached(result.smallest)


def power_dict(result) -> dict[str, Any]:
    """A power result as JSON-ready data with its summary."""
    return {**asdict(result), "summary": result.summary()}


@dataclass
class PowerResult:
    """The grid of designs with their simulated power (``designs``: rows with n_events, n_templates,
    batches, power, mc_se) and the design facts a reader needs to trust it."""

    group_a: str
    group_b: str
    effect: float
    effect_source: str
    pilot_events_a: int
    pilot_events_b: int
    pilot_templates: int
    n_sims: int
    alpha: float
    seed: int
    test: str
    designs: list[dict[str, Any]]
    smallest: dict[str, Any] | None
    target: float = TARGET_POWER
    method: str = field(default="")
    none_reached = "no design in the grid"  # class attribute (not a field)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.designs)

    def head(self) -> str:
        return (f"power of the event-level {self.test} test ({self.group_a} vs {self.group_b}, two-sided alpha "
                f"{self.alpha:g}) for effect {self.effect:+.4g} ({self.effect_source}), {self.n_sims} simulated "
                f"studies per design, seed {self.seed}")

    def reached(self, s: dict[str, Any]) -> str:
        return (f"smallest design reaching {100 * self.target:.0f}%: {s['n_events']} events per group x "
                f"{s['n_templates']} templates (power {s['power']:.2f} +/- {s['mc_se']:.2f})")

    summary = power_summary
    to_dict = power_dict


def _event_values(y: np.ndarray, ev: np.ndarray, tpl: np.ndarray) -> np.ndarray:
    """``y`` [E, T]; ``ev`` [S, n] event draws; ``tpl`` [S, k] template draws -> [S, n] event values."""
    cells = y[ev[:, :, None], tpl[:, None, :]]
    with np.errstate(invalid="ignore"):
        return np.nanmean(cells, axis=-1) if np.isnan(cells).any() else cells.mean(axis=-1)


def _pvalues(a: np.ndarray, b: np.ndarray, test: str) -> np.ndarray:
    if test == "t":
        return sps.ttest_ind(a, b, axis=1, equal_var=False).pvalue
    return sps.mannwhitneyu(a, b, axis=1, method="asymptotic", alternative="two-sided").pvalue


def simulate_power(ya: np.ndarray, yb: np.ndarray, n_events: int, n_templates: int, *, n_sims: int = 1000,
                   alpha: float = 0.05, rng: np.random.Generator, test: str = "mannwhitney") -> float:
    """Share of ``n_sims`` simulated studies (see the module docstring) whose test rejects at ``alpha``.
    ``ya``, ``yb``: the pilot cells of each group, ``[n_events_pilot, n_templates_pilot]`` (NaN = missing),
    with the same template columns."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    if n_events < 2 or n_templates < 1:
        raise ValueError(f"a design needs n_events >= 2 and n_templates >= 1, got {n_events}, {n_templates}")
    t = ya.shape[1]
    tpl = rng.integers(0, t, size=(n_sims, n_templates))
    va = _event_values(ya, rng.integers(0, ya.shape[0], size=(n_sims, n_events)), tpl)
    vb = _event_values(yb, rng.integers(0, yb.shape[0], size=(n_sims, n_events)), tpl)
    p = _pvalues(va, vb, test)
    return float(np.mean(np.nan_to_num(p, nan=1.0) < alpha))


def smallest_design(designs: Sequence[dict[str, Any]], target: float = TARGET_POWER) -> dict[str, Any] | None:
    """The design with power >= ``target`` and the fewest batches (then fewest templates), or None."""
    ok = [d for d in designs if d["power"] >= target]
    return min(ok, key=lambda d: (d["batches"], d["n_templates"], d["n_events"])) if ok else None


def power_from_cells(cells: pd.DataFrame, groups: tuple[str, str], *, events: Sequence[int] = (6, 12, 24, 48, 96),
                     templates: Sequence[int] | None = None, effect: float | None = None, n_sims: int = 1000,
                     alpha: float = 0.05, seed: int = 0, test: str = "mannwhitney", value: str = "instability",
                     event_col: str = "event_id", template_col: str = "template_id",
                     group_col: str = "group") -> PowerResult:
    """Power of every design ``events x templates`` (``templates`` defaults to 1, the pilot's count and
    twice it) from the pilot ``cells`` (:func:`petri.stats.mixed.cell_values`). Raises ``ValueError`` naming a
    group with fewer than 2 pilot events, or a bad grid value."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if n_sims < 10:
        raise ValueError(f"n_sims must be >= 10, got {n_sims}")
    a, b = groups
    for g in groups:
        if g not in set(cells[group_col]):
            raise ValueError(f"group {g!r} not found in the pilot's column {group_col!r}")
    data = cells.assign(**{template_col: cells[template_col].astype(str)})
    tpl_ids = sorted(data.loc[data[group_col].isin(groups), template_col].unique())
    ya, yb = (cell_matrix(data, g, tpl_ids, value=value, event_col=event_col, template_col=template_col,
                          group_col=group_col) for g in groups)
    for g, y in zip(groups, (ya, yb)):
        if y.shape[0] < 2:
            raise ValueError(f"group {g!r} has {y.shape[0]} pilot events; power needs at least 2")
    pilot_effect = float(np.nanmean(yb) - np.nanmean(ya))
    if effect is None:
        source = "the pilot's"
        eff = pilot_effect
    else:
        if not math.isfinite(effect):
            raise ValueError(f"effect must be a finite number, got {effect!r}")
        source, eff = "given", float(effect)
        yb = yb - pilot_effect + eff
    templates = tuple(templates) if templates else tuple(sorted({1, len(tpl_ids), 2 * len(tpl_ids)}))
    designs = []
    for k in templates:
        for n in events:
            rng = np.random.default_rng([seed, int(n), int(k)])
            power = simulate_power(ya, yb, int(n), int(k), n_sims=n_sims, alpha=alpha, rng=rng, test=test)
            designs.append({"n_events": int(n), "n_templates": int(k), "batches": 2 * int(n) * int(k),
                            "power": power, "mc_se": math.sqrt(power * (1 - power) / n_sims)})
    method = (
        "simulation from the pilot: per simulated study, templates drawn with replacement from the pilot's "
        f"{len(tpl_ids)} (shared by both groups) and events with replacement within each group "
        f"(pilot: {ya.shape[0]} {a}, {yb.shape[0]} {b}); event value = mean of its (event, template) cells over the "
        "drawn templates; "
        + ("two-sided Mann-Whitney U, normal approximation with tie correction" if test == "mannwhitney"
           else "Welch's two-sample t test")
        + f" at alpha {alpha:g}; "
        + ("effect as in the pilot" if effect is None else f"group {b} shifted so that mean({b}) - mean({a}) = {eff:+.4g}")
        + f"; samples per batch as in the pilot; numpy default_rng([seed={seed}, n_events, n_templates]) per design"
    )
    return PowerResult(str(a), str(b), eff, source, int(ya.shape[0]), int(yb.shape[0]), len(tpl_ids), int(n_sims),
                       float(alpha), int(seed), test, designs, smallest_design(designs), method=method)
