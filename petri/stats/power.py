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

Size: every design is also simulated at effect 0 (group b's cells centred on group a's mean, the same
draws as its power: the same generator seed), and the share that reject there is the test's size,
with its Wilson 95 % interval over the ``n_sims`` studies. The resampled test need not hold its level
(ranks see spread and skew that a mean shift leaves alone; a few drawn templates carry their own
group difference), so a design's size is **held** when its estimated size is at most
:data:`SIZE_FACTOR` × ``alpha`` (Bradley's liberal criterion, 1978: 0.075 at alpha 0.05). The
recommended design (:func:`smallest_design`) is the smallest reaching :data:`TARGET_POWER` whose size
is held; a smaller one that reaches the power with an inflated size is named as not recommended.

Effect: by default the pilot's own (difference of the group means of the cells, b - a). With a
given ``effect`` each group's cells are first centred on the pilot's grand mean of group a and group b
is shifted by ``effect`` (instability units), keeping every spread, event and template structure.

Every design draws from its own generator, ``numpy.random.default_rng([seed, n_events, n_templates])``,
so a design's figure does not depend on which other designs are in the grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from petri.core.wording import counted
from petri.stats.calibration import wilson_interval
from petri.stats.mixed import cell_matrix

__all__ = ["PowerResult", "simulate_power", "power_from_cells", "smallest_design", "inflated_designs", "size_held",
           "TARGET_POWER", "SIZE_FACTOR", "power_dict"]

TARGET_POWER = 0.8
#: A design's size (rejection rate at effect 0) is held when it is at most this many times alpha.
SIZE_FACTOR = 1.5
TESTS = ("mannwhitney", "t")


def power_dict(result) -> dict[str, Any]:
    """A power result as JSON-ready data with its summary."""
    return {**asdict(result), "summary": result.summary()}


@dataclass
class PowerResult:
    """The grid of designs with their simulated power and size (``designs``: rows with n_events,
    n_templates, batches, power, mc_se, size, size_low, size_high (its Wilson 95 % interval) and
    size_held), the recommended design (``smallest``), the smaller designs that reach the power only
    with an inflated size (``not_recommended``) and the design facts a reader needs to trust it."""

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
    size_limit: float = 0.0
    not_recommended: list[dict[str, Any]] = field(default_factory=list)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.designs)

    def head(self) -> str:
        return (f"power of the event-level {self.test} test ({self.group_a} vs {self.group_b}, two-sided alpha "
                f"{self.alpha:g}) for effect {self.effect:+.4g} ({self.effect_source}), {self.n_sims} simulated "
                f"studies per design, seed {self.seed}")

    def summary(self) -> str:
        """One paragraph: what was simulated, the recommended design with its power and size, and the
        designs that reach the power but are not recommended for their size."""
        head = self.head()
        held = (f"size held (at most {self.size_limit:.3g} of studies rejected at effect 0, "
                f"{self.size_limit / self.alpha:g} x alpha)")
        target = f"{100 * self.target:.0f}% power"
        if self.smallest is None:
            text = head + f"; no design in the grid reaches {target} with its {held}"
        else:
            s = self.smallest
            text = head + (f"; smallest design reaching {target} with its {held}: {_design(s)} (power "
                           f"{s['power']:.2f} +/- {s['mc_se']:.2f}, size {_size(s)})")
            if s["size_high"] > self.size_limit:
                text += (f"; its size's 95% interval reaches above {self.size_limit:.3g}: more simulated studies "
                         "would settle whether it holds")
        if self.not_recommended:
            d, more = self.not_recommended[0], len(self.not_recommended) - 1
            text += (f"; NOT recommended: {_design(d)} reaches power {d['power']:.2f} but its test rejects "
                     f"{_size(d)} of studies at effect 0, above {self.size_limit:.3g}"
                     + (f" (so do {counted(more, 'other smaller design')})" if more else ""))
        return text

    to_dict = power_dict


def _design(d: dict[str, Any]) -> str:
    return f"{counted(d['n_events'], 'event')} per group x {counted(d['n_templates'], 'template')}"


def _size(d: dict[str, Any]) -> str:
    return f"{d['size']:.3f} [95% {d['size_low']:.3f}, {d['size_high']:.3f}]"


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


def size_held(size: float, alpha: float) -> bool:
    """Whether a test whose estimated size (rejection rate at effect 0) is ``size`` holds level
    ``alpha``: ``size <= SIZE_FACTOR * alpha``."""
    return size <= SIZE_FACTOR * alpha + 1e-12


def _order(d: dict[str, Any]) -> tuple:
    return d["batches"], d["n_templates"], d["n_events"]


def smallest_design(designs: Sequence[dict[str, Any]], target: float = TARGET_POWER) -> dict[str, Any] | None:
    """The design with power >= ``target`` whose size is held (``size_held``, where the rows have it)
    and the fewest batches (then fewest templates), or None."""
    ok = [d for d in designs if d["power"] >= target and d.get("size_held", True)]
    return min(ok, key=_order) if ok else None


def inflated_designs(designs: Sequence[dict[str, Any]], chosen: dict[str, Any] | None,
                     target: float) -> list[dict[str, Any]]:
    """The designs reaching ``target`` with an inflated size that are smaller than ``chosen`` (all of
    them when nothing is chosen), smallest first."""
    bad = [d for d in designs if d["power"] >= target and not d["size_held"]]
    return sorted((d for d in bad if chosen is None or _order(d) < _order(chosen)), key=_order)


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
    y_null = yb - pilot_effect  # group b centred on group a's mean: effect 0
    if effect is None:
        source = "the pilot's"
        eff = pilot_effect
    else:
        if not math.isfinite(effect):
            raise ValueError(f"effect must be a finite number, got {effect!r}")
        source, eff = "given", float(effect)
        yb = y_null + eff
    templates = tuple(templates) if templates else tuple(sorted({1, len(tpl_ids), 2 * len(tpl_ids)}))
    designs = []
    for k in templates:
        for n in events:
            power, size = (simulate_power(ya, y, int(n), int(k), n_sims=n_sims, alpha=alpha, test=test,
                                          rng=np.random.default_rng([seed, int(n), int(k)])) for y in (yb, y_null))
            low, high = wilson_interval(round(size * n_sims), n_sims)
            designs.append({"n_events": int(n), "n_templates": int(k), "batches": 2 * int(n) * int(k),
                            "power": power, "mc_se": math.sqrt(power * (1 - power) / n_sims),
                            "size": size, "size_low": low, "size_high": high, "size_held": size_held(size, alpha)})
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
        + f"; size: the same draws at effect 0, held when at most {SIZE_FACTOR:g} x alpha (Bradley's liberal "
          "criterion), with its Wilson 95% interval"
    )
    smallest = smallest_design(designs)
    return PowerResult(str(a), str(b), eff, source, int(ya.shape[0]), int(yb.shape[0]), len(tpl_ids), int(n_sims),
                       float(alpha), int(seed), test, designs, smallest, method=method, size_limit=SIZE_FACTOR * alpha,
                       not_recommended=inflated_designs(designs, smallest, TARGET_POWER))
