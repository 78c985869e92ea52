"""How many events does a paired (within-event) study need? Power of the paired Wilcoxon test by
simulation from a pilot's event-level differences. Layer 1 (numpy / scipy).

The pilot gives one difference per event, ``d_i = B_i - A_i`` (the event means under condition B
minus under the reference A, over the pilot's templates and samples). One simulated study of
``n_events`` draws ``n_events`` differences with replacement from the pilot's and runs the two-sided
Wilcoxon signed-rank test (zeros dropped; normal approximation with tie correction, as resampled
differences repeat) at level ``alpha``; power is the share of ``n_sims`` studies that reject, with its
Monte-Carlo standard error ``sqrt(power (1 - power) / n_sims)``. With a given ``effect`` the pilot's
differences are first shifted so that their mean is ``effect`` (their spread kept). Every design
draws from its own generator, ``numpy.random.default_rng([seed, n_events])``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from petri.stats.power import TARGET_POWER, power_dict

__all__ = ["PairedPowerResult", "paired_power", "simulate_paired_power"]


@dataclass
class PairedPowerResult:
    """The simulated power of each number of events (``designs``: n_events, power, mc_se) and the
    smallest that reaches ``target`` (None when none in the grid does)."""

    condition_a: str
    condition_b: str
    value: str
    """the event-level value whose differences are tested (e.g. ``instability``)"""
    effect: float
    """the mean difference ``b - a`` the simulated studies have"""
    effect_source: str
    pilot_events: int
    designs: list[dict[str, Any]]
    smallest: dict[str, Any] | None
    n_sims: int
    alpha: float
    seed: int
    target: float = TARGET_POWER
    method: str = field(default="")
    def head(self) -> str:
        return (f"power of the paired Wilcoxon test on {self.value} ({self.condition_b} - {self.condition_a}, "
                f"two-sided alpha {self.alpha:g}) for a mean difference of {self.effect:+.4g} ({self.effect_source}), "
                f"{self.pilot_events} pilot events, {self.n_sims} simulated studies per design, seed {self.seed}")

    def reached(self, s: dict[str, Any]) -> str:
        return f"{s['n_events']} events reach {100 * self.target:.0f}% (power {s['power']:.2f} +/- {s['mc_se']:.2f})"

    def summary(self) -> str:
        """Its ``head()``, then the smallest number of events reaching the target, or that none does."""
        if self.smallest is None:
            return self.head() + f"; no number of events in the grid reaches {100 * self.target:.0f}%"
        return self.head() + "; " + self.reached(self.smallest)

    to_dict = power_dict


def simulate_paired_power(d: np.ndarray, n_events: int, *, n_sims: int, alpha: float, rng: np.random.Generator) -> float:
    """Share of ``n_sims`` studies of ``n_events`` differences drawn from ``d`` ``[n_pilot]`` whose
    two-sided Wilcoxon signed-rank test rejects at ``alpha`` (a study with no non-zero difference never does)."""
    draws = d[rng.integers(0, d.size, size=(n_sims, n_events))]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = sps.wilcoxon(draws, axis=1, zero_method="wilcox", method="asymptotic").pvalue
    return float(np.mean(np.nan_to_num(np.asarray(p, dtype=float), nan=1.0) < alpha))


def paired_power(differences: Sequence[float], *, events: Sequence[int] = (6, 12, 24, 48, 96),
                 effect: float | None = None, n_sims: int = 1000, alpha: float = 0.05, seed: int = 0,
                 labels: tuple[str, str] = ("a", "b"), value: str = "instability",
                 target: float = TARGET_POWER) -> PairedPowerResult:
    """Power of every number of events in ``events`` from the pilot's event differences (NaNs dropped).
    Raises ``ValueError`` for fewer than 2 pilot differences or a bad grid value."""
    d = np.asarray(differences, dtype=float)
    d = d[np.isfinite(d)]
    if d.size < 2:
        raise ValueError(f"power needs at least 2 pilot events with both conditions, got {d.size}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if n_sims < 10:
        raise ValueError(f"n_sims must be >= 10, got {n_sims}")
    if any(int(n) < 2 for n in events):
        raise ValueError(f"every number of events must be >= 2, got {list(events)}")
    pilot = float(d.mean())
    if effect is None:
        source, eff = "the pilot's", pilot
    else:
        if not math.isfinite(effect):
            raise ValueError(f"effect must be a finite number, got {effect!r}")
        source, eff = "given", float(effect)
        d = d - pilot + eff
    designs = []
    for n in events:
        power = simulate_paired_power(d, int(n), n_sims=n_sims, alpha=alpha, rng=np.random.default_rng([seed, int(n)]))
        designs.append({"n_events": int(n), "power": power, "mc_se": math.sqrt(power * (1 - power) / n_sims)})
    ok = [x for x in designs if x["power"] >= target]
    smallest = min(ok, key=lambda x: x["n_events"]) if ok else None
    method = ("simulation from the pilot's event-level differences: per simulated study, n events' differences drawn "
              "with replacement; two-sided Wilcoxon signed-rank (zeros dropped, normal approximation with tie "
              f"correction) at alpha {alpha:g}; "
              + ("differences as in the pilot" if effect is None else f"differences shifted to mean {eff:+.4g}")
              + f"; templates and samples per event as in the pilot; numpy default_rng([seed={seed}, n_events]) per design")
    return PairedPowerResult(condition_a=labels[0], condition_b=labels[1], value=value, effect=eff, effect_source=source,
                             pilot_events=int(d.size), designs=designs, smallest=smallest, n_sims=int(n_sims),
                             alpha=float(alpha), seed=int(seed), target=target, method=method)
