"""The paired statistics of a within-event study (``conditions`` in the study file): every event is
measured under every condition with the same templates, slots and seeds, so each non-reference
condition is compared with the reference *within* events. Never imports torch.

Event means: per (event, condition), the mean segment instability (``instability``, mean flips per
position between two adjacent anchors, from ``segments``) and the mean flips per free position
(``mean_flips_free``, from ``samples``). On them: :func:`petri.stats.within.paired_comparison` (Wilcoxon
signed-rank, Hodges-Lehmann with its Walsh-average interval, matched-pairs rank-biserial, the share
of events higher under the condition) for each condition against the reference; the crossed mixed
model of :mod:`petri.stats.mixed` on the (event, template, condition) cells, condition as the fixed
effect, event and template as random intercepts; for a dose study the same model with the dose as
a numeric fixed effect and Page's trend test over the doses; and the power of the headline paired
test (:mod:`petri.stats.paired_power`). Everything reads the two tables alone, so a stored study
folder is re-analysed from its CSVs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from petri.runs.export import write_csv
from petri.stats.mixed import MixedResult, cell_values, crossed_mixed_model, dose_mixed_model
from petri.stats.paired_power import PairedPowerResult, paired_power
from petri.stats.within import PageResult, PairedComparison, event_condition_means, page_trend, paired_comparison
from petri.study.results.statistics import _num

__all__ = ["PairedStatistics", "paired_statistics", "write_paired", "paired_from_folder", "PAIRED_VALUES", "SUMMARY_COLUMNS"]

PAIRED_VALUES = (("instability", "segments", "mean pair instability"),
                 ("mean_flips_free", "samples", "flips per free position"))
"""(column, table, label) of each event-level value the paired tests read."""

SUMMARY_COLUMNS = ["value", "condition_a", "condition_b", "n_events", "mean_a", "mean_b", "n_b_higher", "n_b_lower",
                   "n_zero", "share_b_higher", "hodges_lehmann", "hl_low", "hl_high", "rank_biserial", "wilcoxon_W",
                   "wilcoxon_p", "wilcoxon_method", "informative"]


def _fmt(v: float, digits: int = 4) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:+.{digits}g}"


@dataclass
class PairedStatistics:
    """Every paired statistic of one within-event study (see the module docstring)."""

    conditions: tuple[str, ...]
    doses: dict[str, float] | None
    comparisons: list[PairedComparison]
    mixed: list[MixedResult]
    dose_mixed: MixedResult | None
    page: list[PageResult]
    power: PairedPowerResult | None
    event_means: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def reference(self) -> str:
        return self.conditions[0]

    @property
    def headline(self) -> PairedComparison | None:
        """The instability comparison of the last condition with the reference (the highest dose of a dose study)."""
        return next((c for c in self.comparisons if c.value == "instability" and c.condition_b == self.conditions[-1]), None)

    def summary_table(self) -> pd.DataFrame:
        """One row per (value, condition against the reference): :data:`SUMMARY_COLUMNS`."""
        rows = []
        for c in self.comparisons:
            rows.append({**{k: getattr(c, k) for k in SUMMARY_COLUMNS if hasattr(c, k)},
                         "share_b_higher": c.share_b_higher, "wilcoxon_W": c.wilcoxon.statistic,
                         "wilcoxon_p": c.wilcoxon.p_value, "wilcoxon_method": c.wilcoxon.method,
                         "informative": c.wilcoxon.informative})
        return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)

    def lines(self) -> list[str]:
        """The statistics as plain lines (the CLI prints them)."""
        out = [c.summary() for c in self.comparisons]
        out += [m.summary() for m in self.mixed]
        if self.dose_mixed is not None:
            out.append(self.dose_mixed.summary())
        out += [p.summary() for p in self.page]
        if self.power is not None:
            out.append(self.power.summary())
        return out + [f"note: {n}" for n in self.notes]

    def markdown(self) -> list[str]:
        """The report's section on the paired statistics."""
        lines = ["## Paired statistics (within events: the headline)", "",
                 f"Reference condition: `{self.reference}`. Differences are condition minus reference per event "
                 "(event means over its templates and samples); the event is the unit.", "",
                 "| value | condition | events | mean ref | mean cond | higher / lower / equal | Hodges-Lehmann [CI] "
                 "| rank-biserial | Wilcoxon W | p |", "|---|---|---|---|---|---|---|---|---|---|"]
        for c in self.comparisons:
            w = c.wilcoxon
            p = f"{w.p_value:.3g} ({w.method})" if w.informative else f"uninformative ({w.n_nonzero} non-zero)"
            lines.append(f"| {c.value} | {c.condition_b} | {c.n_events} | {c.mean_a:.4g} | {c.mean_b:.4g} | "
                         f"{c.n_b_higher} / {c.n_b_lower} / {c.n_zero} | {_fmt(c.hodges_lehmann)} [{_fmt(c.hl_low)}, "
                         f"{_fmt(c.hl_high)}] | {_fmt(c.rank_biserial, 2)} | {w.statistic:g} | {p} |")
        lines += ["", "Wilcoxon signed-rank, two-sided, zero differences dropped (counted as equal); exact without ties "
                  "up to 50 non-zero differences, else the normal approximation. Hodges-Lehmann: median of the Walsh "
                  "averages of all differences; its interval from the Walsh averages and the exact signed-rank null "
                  f"distribution ({100 * (self.comparisons[0].confidence if self.comparisons else 0.95):g}% nominal).", ""]
        for m in self.mixed + ([self.dose_mixed] if self.dose_mixed is not None else []):
            lines += [f"- {m.summary()}"]
        lines += [f"- {p.summary()}" for p in self.page]
        if self.power is not None:
            lines += [f"- {self.power.summary()}"]
        lines += [f"- note: {n}" for n in self.notes]
        return lines + [""]

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "conditions": list(self.conditions),
            "doses": self.doses,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "mixed": [m.to_dict() for m in self.mixed],
            "dose_mixed": self.dose_mixed.to_dict() if self.dose_mixed is not None else None,
            "page": [p.to_dict() for p in self.page],
            "power": self.power.to_dict() if self.power is not None else None,
            "notes": list(self.notes),
        }


def _means(segments: pd.DataFrame, samples: pd.DataFrame, conditions: Sequence[str]) -> pd.DataFrame:
    """Long table of event means: event_id, group, condition, one column per paired value."""
    tables = {"segments": segments, "samples": samples}
    parts = []
    for value, table, _ in PAIRED_VALUES:
        df = tables[table]
        if value in df.columns:
            parts.append(event_condition_means(df, value, conditions=conditions).stack(future_stack=True).rename(value))
    long = pd.concat(parts, axis=1).reset_index()
    groups = segments.groupby("event_id")["group"].first() if "group" in segments.columns else None
    if groups is not None:
        long.insert(1, "group", long["event_id"].map(groups))
    return long


def paired_statistics(segments: pd.DataFrame, samples: pd.DataFrame, conditions: Sequence[str], *,
                      doses: dict[str, float] | None = None, confidence: float = 0.95, seed: int = 0,
                      n_sims: int = 1000, power_events: Sequence[int] = (6, 12, 24, 48, 96),
                      power_condition: str | None = None, effect: float | None = None,
                      alpha: float = 0.05) -> PairedStatistics:
    """Every paired statistic from a paired study's ``segments`` and ``samples`` tables (with a
    ``condition`` column); ``conditions`` in study order (the first is the reference), ``doses``
    condition -> dose for a dose study. The power is that of ``power_condition`` (default: the last
    condition) against the reference on the instability, for a mean difference ``effect`` (default
    the pilot's), at ``alpha``."""
    conditions = tuple(conditions)
    if len(conditions) < 2:
        raise ValueError(f"a paired study needs at least 2 conditions, got {list(conditions)}")
    for name, df in (("segments", segments), ("samples", samples)):
        if "condition" not in df.columns:
            raise ValueError(f"the {name} table has no condition column: is it a paired study's?")
    ref = conditions[0]
    notes: list[str] = []
    comparisons = []
    for value, table, _ in PAIRED_VALUES:
        df = segments if table == "segments" else samples
        if value not in df.columns:
            notes.append(f"{value}: not in the {table} table; skipped")
            continue
        wide = event_condition_means(df, value, conditions=conditions)
        for cond in conditions[1:]:
            comparisons.append(paired_comparison(wide[ref], wide[cond], value=value, labels=(ref, cond),
                                                 confidence=confidence))
    cells = cell_values(segments, group_col="condition", extra=("dose",) if doses else ())
    mixed = []
    for cond in conditions[1:]:
        try:
            mixed.append(crossed_mixed_model(cells, (ref, cond), group_col="condition", confidence=confidence))
        except ValueError as err:
            notes.append(f"mixed model {cond} vs {ref} skipped: {err}")
    dose_mixed, page = None, []
    if doses:
        try:
            dose_mixed = dose_mixed_model(cells, confidence=confidence)
        except ValueError as err:
            notes.append(f"dose mixed model skipped: {err}")
        order = sorted(conditions, key=lambda c: doses[c])
        for value, table, _ in PAIRED_VALUES:
            df = segments if table == "segments" else samples
            if value in df.columns:
                try:
                    page.append(page_trend(event_condition_means(df, value, conditions=order), value=value))
                except ValueError as err:
                    notes.append(f"Page's test on {value} skipped: {err}")
    power = None
    target = power_condition or conditions[-1]
    if target not in conditions[1:]:
        raise ValueError(f"condition {target!r} is not a non-reference condition of the study; have {list(conditions[1:])}")
    wide = event_condition_means(segments, "instability", conditions=conditions)
    d = (wide[target] - wide[ref]).to_numpy(float)
    if np.isfinite(d).sum() >= 2:
        power = paired_power(d, events=power_events, n_sims=n_sims, seed=seed, labels=(ref, target), effect=effect,
                             alpha=alpha)
    else:
        notes.append("power skipped: fewer than 2 events with both conditions")
    return PairedStatistics(conditions, dict(doses) if doses else None, comparisons, mixed, dose_mixed, page, power,
                            _means(segments, samples, conditions), notes)


def write_paired(stats: PairedStatistics, out_dir: str | Path) -> dict[str, Path]:
    """Write ``paired_summary.csv`` (:meth:`PairedStatistics.summary_table`), ``paired_event_means.csv``
    (one row per event and condition) and ``paired_statistics.json`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    paths = {"paired_summary": out / "paired_summary.csv", "paired_event_means": out / "paired_event_means.csv",
             "paired_statistics": out / "paired_statistics.json"}
    write_csv(stats.summary_table(), paths["paired_summary"])
    write_csv(stats.event_means, paths["paired_event_means"])
    paths["paired_statistics"].write_text(json.dumps(_num(stats.to_dict()), indent=1, allow_nan=False) + "\n",
                                          encoding="utf-8")
    return paths


def paired_from_folder(results_dir: str | Path, **kwargs: Any) -> PairedStatistics | None:
    """The paired statistics of a stored study folder (its ``run.json``, ``segments.csv`` and
    ``samples.csv``), or None when the study has no conditions. ``kwargs`` go to :func:`paired_statistics`."""
    folder = Path(results_dir)

    def need(name: str) -> Path:
        if not (folder / name).is_file():
            raise ValueError(f"RESULTS_DIR {folder}: no {name} (is it the output folder of `petri study`?)")
        return folder / name

    need("segments.csv")
    meta = json.loads(need("run.json").read_text(encoding="utf-8"))
    conditions = meta["study"].get("conditions")
    if not conditions:
        return None
    need("samples.csv")
    ids = [c["id"] for c in conditions]
    doses = {c["id"]: float(c["dose"]) for c in conditions} if "dose" in conditions[0] else None
    kwargs.setdefault("seed", int(meta.get("seed", 0)))
    return paired_statistics(pd.read_csv(folder / "segments.csv"), pd.read_csv(folder / "samples.csv"), ids,
                             doses=doses, **kwargs)
